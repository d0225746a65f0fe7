#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/error.h"
#include "random_values.h"
#include "core/f16.h"
#include "ggml/blocks.h"
#include "ggml/quants.h"

using namespace kvtax;

namespace {


// RMS error of quantize -> dequantize relative to the RMS of the data.
double roundtrip_rel_rms(GgmlType t, const std::vector<float>& x) {
  const int64_t n = int64_t(x.size());
  std::vector<uint8_t> q(ggml_row_bytes(t, uint64_t(n)));
  quantize_row(t, x.data(), q.data(), n);
  std::vector<float> y(static_cast<size_t>(n), NAN);
  dequantize_row(t, q.data(), y.data(), n);
  double e = 0, s = 0;
  for (int64_t i = 0; i < n; ++i) {
    e += (double(y[size_t(i)]) - x[size_t(i)]) * (double(y[size_t(i)]) - x[size_t(i)]);
    s += double(x[size_t(i)]) * x[size_t(i)];
  }
  return std::sqrt(e / s);
}

}  // namespace

TEST(Quants, BlockSizesMatchTypeTable) {
  EXPECT_EQ(ggml_traits(GgmlType::Q4_0).type_size, sizeof(BlockQ4_0));
  EXPECT_EQ(ggml_traits(GgmlType::Q4_1).type_size, sizeof(BlockQ4_1));
  EXPECT_EQ(ggml_traits(GgmlType::Q5_0).type_size, sizeof(BlockQ5_0));
  EXPECT_EQ(ggml_traits(GgmlType::Q5_1).type_size, sizeof(BlockQ5_1));
  EXPECT_EQ(ggml_traits(GgmlType::Q8_0).type_size, sizeof(BlockQ8_0));
  EXPECT_EQ(ggml_traits(GgmlType::Q2_K).type_size, sizeof(BlockQ2_K));
  EXPECT_EQ(ggml_traits(GgmlType::Q3_K).type_size, sizeof(BlockQ3_K));
  EXPECT_EQ(ggml_traits(GgmlType::Q4_K).type_size, sizeof(BlockQ4_K));
  EXPECT_EQ(ggml_traits(GgmlType::Q5_K).type_size, sizeof(BlockQ5_K));
  EXPECT_EQ(ggml_traits(GgmlType::Q6_K).type_size, sizeof(BlockQ6_K));
  EXPECT_EQ(ggml_traits(GgmlType::Q8_K).type_size, sizeof(BlockQ8_K));
}

// Bounds are ~1.5x what these quantizers achieve on N(0,1) data (bits per weight in brackets).
TEST(Quants, RoundTripErrorBounds) {
  struct Case { GgmlType t; double bound; };
  const Case cases[] = {
      {GgmlType::F32, 0.0},      {GgmlType::F16, 4e-4},     {GgmlType::BF16, 3e-3},
      {GgmlType::Q8_0, 8e-3},    // 8.5 bpw
      {GgmlType::Q8_K, 1e-2},    // 9.1 bpw, one scale per 256
      {GgmlType::Q6_K, 2.5e-2},  // 6.6 bpw
      {GgmlType::Q5_K, 4.5e-2},  // 5.5 bpw
      {GgmlType::Q4_K, 9e-2},    // 4.5 bpw
      {GgmlType::Q4_0, 1.3e-1},  // 4.5 bpw
  };
  const auto x = random_normal(4096, 7);
  for (const auto& c : cases) {
    const double err = roundtrip_rel_rms(c.t, x);
    EXPECT_LE(err, c.bound) << ggml_type_name(c.t);
    if (c.t != GgmlType::F32) { EXPECT_GT(err, 0.0) << ggml_type_name(c.t); }
    std::printf("  %-5s rel rms error %.5f\n", std::string(ggml_type_name(c.t)).c_str(), err);
  }
}

TEST(Quants, ZerosAndConstantRowsStayFinite) {
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K,
                     GgmlType::Q8_K}) {
    for (float c : {0.0f, 1.5f, -2.0f}) {
      std::vector<float> x(512, c), y(512, NAN);
      std::vector<uint8_t> q(ggml_row_bytes(t, 512));
      quantize_row(t, x.data(), q.data(), 512);
      dequantize_row(t, q.data(), y.data(), 512);
      for (float v : y) ASSERT_NEAR(v, c, 0.02 * std::fabs(c) + 1e-6) << ggml_type_name(t) << " c=" << c;
    }
  }
}

