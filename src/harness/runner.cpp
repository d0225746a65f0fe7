#include "harness/runner.h"

#include "core/error.h"

namespace kvtax::harness {

nlohmann::json to_json(const GenerateResult& r) {
  nlohmann::json lp = nlohmann::json::array();
  for (const auto& p : r.next_token_logprobs) lp.push_back({{"ids", p.ids}, {"logprobs", p.logprobs}});
  return {{"text", r.text},
          {"tokens", r.tokens},
          {"prompt_tokens", r.prompt_tokens},
          {"generated_tokens", r.generated_tokens},
          {"ttft_s", r.ttft_s},
          {"total_s", r.total_s},
          {"itl_s", r.itl_s},
          {"peak_rss", r.peak_rss},
          {"kv_bytes", r.kv_bytes},
          {"scratch_peak", r.scratch_peak},
          {"bytes_per_token", r.bytes_per_token},
          {"capacity_tokens", r.capacity_tokens},
          {"reused_prefix_tokens", r.reused_prefix_tokens},
          {"next_token_logprobs", lp},
          {"extra", r.extra}};
}

GenerateResult result_from_json(const nlohmann::json& j) {
  try {
    GenerateResult r;
    r.text = j.at("text").get<std::string>();
    r.tokens = j.at("tokens").get<std::vector<int32_t>>();
    r.prompt_tokens = j.at("prompt_tokens").get<int>();
    r.generated_tokens = j.at("generated_tokens").get<int>();
    r.ttft_s = j.at("ttft_s").get<double>();
    r.total_s = j.at("total_s").get<double>();
    r.itl_s = j.at("itl_s").get<std::vector<double>>();
    r.peak_rss = j.at("peak_rss").get<size_t>();
    r.kv_bytes = j.at("kv_bytes").get<size_t>();
    r.scratch_peak = j.at("scratch_peak").get<size_t>();
    r.bytes_per_token = j.at("bytes_per_token").get<double>();
    r.capacity_tokens = j.at("capacity_tokens").get<size_t>();
    r.reused_prefix_tokens = j.at("reused_prefix_tokens").get<int>();
    for (const auto& p : j.at("next_token_logprobs"))
      r.next_token_logprobs.push_back({p.at("ids").get<std::vector<int32_t>>(), p.at("logprobs").get<std::vector<float>>()});
    if (j.contains("extra")) r.extra = j.at("extra");
    return r;
  } catch (const nlohmann::json::exception& e) {
    fail("generate result: {}", e.what());
  }
}

}  // namespace kvtax::harness
