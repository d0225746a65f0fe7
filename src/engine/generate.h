#pragma once
// Prefill in chunks, then decode until max_tokens, an end-of-generation token or a stop string.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "model/forward.h"
#include "tokenizer/tokenizer.h"

namespace kvtax {

// The CPU Forward's prefill chunk unless --batch says otherwise.
constexpr int kCpuPrefillChunk = 512;

struct GenerateOptions {
  int max_tokens = 128;
  // Prompt tokens per eval(); 0: as many as the decoder takes (Decoder::max_batch()). A device decoder given the
  // whole prompt splits it into its own chunks, sized for its weights (fewer passes over them than 512-token evals).
  int prefill_chunk = 0;
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

namespace detail { class StopScanner; }

// One sequence's generation, stepped from outside: the caller evaluates what next() returns (alone, or
// batched with other sequences in one ForwardPass call), writes the last token's logits to logits() and
// calls advance(). generate() below drives one Generation over a Forward to its end.
class Generation {
 public:
  // n_past: tokens already in the sequence's cache (o.cached_prefix of them are the prompt's first tokens);
  // max_context: the most tokens that cache may hold. Throws kvtax::Error on an invalid prompt or prefix.
  Generation(const tok::Tokenizer& tokenizer, int n_vocab, const std::vector<int32_t>& prompt,
             const GenerateOptions& o, int n_past, int max_context);
  ~Generation();
  Generation(const Generation&) = delete;
  Generation& operator=(const Generation&) = delete;

  // The tokens to evaluate next: a prefill chunk of at most max_tokens, or the last sampled token.
  // Empty once done() (cancellation is noticed here, before a chunk, and after each sampled token).
  std::span<const int32_t> next(int max_tokens);
  float* logits() { return logits_; }  // [n_vocab]: the last evaluated token's logits go here
  // logits() is `row` from now on (Decoder::logits_row: where the decoder writes them fastest); nullptr: no change.
  void use_logits_row(float* row) { logits_ = row ? row : logits_; }
  void advance();  // after evaluating what next() returned
  // For a decoder that picks where the logits are (Decoder::eval_pick): what to pick after what next() returned,
  // or nullopt where the sampler needs the logits (cuts, a penalty, a teacher, recorded distributions). Call once
  // per next(), then evaluate with eval_pick and pass its token to advance(token) instead of writing logits().
  std::optional<TokenPick> pick();
  void advance(int32_t picked);
  bool done() const { return done_; }
  bool prefilling() const { return !done_ && cursor_ < prompt_.size(); }
  int n_past() const { return n_past_; }      // tokens in the sequence's cache, by this generation's count
  const GenerateOutput& output() const { return out_; }
  GenerateOutput take_output() { return std::move(out_); }

 private:
  bool cancelled() const;
  void sample();  // the decode loop's body: sample, record, check every stop condition
  void finish(const char* reason);

  const tok::Tokenizer& tokenizer_;
  GenerateOptions o_;
  std::vector<int32_t> prompt_;
  Sampler sampler_;
  std::vector<float> own_logits_;
  float* logits_;
  std::unique_ptr<detail::StopScanner> scanner_;
  GenerateOutput out_;
  size_t cursor_ = 0;  // next prompt token to evaluate
  int pending_ = 0;    // tokens handed out by next() and not yet advanced over
  int n_past_ = 0, max_context_ = 0, max_new_ = 0;
  int32_t next_token_ = 0;
  std::optional<int32_t> given_;  // advance(picked)'s token for sample()
  bool pickable_ = false;    // the sampler can pick without the logits, and nothing else needs them
  bool pick_given_ = false;  // pick() returned a pick for the tokens handed out
  bool done_ = false;
  double t0_ = 0, t_last_ = 0;
};

// Continues the sequence in `fw` (its cache may hold a prefix already) with `prompt`, then generates.
GenerateOutput generate(Decoder& fw, const std::vector<int32_t>& prompt, const GenerateOptions& o);

}  // namespace kvtax