TEST(Quants, RejectsBadLengthsAndTypes) {
  std::vector<float> x(300);
  std::vector<uint8_t> q(4096);
  EXPECT_THROW(quantize_row(GgmlType::Q4_K, x.data(), q.data(), 300), Error);
  EXPECT_THROW(dequantize_row(GgmlType::Q8_0, q.data(), x.data(), 33), Error);
  EXPECT_THROW(quantize_row(GgmlType::Q2_K, x.data(), q.data(), 256), Error);
  EXPECT_THROW(dequantize_row(GgmlType::IQ2_XS, q.data(), x.data(), 256), Error);
  EXPECT_FALSE(can_quantize(GgmlType::Q3_K));
  EXPECT_TRUE(can_dequantize(GgmlType::Q3_K));
}

// Hand-built blocks: each byte set per ggml's format, expected values worked out independently.
TEST(Quants, Q4_0HandBlock) {
  BlockQ4_0 b{};
  b.d = f32_to_f16(0.5f);
  for (int j = 0; j < 16; ++j) b.qs[j] = uint8_t(j | ((15 - j) << 4));
  float y[32];
  dequantize_row(GgmlType::Q4_0, &b, y, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.5f * float(j - 8));
    EXPECT_EQ(y[j + 16], 0.5f * float(7 - j));
  }
}

TEST(Quants, Q4_1AndQ5HandBlocks) {
  BlockQ4_1 a{};
  a.d = f32_to_f16(2.0f);
  a.m = f32_to_f16(-1.0f);
  a.qs[3] = 0x5A;  // value 3 = 10, value 19 = 5
  float y[32];
  dequantize_row(GgmlType::Q4_1, &a, y, 32);
  EXPECT_EQ(y[3], 19.0f);
  EXPECT_EQ(y[19], 9.0f);
  EXPECT_EQ(y[0], -1.0f);

  BlockQ5_0 b{};
  b.d = f32_to_f16(1.0f);
  b.qs[2] = 0x31;             // value 2 low nibble 1, value 18 low nibble 3
  b.qh[0] = 0x04;             // bit 2: value 2 gets +16
  b.qh[2] = 0x04;             // bit 18: value 18 gets +16
  dequantize_row(GgmlType::Q5_0, &b, y, 32);
  EXPECT_EQ(y[2], 1.0f);      // 17 - 16
  EXPECT_EQ(y[18], 3.0f);     // 19 - 16
  EXPECT_EQ(y[0], -16.0f);

  BlockQ5_1 c{};
  c.d = f32_to_f16(0.25f);
  c.m = f32_to_f16(1.0f);
  c.qs[15] = 0xF0;
  c.qh[3] = 0x80;             // bit 31: value 31
  dequantize_row(GgmlType::Q5_1, &c, y, 32);
  EXPECT_EQ(y[31], 1.0f + 0.25f * 31);
  EXPECT_EQ(y[15], 1.0f);
}

TEST(Quants, Q8_0HandBlock) {
  BlockQ8_0 b{};
  b.d = f32_to_f16(0.125f);
  for (int j = 0; j < 32; ++j) b.qs[j] = int8_t(j * 8 - 128);
  float y[32];
  dequantize_row(GgmlType::Q8_0, &b, y, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], 0.125f * float(j * 8 - 128));
}

TEST(Quants, Q4_KHandBlock) {
  BlockQ4_K b{};
  b.d = f32_to_f16(0.5f);
  b.dmin = f32_to_f16(0.25f);
  // Sub-block 1: scale 3 (byte 1 low 6 bits), min 5 (byte 5). Sub-block 6: scale 0x2B = 43
  // (low nibble 0xB in byte 10, top bits 0b10 in byte 2), min 0x17 = 23 (high nibble 7 in byte 10,
  // top bits 0b01 in byte 6).
  b.scales[1] = 3;
  b.scales[5] = 5;
  b.scales[10] = 0x7B;
  b.scales[2] = 0x80;
  b.scales[6] = 0x40;
  // Sub-block 1 = high nibbles of qs[0..31]; sub-block 6 = low nibbles of qs[96..127].
  b.qs[4] = 0x90;   // value 32+4 -> q 9
  b.qs[100] = 0x0E;  // value 192+4 -> q 14
  float y[256];
  dequantize_row(GgmlType::Q4_K, &b, y, 256);
  EXPECT_EQ(y[36], 0.5f * 3 * 9 - 0.25f * 5);
  EXPECT_EQ(y[35], -0.25f * 5);
  EXPECT_EQ(y[196], 0.5f * 43 * 14 - 0.25f * 23);
  EXPECT_EQ(y[197], -0.25f * 23);
  EXPECT_EQ(y[0], 0.0f);  // sub-block 0: scale 0, min 0
  EXPECT_EQ(y[64], 0.0f);  // sub-block 2: byte 2 low bits are 0 -> scale 0; min from byte 6 low bits = 0
}

