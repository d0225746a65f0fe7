#pragma once
// A tiny seeded generator (SplitMix64): the same seed gives the same transcripts and run orders on
// every platform and standard library, which std::mt19937 + distributions do not promise.
#include <cstdint>
#include <utility>
#include <vector>

namespace kvtax::harness {

struct SplitMix64 {
  uint64_t state;
  explicit SplitMix64(uint64_t seed) : state(seed) {}
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n); n > 0. The modulo bias is irrelevant at the sizes used here.
  uint64_t below(uint64_t n) { return next() % n; }
};

inline uint64_t mix_seed(uint64_t a, uint64_t b) { return SplitMix64(a ^ (b * 0xD1B54A32D192ED03ull)).next(); }

template <typename T>
void seeded_shuffle(std::vector<T>& v, uint64_t seed) {
  SplitMix64 r(seed);
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[r.below(i)]);
}

}  // namespace kvtax::harness
