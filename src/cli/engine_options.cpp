#include "cli/engine_options.h"

#include "kv/plan.h"

namespace kvtax::cli {

void add_engine_options(CLI::App& app, EngineOptions& o) {
  app.add_option("-m,--model", o.model, "GGUF model file (default: the shipped models/kvtax-recall-12m.gguf)")
      ->check(CLI::ExistingFile);
  app.add_option("-t,--threads", o.threads, "Threads (default: all physical cores)")->check(CLI::NonNegativeNumber);
  app.add_option("--ctx", o.ctx, "Context size in tokens (default: the model's, at most 32768)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("-b,--batch", o.batch, kBatchHelp)->check(CLI::Range(1, 8192));
  app.add_option("--kv", o.kv, "KV codec for both K and V (f32 f16 bf16 fp8 q8 q4 q4r tq4 tq3)");
  app.add_option("--kv-k", o.kv_k, "KV codec for K");
  app.add_option("--kv-v", o.kv_v, "KV codec for V");
  app.add_option("--kv-window", o.kv_window, "Keep only the last N tokens (plus sinks)")->check(CLI::NonNegativeNumber);
  app.add_option("--kv-sinks", o.kv_sinks, "With --kv-window: first tokens always kept")->check(CLI::NonNegativeNumber);
  app.add_option("--kv-recent", o.kv_recent, "Keep the most recent N tokens in f16, older ones in the codec")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--device", o.device, "Where the model runs: cpu, or cuda (a CUDA build with a GPU)");
}

size_t EngineOptions::kv_reserve_bytes() const { return kv_reserve.empty() ? 0 : parse_size(kv_reserve); }

KvSpec EngineOptions::kv_spec() const {
  // Both spellings go through the arm parser, so codec names are checked in one place.
  KvSpec spec = parse_kv_spec(kv.empty() ? kv_k : kv);
  if (kv.empty()) spec.v = parse_kv_spec(kv_v).k;
  if (kv_window) spec.policy.window = kv_window;
  if (kv_sinks) spec.policy.sinks = kv_sinks;
  if (kv_recent) spec.policy.recent = kv_recent;
  return spec;
}

}  // namespace kvtax::cli
