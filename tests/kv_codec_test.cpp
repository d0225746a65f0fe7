#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "attn/cpu/loops.h"
#include "core/error.h"
#include "kv/codecs/codec.h"
#include "kv/codecs/formats.h"
#include "kv/codecs/layout.h"
#include "kv/rotation.h"
#include "kv_test_util.h"

namespace kvtax::kv {
namespace {

using kvtax::testing::gaussian;
using kvtax::testing::outliers;

// Mean over rows of |x - decode(encode(x))|^2 / |x|^2 (rotating first for rotated codecs, and
// un-rotating the result, so the error is measured in the original space).
double unit_mse(const CodecInfo& c, const std::vector<float>& x, int d) {
  const size_t rows = x.size() / d;
  std::vector<uint8_t> row(c.row_bytes(d));
  std::vector<float> in(d), out(d);
  double sum = 0;
  for (size_t r = 0; r < rows; ++r) {
    const float* xr = x.data() + r * d;
    if (c.rotated) {
      rotate(xr, d, in.data());
    } else {
      std::memcpy(in.data(), xr, d * 4);
    }
    c.encode(in.data(), d, row.data());
    c.decode(row.data(), d, out.data());
    if (c.rotated) unrotate(out.data(), d, out.data());
    double e = 0, n = 0;
    for (int i = 0; i < d; ++i) {
      e += (double(out[i]) - xr[i]) * (double(out[i]) - xr[i]);
      n += double(xr[i]) * xr[i];
    }
    sum += e / n;
  }
  return sum / rows;
}

struct Bound { const char* name; double gauss; double outlier; };
// Per-unit-vector MSE bounds (measured at d=128: f16 4.4e-8, bf16 2.8e-6, fp8 6.6e-4 / 2.7e-4 outliers,
// q8 2.8e-5 / 1.3e-4, q4 7.4e-3 / 2.1e-2, q4r 7.4e-3 / 5.0e-3, tq4 9.1e-3 / 8.1e-3, tq3 3.4e-2 / 3.0e-2). Theory: f16 ~ 2^-22/3, bf16 ~ 2^-16/3, e4m3 ~ 2^-8/3 relative per value;
// q8 step max/127 over 32 values; q4 step max/8; tq4/tq3 Lloyd-Max distortion 0.0095 / 0.0345.
// Outlier rows hurt the unrotated block codecs (their scale is set by the outlier) and barely move
// the rotated ones.
const Bound kBounds[] = {
    {"f32", 0, 0},           {"f16", 1e-7, 1e-7},    {"bf16", 1e-5, 1e-5},  {"fp8", 1e-3, 1e-3},
    {"q8", 5e-5, 2e-4},      {"q4", 1e-2, 0.03},     {"q4r", 1e-2, 8e-3},   {"tq4", 0.012, 0.012},
    {"tq3", 0.04, 0.04},
};

TEST(KvCodec, RoundTripWithinBounds) {
  for (int d : {64, 128}) {
    const auto g = gaussian(400 * d, 1);
    const auto o = outliers(400, d, 2);
    for (const auto& b : kBounds) {
      const CodecInfo* c = find_codec(b.name);
      ASSERT_NE(c, nullptr) << b.name;
      const double eg = unit_mse(*c, g, d), eo = unit_mse(*c, o, d);
      EXPECT_LE(eg, b.gauss) << b.name << " d=" << d;
      EXPECT_LE(eo, b.outlier) << b.name << " d=" << d;
      if (std::string(b.name) == "f32") {
        EXPECT_EQ(eg, 0.0);
      }
    }
  }
}

TEST(KvCodec, RotationHelpsOutliers) {
  const int d = 128;
  const auto o = outliers(300, d, 3);
  EXPECT_LT(unit_mse(*find_codec("q4r"), o, d) * 3, unit_mse(*find_codec("q4"), o, d));
}

TEST(KvCodec, TurboQuantMatchesPaperDistortion) {
  // Lloyd-Max for N(0,1): 3-bit distortion 0.0345, 4-bit 0.0095; measured on rotated Gaussian rows.
  const int d = 128;
  const auto g = gaussian(2000 * d, 4);
  EXPECT_NEAR(unit_mse(*find_codec("tq3"), g, d), 0.0345, 0.004);
  EXPECT_NEAR(unit_mse(*find_codec("tq4"), g, d), 0.0095, 0.0015);
  const auto& l4 = tq4_levels();
  EXPECT_NEAR(l4[15], 2.7326, 2e-3);  // Max (1960), 16 levels
  EXPECT_NEAR(tq3_levels()[7], 2.1519, 2e-3);
}

TEST(KvCodec, BitsPerValue) {
  EXPECT_DOUBLE_EQ(bits_per_value(*find_codec("q8"), 128), 8.5);
  EXPECT_DOUBLE_EQ(bits_per_value(*find_codec("q4"), 128), 4.5);
  EXPECT_DOUBLE_EQ(bits_per_value(*find_codec("q4r"), 64), 4.5);
  EXPECT_DOUBLE_EQ(bits_per_value(*find_codec("tq4"), 128), 4.25);
  EXPECT_DOUBLE_EQ(bits_per_value(*find_codec("tq3"), 128), 3.25);
  EXPECT_DOUBLE_EQ(bits_per_value(*find_codec("fp8"), 128), 8.25);
  EXPECT_DOUBLE_EQ(bits_per_value(*find_codec("f16"), 128), 16);
  EXPECT_EQ(find_codec("q5"), nullptr);
}

TEST(KvCodec, LayoutKnowsTheRotatedCodecs) {  // the kernels' compile-time copy of CodecInfo::rotated
  for (int c = 0; c < kNumCodecs; ++c) EXPECT_EQ(layout::rotated(CodecId(c)), codec(CodecId(c)).rotated) << c;
}

// The CUDA decode's tq4 table (layout::tq4_byte_lut) takes the levels as int8 multiples of levels[15] / 127: that
// holds for the levels the device is given, each recovered exactly by rounding, and the table's step is the grid's.
TEST(KvCodec, Tq4LevelsAreInt8MultiplesOfTheLargestOver127) {
  const auto& l = tq4_levels();
  const auto& q = tq4_levels_i8();
  ASSERT_EQ(q[15], 127);
  const float to_int = 127.0f / l[15];
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(std::lrint(l[i] * to_int), q[i]) << i;
    EXPECT_NEAR(l[i] * to_int, float(q[i]), 1e-3) << i;
  }
  EXPECT_NEAR(l[15] / 127.0f * tq4_grid(), 1.0, 1e-6);
}

TEST(KvCodec, HeadDimChecks) {
  EXPECT_THROW(check_head_dim(*find_codec("q8"), 48), Error);
  EXPECT_THROW(check_head_dim(*find_codec("tq4"), 96), Error);  // not a power of two
  EXPECT_NO_THROW(check_head_dim(*find_codec("q8"), 96));
  EXPECT_NO_THROW(check_head_dim(*find_codec("tq3"), 64));
}

TEST(KvCodec, E4M3AllCodes) {
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7f) == 0x7f) continue;  // NaN codes are never produced
    const float v = e4m3_to_f32(uint8_t(b));
    const uint8_t back = f32_to_e4m3(v);
    if (v == 0) EXPECT_EQ(back & 0x7f, 0);
    else EXPECT_EQ(back, b) << "code " << b << " value " << v;
  }
  EXPECT_EQ(e4m3_to_f32(f32_to_e4m3(1e9f)), 448.0f);
  EXPECT_EQ(e4m3_to_f32(f32_to_e4m3(-1e9f)), -448.0f);
  EXPECT_EQ(f32_to_e4m3(std::numeric_limits<float>::quiet_NaN()), 0);
  EXPECT_EQ(e4m3_to_f32(0x01), 1.0f / 512.0f);  // smallest subnormal
}