TEST(Quants, Q5_KHandBlock) {
  BlockQ5_K b{};
  b.d = f32_to_f16(1.0f);
  b.dmin = f32_to_f16(2.0f);
  b.scales[3] = 2;   // sub-block 3 scale 2
  b.scales[7] = 1;   // sub-block 3 min 1
  // Sub-block 3 = high nibbles of qs[32..63], fifth bit = bit 3 of qh[l].
  b.qs[32 + 7] = 0xA0;  // nibble 10
  b.qh[7] = 0x08;       // +16 -> 26
  float y[256];
  dequantize_row(GgmlType::Q5_K, &b, y, 256);
  EXPECT_EQ(y[96 + 7], 2.0f * 26 - 2.0f * 1);
  EXPECT_EQ(y[96 + 6], -2.0f);
}

TEST(Quants, Q6_KHandBlock) {
  BlockQ6_K b{};
  b.d = f32_to_f16(0.5f);
  for (int j = 0; j < 16; ++j) b.scales[j] = int8_t(j - 8);
  // Value 128 + 64 + 5 (second half, third quarter): low nibble = high nibble of ql[64+5],
  // top bits = bits 4-5 of qh[32+5]; scale index 8 + 4 + 0 = 12 -> 4.
  b.ql[64 + 5] = 0x30;
  b.qh[32 + 5] = 0x20;  // top bits 0b10 -> q = 3 | 32 = 35 -> 35 - 32 = 3
  float y[256];
  dequantize_row(GgmlType::Q6_K, &b, y, 256);
  EXPECT_EQ(y[197], 0.5f * 4 * 3);
  EXPECT_EQ(y[0], 0.5f * -8 * -32);    // all-zero bits -> q = -32, scale -8
  EXPECT_EQ(y[17], 0.5f * -7 * -32);   // second 16 of the first quarter uses scale 1 -> -7
}

TEST(Quants, Q3_KHandBlock) {
  BlockQ3_K b{};
  b.d = f32_to_f16(1.0f);
  // Scale 9 (second half, second group of 16 of the first quarter): low nibble = high nibble of
  // scales[1], top 2 bits = bits 4-5 of scales[9]. Code 0x25 = 37 -> 37 - 32 = 5.
  b.scales[1] = 0x50;
  b.scales[9] = 0x20;
  // Value 128 + 20: low 2 bits = bits 0-1 of qs[32+20]; high bit = bit 4 of hmask[20].
  b.qs[52] = 0x3;
  b.hmask[20] = 0x10;  // set -> no -4
  b.hmask[21] = 0x00;  // clear -> -4
  float y[256];
  dequantize_row(GgmlType::Q3_K, &b, y, 256);
  EXPECT_EQ(y[148], 5.0f * 3);
  EXPECT_EQ(y[149], 5.0f * -4);
  EXPECT_EQ(y[0], -32.0f * -4);  // scale code 0 -> -32, q 0 with no high bit -> -4
}

TEST(Quants, Q2_KHandBlock) {
  BlockQ2_K b{};
  b.d = f32_to_f16(0.5f);
  b.dmin = f32_to_f16(0.25f);
  b.scales[5] = 0x36;  // sub-block 5: scale 6, min 3
  // Value 80 (first half, bits 4-5 of qs[16]; 80 = 2*32 + 16 -> shift 2 pairs, byte 16).
  b.qs[16] = 0x20;     // bits 4-5 = 2
  float y[256];
  dequantize_row(GgmlType::Q2_K, &b, y, 256);
  EXPECT_EQ(y[80], 0.5f * 6 * 2 - 0.25f * 3);
  EXPECT_EQ(y[81], -0.25f * 3);
}

TEST(Quants, Q8_KSumsMatchValues) {
  const auto x = random_normal(512, 3);
  BlockQ8_K b[2];
  quantize_row(GgmlType::Q8_K, x.data(), b, 512);
  for (const auto& blk : b)
    for (int j = 0; j < 16; ++j) {
      int s = 0;
      for (int l = 0; l < 16; ++l) s += blk.qs[16 * j + l];
      EXPECT_EQ(blk.bsums[j], s);
    }
}
