#pragma once
// Counter-based random numbers for synthetic weights: every row of every tensor is a pure function of
// (seed, tensor name, row), so rows can be generated in any order, on any thread, in any chunking, and
// the output is bit-identical everywhere (integer arithmetic only up to one float multiply).
#include <cstdint>
#include <string_view>

namespace kvtax::synth {

inline uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

inline uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

inline uint64_t row_state(uint64_t seed, uint64_t tensor_hash, uint64_t row) {
  uint64_t s = seed ^ (tensor_hash * 0xd6e8feb86659fd93ull);
  s ^= splitmix64(s) + row * 0x9e3779b97f4a7c15ull;
  splitmix64(s);
  return s;
}

// Approximately standard normal: Irwin-Hall sum of four 16-bit uniforms, centred and scaled to unit
// variance (range +-3.46). Cheaper than Box-Muller and free of libm differences.
inline float normal(uint64_t& s) {
  const uint64_t r = splitmix64(s);
  const uint32_t sum = uint32_t(r & 0xffff) + uint32_t((r >> 16) & 0xffff) + uint32_t((r >> 32) & 0xffff) +
                       uint32_t(r >> 48);
  // E[sum] = 4 * 32767.5, Var = 4 * (65536^2 - 1) / 12
  constexpr double kMean = 4 * 32767.5, kInvStd = 1.0 / 37837.227237206;  // sqrt(4 * (65536^2 - 1) / 12)
  return float((double(sum) - kMean) * kInvStd);
}

}  // namespace kvtax::synth
