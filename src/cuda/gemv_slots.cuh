#pragma once
// The weight formats of the staged GEMV (gemv_staged.cu), one Slot per type: a slot is one lane's share of a unit
// (the 64 or 128 slots one copy brings in), with its size in the row and its dot product with x. x sits in shared
// memory as StagedX lays it out. Device code only (nvcc).
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/gemv_common.cuh"
#include "ggml/blocks.h"
#include "ggml/types.h"

namespace kvtax::cuda::detail {

// x in shared memory, by 16-byte chunks transposed: chunk k of slot g at [k * slots_row + g], so 32 lanes reading
// one chunk of consecutive slots touch consecutive addresses (no bank conflicts). Quantized types: x's int8 codes,
// then per 32 values the scale (xd) and scale * sum of codes (xs); float types: x itself.
struct StagedX {
  const int4* chunks;
  const float* xd;
  const float* xs;
  int slots_row;

  // The kValues / 4 code words of slot g, its blocks' scales and (xs set) scale * sum of codes.
  template <int kValues>
  __device__ void codes(int g, int* x, float2& d, float2* s) const {
#pragma unroll
    for (int k = 0; k < kValues / 16; ++k) {
      const int4 v = chunks[k * slots_row + g];
      x[4 * k] = v.x, x[4 * k + 1] = v.y, x[4 * k + 2] = v.z, x[4 * k + 3] = v.w;
    }
    if constexpr (kValues == 64) {
      d = reinterpret_cast<const float2*>(xd)[g];
      if (s) *s = reinterpret_cast<const float2*>(xs)[g];
    } else {
      d = make_float2(xd[g], 0.0f);
    }
  }
  // The 8 floats of slot g (float types).
  __device__ void values(int g, float* x) const {
    const int4 a = chunks[g], b = chunks[slots_row + g];
    const int w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
    for (int k = 0; k < 8; ++k) x[k] = __int_as_float(w[k]);
  }
};

template <GgmlType T>
struct Slot;

// Small integers to float on the FP32 pipe (exact): a 2^23 (signed: 1.5 * 2^23) magic number takes them into its
// mantissa; the conversion instruction runs at a fraction of the FP32 rate.
__device__ __forceinline__ float byte_to_f32(uint32_t w, uint32_t byte) {  // byte 0..3 of w
  return __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7540u | byte)) - 8388608.0f;
}
__device__ __forceinline__ float small_int_to_f32(int v) {  // |v| < 2^22
  return __int_as_float(0x4B400000 + v) - 12582912.0f;
}
// Unsigned bytes of a times signed bytes of b (the high nibbles kept in place, as 16 x their value).
__device__ __forceinline__ int dp4a_us(uint32_t a, int b, int c) {
  int d;
  asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

template <>
struct Slot<GgmlType::Q4_K> {
  static constexpr int kValues = 64, kBytes = sizeof(BlockQ4_K) / 4, kUnitSlots = 64;  // 4 slots per super-block
  // Slot s is sub-blocks 2j and 2j + 1 (j = s % 4) of super-block s / 4. Their 6-bit scales and mins come as byte
  // pairs of the 12 packed bytes (ggml's get_scale_min_k4, two sub-blocks at once); a lane's j never changes.
  __device__ static float dot(const uint8_t* unit, int s, const StagedX& sx, int g) {
    int x[16];
    float2 xd, xs;
    sx.codes<kValues>(g, x, xd, &xs);
    const uint8_t* blk = unit + (s / 4) * sizeof(BlockQ4_K);  // 144 bytes from a 128-aligned stage: 16-aligned
    const uint32_t j = s % 4, sel = (2 * j) | ((2 * j + 1) << 4);
    const uint4 h = *reinterpret_cast<const uint4*>(blk);  // d, dmin, scales[0..11]
    const uint4 q0 = *reinterpret_cast<const uint4*>(blk + 16 + 32 * j);
    const uint4 q1 = *reinterpret_cast<const uint4*>(blk + 32 + 32 * j);
    const uint32_t a = __byte_perm(h.y, h.z, sel);                    // scale bytes 2j, 2j + 1
    const uint32_t b = __byte_perm(h.z, h.w, sel);                    // bytes 2j + 4, 2j + 5
    const uint32_t c = __byte_perm(h.y, h.z, j < 2 ? sel : sel - 0x44);  // bytes 2j - 4, 2j - 3
    const uint32_t sc = j < 2 ? a & 0x3f3f : (b & 0x0f0f) | ((c & 0xc0c0) >> 2);
    const uint32_t m = j < 2 ? b & 0x3f3f : ((b >> 4) & 0x0f0f) | ((a & 0xc0c0) >> 2);
    const uint32_t q[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
    int slo = 0, shi = 0;  // shi: 16 x the high nibbles' dot
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      slo = dp4a_us(q[k] & 0x0f0f0f0fu, x[k], slo);
      shi = dp4a_us(q[k] & 0xf0f0f0f0u, x[8 + k], shi);
    }
    const float d = half_to_f32(h.x & 0xffff), dmin = half_to_f32(h.x >> 16);
    const float pos = xd.x * small_int_to_f32(slo) * byte_to_f32(sc, 0) +
                      xd.y * small_int_to_f32(shi) * (byte_to_f32(sc, 1) * 0.0625f);
    const float neg = byte_to_f32(m, 0) * xs.x + byte_to_f32(m, 1) * xs.y;
    return d * pos - dmin * neg;
  }
};

template <>
struct Slot<GgmlType::Q4_0> {
  static constexpr int kValues = 64, kBytes = 2 * sizeof(BlockQ4_0), kUnitSlots = 64;
  // Slot s is blocks 2s and 2s + 1: 36 bytes from a 4-aligned offset, so the first block's codes sit 2 bytes off
  // word alignment and the second's on it.
  __device__ static float dot(const uint8_t* unit, int s, const StagedX& sx, int g) {
    int x[16];
    float2 xd, xs;
    sx.codes<kValues>(g, x, xd, &xs);
    const uint32_t* p = reinterpret_cast<const uint32_t*>(unit + s * kBytes);
    uint32_t w[9];
#pragma unroll
    for (int k = 0; k < 9; ++k) w[k] = p[k];
    const uint32_t q[2][4] = {{__funnelshift_r(w[0], w[1], 16), __funnelshift_r(w[1], w[2], 16),
                               __funnelshift_r(w[2], w[3], 16), __funnelshift_r(w[3], w[4], 16)},
                              {w[5], w[6], w[7], w[8]}};
    const float d[2] = {half_to_f32(w[0] & 0xffff), half_to_f32(w[4] >> 16)};
    float r = 0.0f;
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      int lo = 0, hi = 0;  // hi: 16 x the high nibbles' dot
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        lo = dp4a_us(q[b][k] & 0x0f0f0f0fu, x[8 * b + k], lo);      // values 4k..4k+3
        hi = dp4a_us(q[b][k] & 0xf0f0f0f0u, x[8 * b + 4 + k], hi);  // values 16+4k..
      }
      // sum (code - 8) * x = xd * acc - 8 * xd * sum(xq)
      const float acc = small_int_to_f32(lo + (hi >> 4));
      r = fmaf(d[b], fmaf(b ? xd.y : xd.x, acc, -8.0f * (b ? xs.y : xs.x)), r);
    }
    return r;
  }
};

