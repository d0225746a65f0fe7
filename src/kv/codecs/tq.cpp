// TurboQuant-style codecs (MSE variant, no QJL residual): the row is already rotated (rotation.h), so
// its coordinates are ~N(0, |x|^2/d). Each coordinate, normalised to unit variance, is replaced by the
// index of the nearest level of a Lloyd-Max (MSE-optimal) scalar codebook for N(0,1).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "kv/codecs/formats.h"
#include "kv/codecs/layout.h"

namespace kvtax::kv {

namespace {

template <int K>
std::array<float, K> lloyd_max_gaussian() {
  auto pdf = [](double x) { return std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI); };
  auto cdf = [](double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); };
  std::array<double, K> l;
  for (int i = 0; i < K; ++i) l[i] = -2.5 + 5.0 * (i + 0.5) / K;
  for (int it = 0; it < 2000; ++it) {
    std::array<double, K + 1> t;
    t[0] = -INFINITY;
    t[K] = INFINITY;
    for (int i = 1; i < K; ++i) t[i] = 0.5 * (l[i - 1] + l[i]);
    for (int i = 0; i < K; ++i) {
      const double pa = std::isinf(t[i]) ? 0.0 : pdf(t[i]), pb = std::isinf(t[i + 1]) ? 0.0 : pdf(t[i + 1]);
      l[i] = (pa - pb) / (cdf(t[i + 1]) - cdf(t[i]));  // E[x | t_i < x < t_i+1]
    }
  }
  std::array<float, K> out;
  for (int i = 0; i < K; ++i) out[i] = float(l[i]);
  return out;
}

// Decision thresholds between neighbouring levels; the code is the number of thresholds below u
// (branch-free: the codes of Gaussian data are unpredictable).
template <int K>
std::array<float, K - 1> thresholds(const std::array<float, K>& lv) {
  std::array<float, K - 1> t;
  for (int i = 0; i + 1 < K; ++i) t[i] = 0.5f * (lv[i] + lv[i + 1]);
  return t;
}

template <int K>
int nearest(const std::array<float, K - 1>& thr, float u) {
  int c = 0;
  for (int i = 0; i + 1 < K; ++i) c += u > thr[i];
  return c;
}

// The sum of term(0..d-1) in the order a warp of the CUDA encoder adds them (cuda/kv_encode.cu), so both write the
// same bytes: 32 running sums, sum l taking terms l, l + 32, ... in turn, then a butterfly (sums l and l ^ 16 added,
// then l ^ 8, ... l ^ 1; each step's pair sums are the same double on both lanes). One running sum over the row made
// the device's encode a single lane's chain of dependent adds: 6x the time of fp8's encode.
template <class Term>
double warp_order_sum(int d, Term term) {
  std::array<double, 32> p{};
  for (int i = 0; i < d; ++i) p[size_t(i % 32)] += term(i);
  for (int o = 16; o > 0; o >>= 1) {
    std::array<double, 32> q;
    for (int l = 0; l < 32; ++l) q[size_t(l)] = p[size_t(l)] + p[size_t(l ^ o)];
    p = q;
  }
  return p[0];
}

// Encodes codes into `codes` and returns the gain. Every product summed is exact in double (two floats), so
// contracting it into an FMA with the sum cannot change a result.
template <int K>
float encode_codes(const std::array<float, K>& lv, const float* x, int d, uint8_t* codes) {
  if (d <= 0 || d > 1024) fail("tq codec: head_dim {} out of range 1..1024", d);
  const double n2 = warp_order_sum(d, [&](int i) { return std::isfinite(x[i]) ? double(x[i]) * x[i] : 0.0; });
  if (!(n2 > 0) || !std::isfinite(n2)) {
    std::fill(codes, codes + d, uint8_t(K / 2));
    return 0.0f;
  }
  const double norm = std::sqrt(n2);
  const float to_unit = float(std::sqrt(double(d)) / norm);
  const auto thr = thresholds<K>(lv);
  for (int i = 0; i < d; ++i) {
    const float u = std::isfinite(x[i]) ? x[i] * to_unit : 0.0f;
    codes[i] = uint8_t(nearest<K>(thr, u));
  }
  const double c2 = warp_order_sum(d, [&](int i) { return double(lv[codes[i]]) * lv[codes[i]]; });
  return float(norm / std::sqrt(c2));
}

}  // namespace

// tq4 levels are snapped to a grid of 1/kTq4Scale (top level = 127 grid steps) so that SIMD loops can
// look codes up as int8 and use integer dots; the snap moves levels by < 0.011 and the distortion by < 1%.
const std::array<float, 16>& tq4_levels() {
  static const std::array<float, 16> l = [] {
    std::array<float, 16> v = lloyd_max_gaussian<16>();
    const std::array<int8_t, 16>& q = tq4_levels_i8();
    for (int i = 0; i < 16; ++i) v[i] = float(q[i]) / tq4_grid();
    return v;
  }();
  return l;
}

float tq4_grid() {
  static const float g = 127.0f / lloyd_max_gaussian<16>()[15];
  return g;
}

const std::array<int8_t, 16>& tq4_levels_i8() {
  static const std::array<int8_t, 16> q = [] {
    const std::array<float, 16> v = lloyd_max_gaussian<16>();
    std::array<int8_t, 16> r;
    for (int i = 0; i < 16; ++i) r[i] = int8_t(std::lround(v[i] * tq4_grid()));
    return r;
  }();
  return q;
}
const std::array<float, 8>& tq3_levels() {
  static const std::array<float, 8> l = lloyd_max_gaussian<8>();
  return l;
}

size_t tq4_row_bytes(int d) { return layout::tq4_row_bytes(d); }

void tq4_encode(const float* x, int d, uint8_t* row) {
  uint8_t codes[1024];
  const float g = encode_codes<16>(tq4_levels(), x, d, codes);
  std::memcpy(row, &g, 4);
  for (int i = 0; i < d; i += 2) row[4 + i / 2] = uint8_t(codes[i] | (codes[i + 1] << 4));
}

void tq4_decode(const uint8_t* row, int d, float* y) {
  float g;
  std::memcpy(&g, row, 4);
  const auto& lv = tq4_levels();
  for (int i = 0; i < d; ++i) y[i] = g * lv[layout::tq4_code(row + 4, i)];
}

size_t tq3_row_bytes(int d) { return layout::tq3_row_bytes(d); }

void tq3_encode(const float* x, int d, uint8_t* row) {
  uint8_t codes[1024];
  const float g = encode_codes<8>(tq3_levels(), x, d, codes);
  std::memcpy(row, &g, 4);
  for (int grp = 0; grp < d / 8; ++grp) {
    uint32_t bits = 0;
    for (int j = 0; j < 8; ++j) bits |= uint32_t(codes[grp * 8 + j]) << (3 * j);
    row[4 + 3 * grp] = uint8_t(bits);
    row[5 + 3 * grp] = uint8_t(bits >> 8);
    row[6 + 3 * grp] = uint8_t(bits >> 16);
  }
}

void tq3_decode(const uint8_t* row, int d, float* y) {
  float g;
  std::memcpy(&g, row, 4);
  for (int u = 0; u < d / layout::kUnit; ++u) {
    layout::unit_decode<CodecId::tq3>(row, d, u, tq3_levels().data(), y + 8 * u);
    for (int k = 0; k < 8; ++k) y[8 * u + k] *= g;
  }
}

}  // namespace kvtax::kv
