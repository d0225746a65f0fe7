#pragma once
// q4 / q4r tiles of the GQA decode form (Cfg::kBiased; attention_mma.cu, after attention_mma_tiles.cuh). A nibble n
// (layout.h: value = block scale * (n - 8)) becomes an f16 MMA operand with one LOP3 per two values: OR'd into the
// mantissa of 1024, a low nibble reads 1024 + n and a high one 1024 + 16 n. The offset and the block scales are then
// applied per block, not per value:
//   K: each k-step takes one run (low or high nibbles) of one block, so S^T's block sums start from a constant per
//      head that removes the offset (q4_query_bias) and are scaled by the token's block scale once, in f32.
//      High runs meet q / 16, which makes them 1024 q / 16 + n q.
//   V: each m-tile holds one run of one block, so the block scale of a token scales its P before the product; the
//      offset is removed in f16, one exact HADD2 / HFMA2 per two values.
// The first form decoded every value to s (n - 8) in f16: ~260 of the tile's 506 instructions; this one takes 421
// per tile (ncu, q4r at 128k, sessions 26 and 27).
#include "cuda/attention_mma_tiles.cuh"

namespace kvtax::cuda::detail {
namespace {

constexpr float kQ4LoBias = 1024.0f + 8.0f;  // 1024 + n - (n - 8)
constexpr float kQ4HiScale = 1.0f / 16.0f;   // q of high runs (1024 + 16 n) is scaled by this
// (1024 + 16 n) (q / 16) - (n - 8) q: 1152 (q / 16).
constexpr float kQ4HiBias = 1024.0f + 8.0f * 16.0f;

// The f16 pairs 1024 + n (kHigh false: low nibbles) or 1024 + 16 n (high) of bytes 0 and 2 of x: (x & mask) | magic
// in one LOP3 (written as C++, ptxas made it two).
template <bool kHigh>
__device__ __forceinline__ uint32_t q4_biased(uint32_t x) {
  uint32_t y;
  asm("lop3.b32 %0, %1, %2, %3, 0xea;\n" : "=r"(y) : "r"(x), "n"(kHigh ? 0x00f000f0 : 0x000f000f), "n"(0x64006400));
  return y;
}

// The B fragment of Q^T for k-step ks (one run of one block): x holds q's dims d .. d + 3 (k_dim), already scaled;
// k 2c, 2c + 1 take d, d + 2 and k 2c + 8, 2c + 9 take d + 1, d + 3, as q4_biased pairs them. High runs take q / 16.
__device__ __forceinline__ void q4_query_pair(const float (&x)[4], int ks, uint32_t (&b)[2]) {
  const float f = ks % 2 ? kQ4HiScale : 1.0f;
  b[0] = pack_half2(x[0] * f, x[2] * f);
  b[1] = pack_half2(x[1] * f, x[3] * f);
}

// The constant each block's S^T starts from, for heads 2c and 2c + 1: minus the offset's share of the products,
// from q's f16 values as the MMAs see them. Lane (g, c) holds head g's B fragments.
template <int D>
__device__ __forceinline__ void q4_query_bias(const uint32_t (&qb)[D / 16][2], int c, float (&bias)[D / 32][2]) {
#pragma unroll
  for (int b = 0; b < D / 32; ++b) {
    float part = 0.0f;
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const float2 v = __half22float2(layout::bits_as_half2(qb[2 * b + r][i]));
        part = fmaf(r ? kQ4HiBias : kQ4LoBias, v.x + v.y, part);
      }
    part += __shfl_xor_sync(0xffffffffu, part, 1);
    part += __shfl_xor_sync(0xffffffffu, part, 2);
    bias[b][0] = -__shfl_sync(0xffffffffu, part, 8 * c);
    bias[b][1] = -__shfl_sync(0xffffffffu, part, 8 * c + 4);
  }
}

// One tile of the GQA form for q4 / q4r (swap_tile's steps). Lane (g, c) reads word c of each block of K tokens g
// and g + 8, and bytes 2g, 2g + 1 of each block of V tokens 2c, 2c + 1, 2c + 8, 2c + 9 (their word g / 2).
template <CodecId C, int D>
__device__ __forceinline__ void swap_tile_q4(const uint8_t* raw, const uint32_t (&qb)[D / 16][2],
                                             const float (&qbias)[D / 32][2], int nvalid, int g, int c,
                                             float (&o)[D / 16][4], float& m0, float& m1, float& l0, float& l1) {
  using G = Cfg<C, D, true>;
  static_assert(G::kBiased);
  constexpr int kNb = D / layout::kQBlock, kCodes = int(layout::codes_offset(C, D));
  constexpr int kScaleAlign = G::kRow % 8 == 0 ? 8 : 4;
  static_assert(kNb % 2 == 0, "scales are read as pairs");
  // The block scales of K tokens g, g + 8 (ks) and of V tokens g, g + 8 (vs), as f16 pairs of blocks 2i, 2i + 1.
  uint32_t ks[2][kNb / 2], vs[2][kNb / 2], kw[2][kNb];
#pragma unroll
  for (int t = 0; t < 2; ++t) {
    const uint8_t* row = raw + (8 * t + g) * G::kRow;
    layout::load_words<kNb / 2, kScaleAlign, false>(row, ks[t]);
    layout::load_words<kNb / 2, kScaleAlign, false>(row + G::kHalfTile, vs[t]);
#pragma unroll
    for (int b = 0; b < kNb; ++b) kw[t][b] = *reinterpret_cast<const uint32_t*>(row + kCodes + 16 * b + 4 * c);
  }
  float p[4] = {};
#pragma unroll
  for (int b = 0; b < kNb; ++b) {
    const uint32_t lo[4] = {q4_biased<false>(kw[0][b]), q4_biased<false>(kw[1][b]),
                            q4_biased<false>(kw[0][b] >> 8), q4_biased<false>(kw[1][b] >> 8)};
    const uint32_t hi[4] = {q4_biased<true>(kw[0][b]), q4_biased<true>(kw[1][b]), q4_biased<true>(kw[0][b] >> 8),
                            q4_biased<true>(kw[1][b] >> 8)};
    const float c0[4] = {qbias[b][0], qbias[b][1], qbias[b][0], qbias[b][1]};
    float sb[4];
    mma_16816(sb, lo, qb[2 * b][0], qb[2 * b][1], c0);
    mma_16816(sb, hi, qb[2 * b + 1][0], qb[2 * b + 1][1]);
    const float2 s0 = __half22float2(layout::bits_as_half2(ks[0][b / 2]));
    const float2 s8 = __half22float2(layout::bits_as_half2(ks[1][b / 2]));
    const float f0 = b % 2 ? s0.y : s0.x, f8 = b % 2 ? s8.y : s8.x;
    p[0] = fmaf(f0, sb[0], p[0]);
    p[1] = fmaf(f0, sb[1], p[1]);
    p[2] = fmaf(f8, sb[2], p[2]);
    p[3] = fmaf(f8, sb[3], p[3]);
  }
  swap_softmax<D>(p, nvalid, g, o, m0, m1, l0, l1);
  // P of tokens g, g + 8 (heads 2c, 2c + 1) times each block's scale of the token, then transposed into P^T's B
  // fragments (swap_tile). V's lo / hi m-tiles of block b: rows g, g + 8 are values 2g, 2g + 1 of the run.
  const __half2 p0 = layout::bits_as_half2(pack_half2(p[0], p[1])), p8 = layout::bits_as_half2(pack_half2(p[2], p[3]));
  const uint8_t* vr = raw + G::kHalfTile + kCodes + 4 * (g / 2);
  const uint32_t sel = 0x5410u + 0x2222u * (g % 2);  // bytes 2g, 2g + 1 of two tokens' word g / 2 (0x7632 if odd)
  const __half2 lo_bias = __float2half2_rn(-kQ4LoBias), hi_scale = __float2half2_rn(kQ4HiScale),
                hi_bias = __float2half2_rn(-kQ4HiBias * kQ4HiScale);
#pragma unroll
  for (int b = 0; b < kNb; ++b) {
    const __half2 s0 = layout::bits_as_half2(vs[0][b / 2]), s8 = layout::bits_as_half2(vs[1][b / 2]);
    const uint32_t pb0 = transpose8x8(half2_bits(__hmul2(p0, b % 2 ? __high2half2(s0) : __low2half2(s0))));
    const uint32_t pb1 = transpose8x8(half2_bits(__hmul2(p8, b % 2 ? __high2half2(s8) : __low2half2(s8))));
    uint32_t lo[4], hi[4];
#pragma unroll
    for (int pr = 0; pr < 2; ++pr) {  // tokens 2c, 2c + 1 (pr 0) and 2c + 8, 2c + 9: bytes interleaved by token
      const uint8_t* w = vr + (2 * c + 8 * pr) * G::kRow + 16 * b;
      const uint32_t x = __byte_perm(*reinterpret_cast<const uint32_t*>(w),
                                     *reinterpret_cast<const uint32_t*>(w + G::kRow), sel);
#pragma unroll
      for (int odd = 0; odd < 2; ++odd) {  // value 2g (row g) or 2g + 1 (row g + 8)
        const uint32_t y = x >> (8 * odd);
        lo[2 * pr + odd] = half2_bits(__hadd2(layout::bits_as_half2(q4_biased<false>(y)), lo_bias));
        hi[2 * pr + odd] = half2_bits(__hfma2(layout::bits_as_half2(q4_biased<true>(y)), hi_scale, hi_bias));
      }
    }
    mma_16816(o[2 * b], lo, pb0, pb1);
    mma_16816(o[2 * b + 1], hi, pb0, pb1);
  }
}

}  // namespace
}  // namespace kvtax::cuda::detail