template <>
struct Slot<GgmlType::Q8_0> {
  static constexpr int kValues = 32, kBytes = sizeof(BlockQ8_0), kUnitSlots = 64;
  __device__ static float dot(const uint8_t* unit, int s, const StagedX& sx, int g) {
    int x[8];
    float2 xd;
    sx.codes<kValues>(g, x, xd, nullptr);
    uint32_t q[8];
    const float d = half_to_f32(load_block_u16_then<8, true>(unit + s * sizeof(BlockQ8_0), q));
    int acc = 0;
#pragma unroll
    for (int k = 0; k < 8; ++k) acc = __dp4a(int(q[k]), x[k], acc);
    return d * xd.x * float(acc);
  }
};

// 16-bit float weights: a slot is 8 values (16 bytes), a unit 128 slots (2 KB: the products are cheap, so a unit
// carries more bytes per lane than the quantized ones).
template <GgmlType T>
struct FloatSlot {
  static constexpr int kValues = 8, kBytes = 16, kUnitSlots = 128;
  __device__ static float dot(const uint8_t* unit, int s, const StagedX& sx, int g) {
    const uint4 w = *reinterpret_cast<const uint4*>(unit + 16 * s);
    float x[8];
    sx.values(g, x);
    return dot_half8<T>(w, x, 0.0f);
  }
};
template <>
struct Slot<GgmlType::F16> : FloatSlot<GgmlType::F16> {};
template <>
struct Slot<GgmlType::BF16> : FloatSlot<GgmlType::BF16> {};

constexpr bool float_type(GgmlType t) { return t == GgmlType::F16 || t == GgmlType::BF16; }  // x as floats, not codes
template <GgmlType T>
constexpr bool kFloat = float_type(T);

// Slot<T> exists: the staged kernel takes T.
constexpr bool staged_type(GgmlType t) {
  return t == GgmlType::Q8_0 || t == GgmlType::Q4_0 || t == GgmlType::Q4_K || t == GgmlType::F16 ||
         t == GgmlType::BF16;
}

}  // namespace kvtax::cuda::detail
