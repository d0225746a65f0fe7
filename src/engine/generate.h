#pragma once
// Prefill in chunks, then decode until max_tokens, an end-of-generation token or a stop string.
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "model/forward.h"

namespace kvtax {

struct GenerateOptions {
  int max_tokens = 128;
  int prefill_chunk = 512;
  SamplerOptions sampler;
  std::vector<std::string> stop;            // stop strings (not included in the text)
  bool stop_at_eog = true;
  // Called with text as it becomes final (never a prefix of a stop string); return false to cancel.
  std::function<bool(const std::string&)> on_text;
  // Teacher forcing: feed these tokens instead of sampling and record each position's log-softmax.
  const std::vector<int32_t>* teacher = nullptr;
  bool want_logprobs = false;  // record each answer position's log-softmax (always on with a teacher)
  // The first `cached_prefix` prompt tokens are already the last tokens in the cache (prefix reuse): they
  // seed the sampler's history but are not evaluated again. Must be < prompt.size().
  int cached_prefix = 0;
  // Checked before every prefill chunk and every token: when set, generation stops (reason "cancel").
  const std::atomic<bool>* cancel = nullptr;
};

struct GenerateStats {
  int prompt_tokens = 0;      // the whole prompt, cached prefix included
  int cached_tokens = 0;      // prompt tokens served from the cache (GenerateOptions::cached_prefix)
  int generated_tokens = 0;
  double ttft_s = 0;      // start → first generated token (whole prefill + first sample)
  double prefill_s = 0;
  double decode_s = 0;    // first token → last token
  double total_s = 0;
  std::vector<double> itl_s;  // per decoded token after the first
  std::string stop_reason;    // length | eog | stop | cancel
  double prefill_tok_s() const { return prefill_s > 0 ? (prompt_tokens - cached_tokens) / prefill_s : 0; }
  double decode_tok_s() const { return decode_s > 0 ? (generated_tokens - 1) / decode_s : 0; }
};

struct GenerateOutput {
  std::vector<int32_t> tokens;
  std::string text;
  GenerateStats stats;
  std::vector<std::vector<float>> logprobs;  // with teacher forcing or GenerateOptions::teacher: per position
};

// Continues the sequence in `fw` (its cache may hold a prefix already) with `prompt`, then generates.
GenerateOutput generate(Decoder& fw, const std::vector<int32_t>& prompt, const GenerateOptions& o);

}  // namespace kvtax
