// The q4 / q4r SIMD loops (src/attn/cpu/codec_loops_q4_x86.h) against the scalar loops at every head
// size they have a separate path for: block pairs only (64, 128, 256: compile-time block counts), a lone
// last block (32, 96, 160), a run-time block count (96, 160, 320); row counts that leave every token and
// row-pair tail; and softmax weights small enough to make subnormal V weights.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "attn/cpu/loops.h"
#include "kv/codecs/codec.h"
#include "kv_test_util.h"

namespace kvtax::kv {
namespace {

using kvtax::testing::gaussian;
using kvtax::testing::outliers;

struct Rows {
  std::vector<uint8_t> bytes;
  std::vector<float> dec;  // decoded rows [n][d]
  size_t rb;
};

Rows make_rows(const CodecInfo& c, int n, int d, uint64_t seed) {
  Rows r;
  r.rb = c.row_bytes(d);
  r.bytes.assign(r.rb * n, 0);
  r.dec.resize(size_t(n) * d);
  const auto src = outliers(n, d, seed);
  for (int t = 0; t < n; ++t) {
    c.encode(src.data() + size_t(t) * d, d, r.bytes.data() + t * r.rb);
    c.decode(r.bytes.data() + t * r.rb, d, r.dec.data() + size_t(t) * d);
  }
  return r;
}

// K: each score within float rounding plus the int8 rounding of q (|k_i| x half a q step per element).
void check_k(const CodecInfo& c, SimdLevel lvl, int d, int n, int R) {
  const Rows rows = make_rows(c, n, d, 100 + d + n);
  const auto& ks = attn::k_loops(c.id, SimdLevel::scalar);
  const auto& kx = attn::k_loops(c.id, lvl);
  const auto qs = gaussian(size_t(R) * d, 7 + R, 2.0f);
  std::vector<uint8_t> ps(R * ks.prep_bytes(d)), px(R * kx.prep_bytes(d));
  std::vector<float> ss(size_t(R) * n), sx(size_t(R) * n, std::numeric_limits<float>::quiet_NaN());
  const uint8_t* qps[4];
  const uint8_t* qpx[4];
  float* sps[4];
  float* spx[4];
  for (int r = 0; r < R; ++r) {
    ks.prep(qs.data() + r * d, d, ps.data() + r * ks.prep_bytes(d));
    kx.prep(qs.data() + r * d, d, px.data() + r * kx.prep_bytes(d));
    qps[r] = ps.data() + r * ks.prep_bytes(d);
    qpx[r] = px.data() + r * kx.prep_bytes(d);
    sps[r] = ss.data() + size_t(r) * n;
    spx[r] = sx.data() + size_t(r) * n;
  }
  ks.dot[R - 1](rows.bytes.data(), rows.rb, n, d, qps, sps, {});
  kx.dot[R - 1](rows.bytes.data(), rows.rb, n, d, qpx, spx, {});
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < n; ++t) {
      const float* k = rows.dec.data() + size_t(t) * d;
      const float* q = qs.data() + size_t(r) * d;
      double mag = 0, qerr = 0;
      for (int b = 0; b < d / 32; ++b) {
        float amax = 0;
        for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(q[32 * b + i]));
        for (int i = 0; i < 32; ++i) qerr += std::fabs(k[32 * b + i]) * amax / 127.0 / 2.0;
      }
      for (int i = 0; i < d; ++i) mag += std::fabs(double(q[i]) * k[i]);
      ASSERT_TRUE(std::isfinite(spx[r][t])) << c.name << " d=" << d << " n=" << n << " R=" << R << " t=" << t;
      EXPECT_NEAR(spx[r][t], sps[r][t], 1e-5 * mag + qerr) << c.name << " d=" << d << " n=" << n << " R=" << R << " t=" << t;
    }
}

// V: o += p V from a nonzero start; each output within float rounding of the scalar loop. Every other
// row's weight is multiplied by tiny_scale.
void check_v(const CodecInfo& c, SimdLevel lvl, int d, int n, int R, float tiny_scale) {
  const Rows rows = make_rows(c, n, d, 200 + d + n);
  const auto& vs = attn::v_loops(c.id, SimdLevel::scalar);
  const auto& vx = attn::v_loops(c.id, lvl);
  auto p = gaussian(size_t(R) * n, 30 + R);
  for (size_t i = 0; i < p.size(); ++i) p[i] = std::fabs(p[i]) * (i % 2 ? tiny_scale : 1.0f);
  const auto o0 = gaussian(size_t(R) * d, 40 + R);
  std::vector<float> os(o0), ox(o0);
  const float* pp[4];
  float* ops[4];
  float* opx[4];
  for (int r = 0; r < R; ++r) {
    pp[r] = p.data() + size_t(r) * n;
    ops[r] = os.data() + size_t(r) * d;
    opx[r] = ox.data() + size_t(r) * d;
  }
  vs.acc[R - 1](rows.bytes.data(), rows.rb, n, d, pp, ops, {});
  vx.acc[R - 1](rows.bytes.data(), rows.rb, n, d, pp, opx, {});
  for (int i = 0; i < R * d; ++i) {
    double mag = std::fabs(o0[i]);
    for (int t = 0; t < n; ++t) mag += std::fabs(double(p[size_t(i / d) * n + t]) * rows.dec[size_t(t) * d + i % d]);
    ASSERT_TRUE(std::isfinite(ox[i])) << c.name << " d=" << d << " n=" << n << " R=" << R << " i=" << i;
    EXPECT_NEAR(ox[i], os[i], 1e-5 * mag) << c.name << " d=" << d << " n=" << n << " R=" << R << " i=" << i;
  }
}

TEST(KvQ4Loops, SimdMatchesScalarAtEveryBlockCount) {
  if (simd_level() == SimdLevel::scalar) GTEST_SKIP() << "no AVX2 on this CPU";
  for (CodecId id : {CodecId::q4, CodecId::q4r})
    for (SimdLevel lvl : {SimdLevel::avx2, SimdLevel::avx512}) {
      if (lvl > simd_level()) continue;
      const CodecInfo& c = codec(id);
      for (int d : {32, 64, 96, 128, 160, 256, 320})
        for (int n : {1, 2, 3, 7, 9, 64, 133})
          for (int R = 1; R <= 4; ++R) {
            check_k(c, lvl, d, n, R);
            check_v(c, lvl, d, n, R, 1.0f);
          }
    }
}

TEST(KvQ4Loops, TinyWeightsStayFinite) {
  // p ~ 1e-33 on every other row: those V weights p * scale * 2^-28 are subnormal floats.
  if (simd_level() == SimdLevel::scalar) GTEST_SKIP() << "no AVX2 on this CPU";
  for (int R = 1; R <= 4; ++R) check_v(codec(CodecId::q4), simd_level(), 128, 70, R, 1e-33f);
}

}  // namespace
}  // namespace kvtax::kv
