#include "serve/api_response.h"

#include <chrono>
#include <random>

#include <fmt/format.h>

namespace kvtax::serve {

using json = nlohmann::json;

ResponseIds new_response_ids(Endpoint ep, const std::string& model) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  ResponseIds ids;
  ids.endpoint = ep;
  ids.id = fmt::format("{}-{:016x}{:08x}", ep == Endpoint::chat ? "chatcmpl" : "cmpl", rng(), uint32_t(rng()));
  ids.created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  ids.model = model;
  return ids;
}

std::string finish_reason(const std::string& stop_reason) {
  if (stop_reason == "length" || stop_reason == "context") return "length";
  return "stop";
}

json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

json error_json(const ApiError& e) {
  return {{"error",
           {{"message", e.what()},
            {"type", e.type},
            {"param", e.param.empty() ? json(nullptr) : json(e.param)},
            {"code", e.code.empty() ? json(nullptr) : json(e.code)}}}};
}

namespace {

json envelope(const ResponseIds& ids, bool chunk) {
  const bool chat = ids.endpoint == Endpoint::chat;
  return {{"id", ids.id},
          {"object", chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion"},
          {"created", ids.created},
          {"model", ids.model},
          {"system_fingerprint", "kvtax"}};
}

json choice(const ResponseIds& ids, const json& delta_or_text, const json& finish) {
  if (ids.endpoint == Endpoint::chat)
    return {{"index", 0}, {"delta", delta_or_text}, {"logprobs", nullptr}, {"finish_reason", finish}};
  return {{"index", 0}, {"text", delta_or_text}, {"logprobs", nullptr}, {"finish_reason", finish}};
}

json chunk(const ResponseIds& ids, json choice_obj, bool include_usage) {
  json j = envelope(ids, true);
  j["choices"] = json::array({std::move(choice_obj)});
  if (include_usage) j["usage"] = nullptr;
  return j;
}

}  // namespace

json completion_json(const ResponseIds& ids, const std::string& text, const std::string& finish, const Usage& u) {
  json j = envelope(ids, false);
  if (ids.endpoint == Endpoint::chat)
    j["choices"] = json::array({{{"index", 0},
                                 {"message", {{"role", "assistant"}, {"content", text}, {"refusal", nullptr}}},
                                 {"logprobs", nullptr},
                                 {"finish_reason", finish}}});
  else
    j["choices"] = json::array({{{"index", 0}, {"text", text}, {"logprobs", nullptr}, {"finish_reason", finish}}});
  j["usage"] = usage_json(u);
  return j;
}

json first_chunk(const ResponseIds& ids, bool include_usage) {
  if (ids.endpoint == Endpoint::chat)
    return chunk(ids, choice(ids, {{"role", "assistant"}, {"content", ""}, {"refusal", nullptr}}, nullptr), include_usage);
  return chunk(ids, choice(ids, "", nullptr), include_usage);
}

json text_chunk(const ResponseIds& ids, const std::string& text, bool include_usage) {
  if (ids.endpoint == Endpoint::chat) return chunk(ids, choice(ids, {{"content", text}}, nullptr), include_usage);
  return chunk(ids, choice(ids, text, nullptr), include_usage);
}

json finish_chunk(const ResponseIds& ids, const std::string& finish, bool include_usage) {
  if (ids.endpoint == Endpoint::chat) return chunk(ids, choice(ids, json::object(), finish), include_usage);
  return chunk(ids, choice(ids, "", finish), include_usage);
}

json usage_chunk(const ResponseIds& ids, const Usage& u) {
  json j = envelope(ids, true);
  j["choices"] = json::array();
  j["usage"] = usage_json(u);
  return j;
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string sse_event(const json& j) { return "data: " + dump(j) + "\n\n"; }

}  // namespace kvtax::serve
