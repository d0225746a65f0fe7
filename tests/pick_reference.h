#pragma once
// The draw a TokenPick describes, in float64 (tests only): weights exp((l_i - max) * inv_t), the first index whose
// running sum passes u times their total, the last index with weight if rounding leaves it short; 0 with no weight.
#include <algorithm>
#include <cmath>
#include <cstdint>

namespace kvtax::testing {

struct DrawReference {
  int32_t index = 0;
  double margin = 0;  // u * total's distance to the running sums around the pick, relative to the total
};

inline DrawReference draw_reference(const float* l, int n, float inv_t, double u) {
  float mx = -INFINITY;
  for (int i = 0; i < n; ++i) mx = std::max(mx, l[i] * inv_t);
  double total = 0;
  for (int i = 0; i < n; ++i) total += std::exp(double(l[i] * inv_t) - double(mx));
  DrawReference r{0, INFINITY};
  if (!(total > 0 && total < INFINITY)) return r;  // no weight at all (all -inf, or a NaN): index 0
  const double target = u * total;
  double cum = 0;
  int last_weighted = n - 1;
  for (int i = 0; i < n; ++i) {
    const double w = std::exp(double(l[i] * inv_t) - double(mx));
    if (w > 0) last_weighted = i;
    const double before = cum;
    cum += w;
    if (cum > target) {
      r.index = i;
      r.margin = std::min(before > 0 ? target - before : INFINITY, cum - target) / total;
      return r;
    }
  }
  r.index = last_weighted;  // rounding left the sum short of the target
  r.margin = 0;
  return r;
}

}  // namespace kvtax::testing
