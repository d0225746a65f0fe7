// kvtax run: generate from a prompt, streaming text, then report speed and memory.
#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "attn/cpu/attention.h"
#include "cli/command.h"
#include "cli/engine_options.h"
#include "model/default_model.h"
#include "core/error.h"
#include "core/memory.h"
#include "engine/device.h"
#include "engine/generate.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace kvtax::cli {
namespace {

struct RunOptions {
  EngineOptions engine;
  std::string prompt, prompt_file, stats_json;
  bool chat = false;
  int n = 128;
  SamplerOptions sampler;
  std::vector<std::string> stop;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read prompt file '{}'", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void run(const RunOptions& o) {
  check_device_name(o.engine.device);  // before loading: a build without the backend says so at once
  const std::string model_path = model_or_default(o.engine.model);
  auto model = Model::load(model_path);
  const ModelConfig& c = model->config();
  const tok::Tokenizer& tokenizer = model->tokenizer();
  const std::string text = o.prompt_file.empty() ? o.prompt : read_file(o.prompt_file);

  std::vector<int32_t> prompt;
  if (o.chat) {
    const tok::ChatTemplate tmpl = tok::detect_chat_template(model->file());
    prompt = tokenizer.encode(tok::apply_chat_template(tmpl, {{"user", text}}, true), /*add_special=*/true, /*parse_special=*/true);
  } else {
    prompt = tokenizer.encode(text, /*add_special=*/true, /*parse_special=*/false);
  }
  const int ctx = o.engine.ctx > 0 ? o.engine.ctx : int(std::min<uint32_t>(c.context_length ? c.context_length : 4096, 32768));
  if (int(prompt.size()) + 1 > ctx)
    fail("context overflow: the prompt has {} tokens, the context holds {} (raise --ctx)", prompt.size(), ctx);

