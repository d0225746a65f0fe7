#pragma once
// The seam between the sweep and whatever serves the model: the in-process engine, or a client of an
// OpenAI-compatible server. The sweep only builds requests and reads results; it never sees the engine.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/arm.h"

namespace kvtax::harness {

struct GenerateRequest {
  std::string user_message;     // one user turn, no system prompt; the runner applies the chat template
  int max_tokens = 64;          // greedy decoding; thinking must be off
  Arm arm;                      // KV codec + policy for this run
  size_t reserve_bytes = 0;     // KV reservation to report capacity_tokens for (0: the runner's default)
  // Prefix reuse. false: the run is isolated, nothing from an earlier request may be reused.
  // true: the runner may reuse (and keep) cached prompt state; it reports what it reused.
  bool allow_prefix_cache = false;
  // Teacher forcing for KLD: when non-empty the runner does not sample; it feeds these tokens as the
  // answer and returns, for each of them, the log-probabilities of the next token *before* it.
  std::vector<int32_t> teacher_tokens;
  // Return next-token log-probabilities per answer position (generated or teacher-forced).
  bool want_logprobs = false;
  int logprobs_top_k = 0;       // 0: full vocabulary; k > 0: the k most likely tokens
};

// Log-probabilities of the next token at one answer position. `ids` empty: `logprobs` covers the whole
// vocabulary (index = token id). Otherwise logprobs[i] belongs to ids[i] (a top-k subset).
struct PositionLogprobs {
  std::vector<int32_t> ids;
  std::vector<float> logprobs;
};

struct GenerateResult {
  std::string text;                    // decoded answer
  std::vector<int32_t> tokens;         // answer tokens (the teacher tokens when teacher-forced)
  int prompt_tokens = 0;               // templated prompt, counted by the engine
  int generated_tokens = 0;            // counted by the engine (server `usage`), not by stream chunks
  double ttft_s = 0;                   // request start to first generated token (covers prefill)
  double total_s = 0;                  // request start to last token
  std::vector<double> itl_s;           // gaps between consecutive generated tokens
  size_t peak_rss = 0;                 // bytes; peak reset at run start, includes weights
  size_t kv_bytes = 0;                 // bytes held by the KV cache at the end of the run
  size_t scratch_peak = 0;             // bytes of attention/activation scratch at its peak
  double bytes_per_token = 0;          // KV bytes per cached token under this arm
  size_t capacity_tokens = 0;          // tokens that fit in the reservation under this arm
  int reused_prefix_tokens = 0;        // prompt tokens served from a prefix cache
  std::vector<PositionLogprobs> next_token_logprobs;  // when want_logprobs
  nlohmann::json extra;                // runner-specific fields, copied into the raw results as-is
};

class Runner {
 public:
  virtual ~Runner() = default;
  // One line naming the runner and model, for logs and results metadata.
  virtual std::string describe() const = 0;
  // Model identity (file, architecture, quantisation...) recorded with the results; resuming with
  // different metadata is refused.
  virtual nlohmann::json model_info() const { return {{"describe", describe()}}; }
  // Throws kvtax::Error when this runner cannot serve the arm (unknown codec, unsupported policy).
  // Called for every arm before the sweep starts, so a bad arm fails in seconds, not hours in.
  virtual void check_arm(const Arm& arm) const = 0;
  // Tokens of the chat-templated prompt for one user message (transcript lengths are set with it).
  virtual size_t count_prompt_tokens(const std::string& user_message) = 0;
  // One isolated run. Throws std::bad_alloc on allocation failure (recorded as OOM) or kvtax::Error.
  virtual GenerateResult generate(const GenerateRequest& req) = 0;
  // With process isolation each generate runs in a forked child; threads do not survive fork(), so a
  // runner that owns a thread pool recreates it here (called once in the child, before generate).
  virtual void on_child_start() {}
};

nlohmann::json to_json(const GenerateResult& r);
GenerateResult result_from_json(const nlohmann::json& j);  // throws kvtax::Error on missing/ill-typed fields

}  // namespace kvtax::harness
