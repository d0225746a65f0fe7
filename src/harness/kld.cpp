#include "harness/kld.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "core/error.h"

namespace kvtax::harness {
namespace {

double log_sum_exp(const std::vector<float>& v) {
  double m = -std::numeric_limits<double>::infinity();
  for (float x : v) m = std::max(m, double(x));
  if (!std::isfinite(m)) fail("kld: a distribution has no finite log-probability");
  double s = 0;
  for (float x : v) s += std::exp(double(x) - m);
  return m + std::log(s);
}

}  // namespace

double kl_divergence(const PositionLogprobs& p, const PositionLogprobs& q) {
  if (p.logprobs.empty() || q.logprobs.empty()) fail("kld: empty distribution");
  if (!p.ids.empty() && p.ids.size() != p.logprobs.size()) fail("kld: {} ids but {} log-probs", p.ids.size(), p.logprobs.size());
  if (!q.ids.empty() && q.ids.size() != q.logprobs.size()) fail("kld: {} ids but {} log-probs", q.ids.size(), q.logprobs.size());
  if (p.ids.empty() && q.ids.empty()) {
    if (p.logprobs.size() != q.logprobs.size())
      fail("kld: vocabularies differ ({} vs {} entries)", p.logprobs.size(), q.logprobs.size());
    const double zp = log_sum_exp(p.logprobs), zq = log_sum_exp(q.logprobs);
    double kl = 0;
    for (size_t i = 0; i < p.logprobs.size(); ++i) {
      const double lp = double(p.logprobs[i]) - zp;
      if (!std::isfinite(lp)) continue;  // p_i = 0 contributes nothing
      kl += std::exp(lp) * (lp - (double(q.logprobs[i]) - zq));
    }
    return std::max(0.0, kl);
  }
  // Sparse on at least one side: look Q up by id.
  auto q_of = [&](int32_t id, float floor) -> double {
    if (q.ids.empty()) return (id >= 0 && size_t(id) < q.logprobs.size()) ? q.logprobs[size_t(id)] : floor;
    for (size_t i = 0; i < q.ids.size(); ++i)
      if (q.ids[i] == id) return q.logprobs[i];
    return floor;
  };
  const float q_floor = *std::min_element(q.logprobs.begin(), q.logprobs.end());
  double kl = 0, p_mass = 0, q_mass = 0;
  const size_t n = p.logprobs.size();
  for (size_t i = 0; i < n; ++i) {
    const int32_t id = p.ids.empty() ? int32_t(i) : p.ids[i];
    const double lp = p.logprobs[i];
    const double lq = q_of(id, q_floor);
    if (!std::isfinite(lp)) continue;
    kl += std::exp(lp) * (lp - lq);
    p_mass += std::exp(lp);
    q_mass += std::exp(lq);
  }
  const double p_rest = 1.0 - p_mass, q_rest = std::max(1e-12, 1.0 - q_mass);
  if (p_rest > 1e-12) kl += p_rest * (std::log(p_rest) - std::log(q_rest));
  return std::max(0.0, kl);
}

KldStats kld_over_answer(const std::vector<PositionLogprobs>& ref, const std::vector<PositionLogprobs>& arm) {
  if (ref.size() != arm.size()) fail("kld: reference has {} answer positions, arm has {}", ref.size(), arm.size());
  KldStats s;
  if (ref.empty()) return s;
  double sum = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double k = kl_divergence(ref[i], arm[i]);
    sum += k;
    s.max = std::max(s.max, k);
  }
  s.positions = int(ref.size());
  s.mean = sum / double(ref.size());
  return s;
}

}  // namespace kvtax::harness