  // The CPU path (no --device) is the Forward over a ThreadPool; a device keeps weights, KV and activations
  // in its own memory and only the sampling stays here.
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<Forward> cpu;
  std::unique_ptr<DeviceBackend> dev;
  std::unique_ptr<DeviceDecoder> dec;
  if (o.engine.device == "cpu") {
    if (!o.engine.kv_reserve.empty()) fail("--kv-reserve applies with --device (device KV pages)");
    pool = std::make_unique<ThreadPool>(o.engine.threads);
    const int batch = o.engine.batch ? o.engine.batch : kCpuPrefillChunk;
    cpu = std::make_unique<Forward>(*model, o.engine.kv_spec(), ctx, batch, *pool);
  } else {
    dev = open_device(o.engine.device, *model);
    dec = dev->decoder(o.engine.kv_spec(), ctx, o.engine.kv_reserve_bytes());
    std::fprintf(stderr, "%s\nKV cache: %zu tokens in %.2f GiB (%s, %zu bytes per token)\n", dev->describe().c_str(),
                 dec->capacity_tokens(), dec->kv_bytes_reserved() / 1073741824.0, o.engine.kv_spec().str().c_str(),
                 dec->kv_bytes_per_token());
  }
  Decoder& fw = cpu ? static_cast<Decoder&>(*cpu) : *dec;
  GenerateOptions g;
  g.max_tokens = std::min(o.n, ctx - int(prompt.size()));
  g.prefill_chunk = o.engine.batch;
  g.sampler = o.sampler;
  g.stop = o.stop;
  g.on_text = [](const std::string& s) {
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
    return true;
  };
  const GenerateOutput out = generate(fw, prompt, g);
  const auto& st = out.stats;
  const size_t peak = peak_rss_bytes();
  const KvSpec spec = o.engine.kv_spec();
  const size_t kv_used = cpu ? cpu->cache().bytes_used() : dec->kv_bytes_used();
  if (cpu)
    std::fprintf(stderr,
                 "\n\nprompt %d tokens, prefill %.2f tok/s, TTFT %.3f s | generated %d tokens, decode %.2f tok/s | "
                 "stop: %s | KV %.1f MiB (%s/%s) | peak RSS %.1f MiB | threads %d\n",
                 st.prompt_tokens, st.prefill_tok_s(), st.ttft_s, st.generated_tokens, st.decode_tok_s(),
                 st.stop_reason.c_str(), kv_used / 1048576.0, spec.k.c_str(), spec.v.c_str(), peak / 1048576.0,
                 pool->size());
  else
    std::fprintf(stderr,
                 "\n\nprompt %d tokens, prefill %.2f tok/s, TTFT %.3f s | generated %d tokens, decode %.2f tok/s | "
                 "stop: %s | KV %.1f MiB (%s/%s) | device %s, peak %.1f MiB | peak RSS %.1f MiB\n",
                 st.prompt_tokens, st.prefill_tok_s(), st.ttft_s, st.generated_tokens, st.decode_tok_s(),
                 st.stop_reason.c_str(), kv_used / 1048576.0, spec.k.c_str(), spec.v.c_str(), o.engine.device.c_str(),
                 dev->peak_device_bytes() / 1048576.0, peak / 1048576.0);
  if (!o.stats_json.empty()) {
    nlohmann::json j = {
        {"model", model_path}, {"device", o.engine.device}, {"context", ctx},
        {"kv_k", spec.k}, {"kv_v", spec.v},
        {"prompt_tokens", st.prompt_tokens}, {"generated_tokens", st.generated_tokens},
        {"ttft_s", st.ttft_s}, {"prefill_tok_s", st.prefill_tok_s()}, {"decode_tok_s", st.decode_tok_s()},
        {"total_s", st.total_s}, {"stop_reason", st.stop_reason},
        {"peak_rss_bytes", peak}, {"weight_bytes", model->weight_bytes()},
        {"kv_bytes", kv_used},
    };
    if (cpu) {
      j["threads"] = pool->size();
      j["kv_bytes_reserved"] = cpu->cache().bytes_reserved();
      j["kv_bytes_per_token"] = cpu->cache().bytes_per_token();
      j["scratch_peak_bytes"] = cpu->scratch_bytes() + attention_scratch_peak();
    } else {
      j["kv_bytes_reserved"] = dec->kv_bytes_reserved();
      j["kv_bytes_per_token"] = dec->kv_bytes_per_token();
      j["kv_capacity_tokens"] = dec->capacity_tokens();
      j["scratch_peak_bytes"] = dec->scratch_bytes();
      j["device_weight_bytes"] = dev->weight_bytes();
      j["device_peak_bytes"] = dev->peak_device_bytes();
    }
    std::ofstream f(o.stats_json);
    if (!(f << j.dump(2) << "\n")) fail("cannot write stats to '{}'", o.stats_json);
  }
}

const bool registered = add_command({"run", "Generate text from a prompt with a GGUF model", [](CLI::App& sub) {
  auto o = std::make_shared<RunOptions>();
  add_engine_options(sub, o->engine);
  sub.add_option("--kv-reserve", o->engine.kv_reserve,
                 "With --device: device memory for KV pages, e.g. 8GiB (default: enough for --ctx)");
  auto* p = sub.add_option("-p,--prompt", o->prompt, "Prompt text");
  auto* f = sub.add_option("-f,--file", o->prompt_file, "Read the prompt from a file");
  p->excludes(f);
  sub.add_flag("--chat", o->chat, "Wrap the prompt in the model's chat template (thinking off)");
  sub.add_option("-n,--n-predict", o->n, "Tokens to generate")->check(CLI::NonNegativeNumber);
  sub.add_option("--temp", o->sampler.temperature, "Temperature (0: greedy)")->check(CLI::NonNegativeNumber);
  sub.add_option("--top-k", o->sampler.top_k, "Top-k (0: off)");
  sub.add_option("--top-p", o->sampler.top_p, "Top-p (1: off)")->check(CLI::Range(0.0, 1.0));
  sub.add_option("--min-p", o->sampler.min_p, "Min-p (0: off)")->check(CLI::Range(0.0, 1.0));
  sub.add_option("--repeat-penalty", o->sampler.repeat_penalty, "Repetition penalty (1: off)");
  sub.add_option("--repeat-last-n", o->sampler.repeat_last_n, "Tokens the penalty looks back over");
  sub.add_option("--seed", o->sampler.seed, "Sampling seed");
  sub.add_option("--stop", o->stop, "Stop string (repeatable)");
  sub.add_option("--stats-json", o->stats_json, "Write timings and memory as JSON to this file");
  sub.callback([o, p, f] {
    if (p->count() == 0 && f->count() == 0) fail("give a prompt with -p TEXT or -f FILE");
    run(*o);
  });
}});

}  // namespace
}  // namespace kvtax::cli
