#pragma once
// Next-token sampling. Order as llama.cpp's default chain: repetition penalty → top-k → top-p → min-p →
// temperature → draw. temperature <= 0 is greedy (argmax after the penalty).
#include <cstdint>
#include <deque>
#include <random>
#include <vector>

#include "model/decoder.h"

namespace kvtax {

// What a pick returns where the logits hold no token to pick (Sampler::sample, argmax, Decoder::eval_pick).
constexpr int32_t kNoPick = -1;

struct SamplerOptions {
  float temperature = 0.0f;
  int top_k = 40;          // <= 0: off
  float top_p = 0.95f;     // >= 1: off
  float min_p = 0.05f;     // <= 0: off
  float repeat_penalty = 1.0f;  // 1: off
  int repeat_last_n = 64;
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplerOptions& o);
  // Picks the next token from logits[n_vocab] (logits are not modified) and remembers it for the penalty. Greedy and
  // draws with cuts pass over NaN logits; a draw with no cut (the device's, too) finds no finite total with a NaN in
  // it. kNoPick when nothing is left to pick: the forward pass has failed.
  int32_t sample(const float* logits, int n_vocab);
  // Whether a decoder holding the logits can pick as sample() would (Decoder::eval_pick): greedy, or a draw with no
  // cut (no top-k below n_vocab, top-p 1, min-p 0) and no repetition penalty.
  bool pickable(int n_vocab) const;
  // The pick for that decoder; a draw's uniform comes from this sampler's generator, as sample() takes it.
  TokenPick pick();
  void accept(int32_t token);  // add a prompt token to the penalty window
  void reset();

 private:
  const float* penalized(const float* logits, int n);
  void top_candidates(const float* logits, int n, int k);
  int32_t draw(const float* logits, int n);

  SamplerOptions o_;
  std::mt19937_64 rng_;
  std::deque<int32_t> recent_;
  // Reused across calls: sampling allocates nothing per token once they have grown.
  std::vector<std::pair<float, int32_t>> cand_;  // candidates in logit order, largest first
  std::vector<double> prob_;
  std::vector<float> weights_, penalized_;
  std::vector<int32_t> seen_;
};

// The first of the largest logits, NaNs skipped; kNoPick when every logit is NaN.
int32_t argmax(const float* logits, int n);

}  // namespace kvtax