TEST(KvCodec, NonFiniteInputsDoNotPoisonRow) {
  const int d = 64;
  auto x = gaussian(d, 5);
  x[7] = std::numeric_limits<float>::quiet_NaN();
  x[9] = std::numeric_limits<float>::infinity();
  for (const char* name : {"fp8", "q8", "q4", "tq4", "tq3"}) {
    const CodecInfo* c = find_codec(name);
    std::vector<uint8_t> row(c->row_bytes(d));
    std::vector<float> y(d);
    c->encode(x.data(), d, row.data());
    c->decode(row.data(), d, y.data());
    for (int i = 0; i < d; ++i) EXPECT_TRUE(std::isfinite(y[i])) << name << " " << i;
  }
}

TEST(KvRotation, OrthonormalAndInvertible) {
  for (int d : {64, 128, 256}) {
    const auto a = gaussian(d, 6), b = gaussian(d, 7);
    std::vector<float> ra(d), rb(d), back(d);
    rotate(a.data(), d, ra.data());
    rotate(b.data(), d, rb.data());
    unrotate(ra.data(), d, back.data());
    double dot = 0, rdot = 0;
    for (int i = 0; i < d; ++i) {
      dot += double(a[i]) * b[i];
      rdot += double(ra[i]) * rb[i];
      EXPECT_NEAR(back[i], a[i], 1e-5);
    }
    EXPECT_NEAR(rdot, dot, 1e-4 * d);
  }
  std::vector<float> x(96);
  EXPECT_THROW(rotate(x.data(), 96, x.data()), Error);
}

