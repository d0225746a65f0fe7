#pragma once
// Shared helpers for the KV tests: seeded random vectors.
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace kvtax::testing {

inline std::vector<float> gaussian(size_t n, uint64_t seed, float sigma = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

// Gaussian with a few large channels, like real K activations (same channels in every row).
inline std::vector<float> outliers(size_t rows, int d, uint64_t seed) {
  auto v = gaussian(rows * d, seed);
  for (size_t r = 0; r < rows; ++r)
    for (int c : {3, 17, d / 2 + 5}) v[r * d + c] *= 25.0f;
  return v;
}

}  // namespace kvtax::testing
