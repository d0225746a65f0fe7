#pragma once
// Shared pieces of the CUDA tests: the skip without a device, the float64 attention reference and the
// relative error every kernel check reports.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "cuda/runtime.h"

#define REQUIRE_GPU() \
  if (!kvtax::cuda::available()) GTEST_SKIP() << "no CUDA device"

namespace kvtax::testing {

// float64 causal attention of n queries at positions pos0 .. pos0 + n - 1, each over rows 0 .. its
// position (q: [n][n_heads * d]; k, v: [rows][n_kv * d]; GQA: query head hq reads KV head hq / (n_heads / n_kv)).
// Decode attention is the case n = 1, pos0 = len - 1.
inline std::vector<double> exact_attention(const std::vector<float>& q, const std::vector<float>& k,
                                           const std::vector<float>& v, int n_kv, int n_heads, int d, int pos0,
                                           int n) {
  const int rep = n_heads / n_kv;
  std::vector<double> out(size_t(n) * n_heads * d, 0.0), sc(size_t(pos0 + n));
  for (int i = 0; i < n; ++i)
    for (int hq = 0; hq < n_heads; ++hq) {
      const int h = hq / rep, len = pos0 + i + 1;
      const float* qr = q.data() + (size_t(i) * n_heads + hq) * d;
      double mx = -INFINITY;
      for (int t = 0; t < len; ++t) {
        double a = 0;
        for (int j = 0; j < d; ++j) a += double(qr[j]) * k[(size_t(t) * n_kv + h) * d + j];
        sc[size_t(t)] = a / std::sqrt(double(d));
        mx = std::max(mx, sc[size_t(t)]);
      }
      double l = 0;
      double* o = out.data() + (size_t(i) * n_heads + hq) * d;
      for (int t = 0; t < len; ++t) {
        const double w = std::exp(sc[size_t(t)] - mx);
        l += w;
        for (int j = 0; j < d; ++j) o[j] += w * v[(size_t(t) * n_kv + h) * d + j];
      }
      for (int j = 0; j < d; ++j) o[j] /= l;
    }
  return out;
}

// ||a - b|| / ||b|| (b: the reference).
template <class Ref>
double rel_l2(const std::vector<float>& a, const std::vector<Ref>& b) {
  double e = 0, m = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    const double diff = double(a[i]) - double(b[i]);
    e += diff * diff;
    m += double(b[i]) * double(b[i]);
  }
  return std::sqrt(e / m);
}

}  // namespace kvtax::testing
