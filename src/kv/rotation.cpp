#include "kv/rotation.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/error.h"

namespace kvtax::kv {

bool is_pow2(int d) { return d > 0 && (d & (d - 1)) == 0; }

namespace {

// Signs for the largest supported head size; smaller sizes use a prefix. splitmix64 from a fixed seed,
// so every build and every machine rotates identically (the cache never leaves the process, but tests
// and results must be reproducible).
constexpr int kMaxDim = kRotationMaxDim;
const std::vector<float>& signs() {
  static const std::vector<float> s = [] {
    std::vector<float> v(kMaxDim);
    uint64_t x = 0x6b7674617852ull;  // "kvtaxR"
    for (int i = 0; i < kMaxDim; ++i) {
      x += 0x9e3779b97f4a7c15ull;
      uint64_t z = x;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      z ^= z >> 31;
      v[i] = (z >> 63) ? -1.0f : 1.0f;
    }
    return v;
  }();
  return s;
}

void check(int d) {
  if (!is_pow2(d) || d > kMaxDim) fail("rotation needs a power-of-two head_dim <= {}, got {}", kMaxDim, d);
}

void fwht(float* y, int d) {
  for (int len = 1; len < d; len <<= 1)
    for (int i = 0; i < d; i += 2 * len)
      for (int j = i; j < i + len; ++j) {
        const float a = y[j], b = y[j + len];
        y[j] = a + b;
        y[j + len] = a - b;
      }
}

}  // namespace

const float* rotation_signs() { return signs().data(); }

void rotate(const float* x, int d, float* y) {
  check(d);
  const float* s = signs().data();
  for (int i = 0; i < d; ++i) y[i] = x[i] * s[i];
  fwht(y, d);
  const float n = 1.0f / std::sqrt(float(d));
  for (int i = 0; i < d; ++i) y[i] *= n;
}

void unrotate(const float* y, int d, float* x) {
  check(d);
  const float* s = signs().data();
  if (x != y)
    for (int i = 0; i < d; ++i) x[i] = y[i];
  fwht(x, d);
  const float n = 1.0f / std::sqrt(float(d));
  for (int i = 0; i < d; ++i) x[i] *= n * s[i];
}

}  // namespace kvtax::kv
