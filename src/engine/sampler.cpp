#include "engine/sampler.h"

#include <algorithm>
#include <cmath>

namespace kvtax {

int32_t argmax(const float* logits, int n) {
  int32_t best = 0;
  for (int i = 1; i < n; ++i)
    if (logits[i] > logits[best]) best = i;
  return best;
}

Sampler::Sampler(const SamplerOptions& o) : o_(o), rng_(o.seed) {}

void Sampler::reset() {
  rng_.seed(o_.seed);
  recent_.clear();
}

void Sampler::accept(int32_t token) {
  if (o_.repeat_last_n <= 0) return;
  recent_.push_back(token);
  while (int(recent_.size()) > o_.repeat_last_n) recent_.pop_front();
}

int32_t Sampler::sample(const float* logits, int n_vocab) {
  cand_.resize(size_t(n_vocab));
  for (int i = 0; i < n_vocab; ++i) cand_[size_t(i)] = {logits[i], i};
  if (o_.repeat_penalty != 1.0f) {
    seen_.assign(recent_.begin(), recent_.end());
    std::sort(seen_.begin(), seen_.end());
    seen_.erase(std::unique(seen_.begin(), seen_.end()), seen_.end());
    for (int32_t t : seen_) {
      if (t < 0 || t >= n_vocab) continue;
      float& l = cand_[size_t(t)].first;
      l = l > 0 ? l / o_.repeat_penalty : l * o_.repeat_penalty;
    }
  }
  int32_t picked;
  if (o_.temperature <= 0.0f) {
    picked = std::max_element(cand_.begin(), cand_.end(),
                              [](const auto& a, const auto& b) { return a.first < b.first; })->second;
  } else {
    auto by_logit = [](const auto& a, const auto& b) { return a.first > b.first; };
    size_t keep = cand_.size();
    if (o_.top_k > 0 && size_t(o_.top_k) < keep) {
      keep = size_t(o_.top_k);
      std::partial_sort(cand_.begin(), cand_.begin() + keep, cand_.end(), by_logit);
    } else {
      std::sort(cand_.begin(), cand_.end(), by_logit);
    }
    // Probabilities at temperature 1 decide top-p / min-p, as in llama.cpp's chain.
    const float max_l = cand_[0].first;
    std::vector<double>& p = prob_;
    p.resize(keep);
    double sum = 0;
    for (size_t i = 0; i < keep; ++i) sum += p[i] = std::exp(double(cand_[i].first - max_l));
    if (o_.top_p < 1.0f) {
      double cum = 0;
      for (size_t i = 0; i < keep; ++i) {
        cum += p[i] / sum;
        if (cum >= o_.top_p) {
          keep = i + 1;
          break;
        }
      }
    }
    if (o_.min_p > 0.0f) {
      size_t i = 1;
      while (i < keep && p[i] >= o_.min_p * p[0]) ++i;
      keep = i;
    }
    // Draw from the kept candidates at the temperature (p is reused for the weights).
    double total = 0;
    for (size_t i = 0; i < keep; ++i) total += p[i] = std::exp(double(cand_[i].first - max_l) / o_.temperature);
    double u = std::uniform_real_distribution<double>(0.0, total)(rng_);
    size_t i = 0;
    while (i + 1 < keep && (u -= p[i]) >= 0) ++i;
    picked = cand_[i].second;
  }
  accept(picked);
  return picked;
}

}  // namespace kvtax
