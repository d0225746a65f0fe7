#pragma once
// The sampling chain written plainly: every logit copied into (logit, id) pairs and scanned (greedy) or sorted, then
// top-k, top-p, min-p and the draw, as the sampler ran until session 21. The reference its faster form is tested
// against, draw for draw (tests/sampler_test.cpp), and timed beside (bench/sampler_bench.cpp). No repetition penalty.
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "engine/sampler.h"

namespace kvtax {

class ReferenceSampler {
 public:
  explicit ReferenceSampler(const SamplerOptions& o) : o_(o), rng_(o.seed) {}
  int32_t sample(const float* logits, int n_vocab);

 private:
  SamplerOptions o_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> cand_;
  std::vector<double> p_;
};

}  // namespace kvtax
