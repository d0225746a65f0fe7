#include "engine/sampler_reference.h"

#include <algorithm>
#include <cmath>

namespace kvtax {

int32_t ReferenceSampler::sample(const float* logits, int n_vocab) {
  std::vector<std::pair<float, int32_t>>& c = cand_;
  c.resize(size_t(n_vocab));
  for (int i = 0; i < n_vocab; ++i) c[size_t(i)] = {logits[i], i};
  if (o_.temperature <= 0.0f)
    return std::max_element(c.begin(), c.end(), [](const auto& a, const auto& b) { return a.first < b.first; })
        ->second;
  auto by_logit = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  size_t keep = c.size();
  if (o_.top_k > 0 && size_t(o_.top_k) < keep) {
    keep = size_t(o_.top_k);
    std::partial_sort(c.begin(), c.begin() + std::ptrdiff_t(keep), c.end(), by_logit);
  } else {
    std::sort(c.begin(), c.end(), by_logit);
  }
  std::vector<double>& p = p_;
  p.resize(keep);
  double sum = 0;
  for (size_t i = 0; i < keep; ++i) sum += p[i] = std::exp(double(c[i].first - c[0].first));
  if (o_.top_p < 1.0f) {
    double cum = 0;
    for (size_t i = 0; i < keep; ++i)
      if ((cum += p[i] / sum) >= o_.top_p) {
        keep = i + 1;
        break;
      }
  }
  if (o_.min_p > 0.0f) {
    size_t i = 1;
    while (i < keep && p[i] >= o_.min_p * p[0]) ++i;
    keep = i;
  }
  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += p[i] = std::exp(double(c[i].first - c[0].first) / o_.temperature);
  double u = std::uniform_real_distribution<double>(0.0, total)(rng_);
  size_t i = 0;
  while (i + 1 < keep && (u -= p[i]) >= 0) ++i;
  return c[i].second;
}

}  // namespace kvtax