// SIMD inner loops against the scalar loops (decode + float math) on random rows; poisoned scores.
TEST(KvCodecLoops, SimdMatchesScalar) {
  if (simd_level() == SimdLevel::scalar) GTEST_SKIP() << "no AVX2 on this CPU";
  for (int d : {64, 128}) {
    for (int ci = 0; ci < kNumCodecs; ++ci) {
      const CodecInfo& c = codec(CodecId(ci));
      const int n = 37;  // not a multiple of any vector width
      const size_t rb = c.row_bytes(d);
      std::vector<uint8_t> rows(rb * n + 64);
      const auto src = outliers(n, d, 10 + ci);
      for (int t = 0; t < n; ++t) c.encode(src.data() + t * d, d, rows.data() + t * rb);
      const auto qs = gaussian(4 * d, 20 + ci);
      for (SimdLevel lvl : {SimdLevel::avx2, SimdLevel::avx512}) {
        if (lvl > simd_level()) continue;
        const auto& ks = attn::k_loops(c.id, SimdLevel::scalar);
        const auto& kx = attn::k_loops(c.id, lvl);
        for (int R = 1; R <= 4; ++R) {
          std::vector<uint8_t> ps(4 * ks.prep_bytes(d)), px(4 * kx.prep_bytes(d));
          const uint8_t* qps[4]; const uint8_t* qpx[4];
          std::vector<float> ss(4 * n), sx(4 * n, std::numeric_limits<float>::quiet_NaN());
          float* sps[4]; float* spx[4];
          for (int r = 0; r < R; ++r) {
            ks.prep(qs.data() + r * d, d, ps.data() + r * ks.prep_bytes(d));
            kx.prep(qs.data() + r * d, d, px.data() + r * kx.prep_bytes(d));
            qps[r] = ps.data() + r * ks.prep_bytes(d);
            qpx[r] = px.data() + r * kx.prep_bytes(d);
            sps[r] = ss.data() + r * n;
            spx[r] = sx.data() + r * n;
          }
          ks.dot[R - 1](rows.data(), rb, n, d, qps, sps, {});
          kx.dot[R - 1](rows.data(), rb, n, d, qpx, spx, {});
          // q is quantized to int8 on the integer path: error scales with sum |q_i k_i|.
          const bool int_path = c.id == CodecId::q8 || c.id == CodecId::q4 || c.id == CodecId::q4r || c.id == CodecId::tq4;
          std::vector<float> dec(d);
          for (int r = 0; r < R; ++r)
            for (int t = 0; t < n; ++t) {
              c.decode(rows.data() + t * rb, d, dec.data());
              // Bound: float rounding, plus on the int8 path |k_i| * half a q step per element.
              double mag = 0, qerr = 0;
              for (int b = 0; b < d / 32; ++b) {
                float amax = 0;
                for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(qs[r * d + 32 * b + i]));
                for (int i = 0; i < 32; ++i) qerr += std::fabs(dec[32 * b + i]) * amax / 127.0 / 2.0;
              }
              for (int i = 0; i < d; ++i) mag += std::fabs(double(qs[r * d + i]) * dec[i]);
              ASSERT_TRUE(std::isfinite(spx[r][t])) << c.name;
              EXPECT_NEAR(spx[r][t], sps[r][t], 1e-5 * mag + (int_path ? qerr : 0.0)) << c.name << " R=" << R << " t=" << t;
            }
          // V: o += p V
          const auto& vs = attn::v_loops(c.id, SimdLevel::scalar);
          const auto& vx = attn::v_loops(c.id, lvl);
          const auto p = gaussian(4 * n, 30 + R);
          const auto o0 = gaussian(4 * d, 40 + R);
          std::vector<float> os(o0), ox(o0);
          const float* pp[4]; float* ops[4]; float* opx[4];
          for (int r = 0; r < R; ++r) { pp[r] = p.data() + r * n; ops[r] = os.data() + r * d; opx[r] = ox.data() + r * d; }
          vs.acc[R - 1](rows.data(), rb, n, d, pp, ops, {});
          vx.acc[R - 1](rows.data(), rb, n, d, pp, opx, {});
          for (int i = 0; i < R * d; ++i) {
            double mag = std::fabs(o0[i]);
            for (int t = 0; t < n; ++t) {
              c.decode(rows.data() + t * rb, d, dec.data());
              mag += std::fabs(p[(i / d) * n + t] * dec[i % d]);
            }
            EXPECT_NEAR(ox[i], os[i], 1e-5 * mag) << c.name << " R=" << R << " i=" << i;
          }
        }
      }
      // exp_sum: exact zeros for -inf, close to std::exp elsewhere.
      std::vector<float> s = gaussian(67, 50), s2;
      s[3] = -std::numeric_limits<float>::infinity();
      s2 = s;
      const float a = attn::math_loops(simd_level()).exp_sum(s.data(), 67, 2.5f);
      const float b = attn::math_loops(SimdLevel::scalar).exp_sum(s2.data(), 67, 2.5f);
      EXPECT_NEAR(a, b, 1e-5 * b);
      EXPECT_EQ(s[3], 0.0f);
      for (int i = 0; i < 67; ++i) EXPECT_NEAR(s[i], s2[i], 2e-7 + 1e-6 * s2[i]);
    }
  }
}

}  // namespace
}  // namespace kvtax::kv
