#pragma once
// Seeded N(0, 1) test inputs shared by the kernel tests.
#include <cstdint>
#include <random>
#include <vector>

inline std::vector<float> random_normal(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}
