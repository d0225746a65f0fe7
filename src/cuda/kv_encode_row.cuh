#pragma once
// One KV row encoded by one warp, by the steps of the CPU encoder in kv/codecs/*.cpp (the same bytes), for the KV
// encode kernels (kv_encode.cu). The row is staged in shared memory and rotated for the rotated codecs
// (rotate_regs.cuh). Device code only (nvcc).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/attention_launch.h"
#include "cuda/kv_encode_launch.h"
#include "cuda/rotate_regs.cuh"
#include "kv/codecs/codec.h"

namespace kvtax::cuda::detail {

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The 32 lanes' sums added as tq.cpp's warp_order_sum does: a butterfly, each pair's sum the same on both lanes.
__device__ __forceinline__ double warp_sum_ordered(double v) {
  for (int o = 16; o > 0; o >>= 1) v = __dadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ uint16_t f2h(float f) { return __half_as_ushort(__float2half_rn(f)); }

__device__ inline uint16_t f2bf(float f) {  // core/f16.h's f32_to_bf16
  uint32_t x = __float_as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40);
  x += 0x7fff + ((x >> 16) & 1);
  return uint16_t(x >> 16);
}

__device__ inline uint8_t f2e4m3(float x) {  // kv/codecs/fp8.cpp's f32_to_e4m3
  if (!(x == x)) return 0;
  const uint8_t sign = signbit(x) ? 0x80 : 0;
  const float a = fminf(fabsf(x), 448.0f);
  if (a < 0.015625f) return uint8_t(sign | int(rintf(__fmul_rn(a, 512.0f))));
  int e;
  const float f = frexpf(a, &e);
  int m = int(rintf(__fmul_rn(__fsub_rn(__fmul_rn(f, 2.0f), 1.0f), 8.0f)));
  int be = e - 1 + 7;
  if (m == 8) { m = 0; ++be; }
  if (be > 15 || (be == 15 && m > 6)) { be = 15; m = 6; }
  return uint8_t(sign | (be << 3) | m);
}

__device__ __forceinline__ bool finite(float v) { return isfinite(v); }

// rotation.cpp's rotate() of x (D floats in shared memory) in registers, D / 32 values per lane (rotate_regs.cuh:
// the same steps in the same order). The butterflies through shared memory, a warp barrier per step, made the
// rotated codecs' prefill encode 2.5x fp8's (H200, 2026-12-01).
template <int D>
__device__ __forceinline__ void rotate_row(float* x, const float* signs, int lane) {
  constexpr int kPer = D / 32;
  float v[kPer];
#pragma unroll
  for (int k = 0; k < kPer; ++k) v[k] = x[kPer * lane + k];
  rotate_warp<D>(v, signs, lane, 1.0f / sqrtf(float(D)));
#pragma unroll
  for (int k = 0; k < kPer; ++k) x[kPer * lane + k] = v[k];
  __syncwarp();
}

// x (d floats in shared memory) -> row bytes in shared memory. All 32 lanes call it. The codec and, for the head
// widths of the models served (D > 0), the width are compile-time: a kernel that switched on both at run time spent
// ~930 instructions per row on the switch, index arithmetic and loops of unknown length (ncu, H200, 2026-12-01).
template <kv::CodecId C, int D>
__device__ void encode_row(int d_rt, float* x, uint8_t* row, uint8_t* codes, const EncodeTables& t) {
  using kv::CodecId;
  constexpr CodecId c = C;
  const int d = D > 0 ? D : d_rt;
  const int lane = threadIdx.x & 31;
  constexpr bool rotated = c == CodecId::q4r || c == CodecId::tq4 || c == CodecId::tq3;
  if constexpr (rotated && D > 0) {
    rotate_row<D>(x, t.signs, lane);
  } else if (rotated) {  // rotation.cpp's rotate()
    for (int i = lane; i < d; i += 32) x[i] = __fmul_rn(x[i], t.signs[i]);
    __syncwarp();
    for (int len = 1; len < d; len <<= 1) {
      for (int j = lane; j < d / 2; j += 32) {
        const int i = (j / len) * 2 * len + (j % len);
        const float a = x[i], b = x[i + len];
        x[i] = __fadd_rn(a, b);
        x[i + len] = __fsub_rn(a, b);
      }
      __syncwarp();
    }
    const float n = 1.0f / sqrtf(float(d));
    for (int i = lane; i < d; i += 32) x[i] = __fmul_rn(x[i], n);
    __syncwarp();
  }
  switch (c) {
    case CodecId::f32:
      for (int i = lane; i < d; i += 32) reinterpret_cast<float*>(row)[i] = x[i];
      break;
    case CodecId::f16:
      for (int i = lane; i < d; i += 32) reinterpret_cast<uint16_t*>(row)[i] = f2h(x[i]);
      break;
    case CodecId::bf16:
      for (int i = lane; i < d; i += 32) reinterpret_cast<uint16_t*>(row)[i] = f2bf(x[i]);
      break;
    case CodecId::fp8: {
      float amax = 0.0f;
      for (int i = lane; i < d; i += 32)
        if (finite(x[i])) amax = fmaxf(amax, fabsf(x[i]));
      amax = warp_max(amax);
      const float scale = amax / 448.0f, inv = scale > 0 ? 1.0f / scale : 0.0f;
      if (lane == 0) *reinterpret_cast<float*>(row) = scale;
      for (int i = lane; i < d; i += 32) row[4 + i] = f2e4m3(__fmul_rn(x[i], inv));
      break;
    }
    case CodecId::q8: {  // lane l of a 32-value block: value l; blocks one after another
      int8_t* q = reinterpret_cast<int8_t*>(row + 2 * (d / 32));
      for (int b = 0; b < d / 32; ++b) {
        const float v = x[32 * b + lane];
        const float amax = warp_max(finite(v) ? fabsf(v) : 0.0f);
        const uint16_t h = f2h(fminf(amax / 127.0f, 65504.0f));
        if (lane == 0) reinterpret_cast<uint16_t*>(row)[b] = h;
        const float s = __half2float(__ushort_as_half(h)), inv = s > 0 ? 1.0f / s : 0.0f;
        float r = __fmul_rn(v, inv);
        r = r == r ? fminf(fmaxf(r, -127.0f), 127.0f) : 0.0f;
        q[32 * b + lane] = int8_t(rintf(r));
      }
      break;
    }
    case CodecId::q4:
    case CodecId::q4r: {
      uint8_t* q = row + 2 * (d / 32);
      for (int b = 0; b < d / 32; ++b) {
        const float v = x[32 * b + lane];
        // The value of largest magnitude, the first one on ties (the CPU keeps the first strict maximum).
        float am = finite(v) ? fabsf(v) : 0.0f;
        int idx = lane;
        for (int o = 16; o > 0; o >>= 1) {
          const float am2 = __shfl_xor_sync(0xffffffffu, am, o);
          const int idx2 = __shfl_xor_sync(0xffffffffu, idx, o);
          if (am2 > am || (am2 == am && idx2 < idx)) { am = am2; idx = idx2; }
        }
        const float vmax = am > 0.0f ? x[32 * b + idx] : 0.0f;
        const float s0 = fminf(fmaxf(vmax / -8.0f, -65504.0f), 65504.0f);
        const uint16_t h = f2h(s0);
        if (lane == 0) reinterpret_cast<uint16_t*>(row)[b] = h;
        const float s = __half2float(__ushort_as_half(h)), inv = s != 0 ? 1.0f / s : 0.0f;
        float r = __fmul_rn(v, inv);
        r = r == r ? fminf(fmaxf(r, -8.0f), 7.0f) : 0.0f;
        codes[32 * b + lane] = uint8_t(int(rintf(r)) + 8);
        __syncwarp();
        if (lane < 16) q[16 * b + lane] = uint8_t(codes[32 * b + lane] | (codes[32 * b + lane + 16] << 4));
        __syncwarp();
      }
      break;
    }
    case CodecId::tq4:
    case CodecId::tq3: {  // kv/codecs/tq.cpp's encode_codes, its sums in the same order (warp_order_sum)
      const int K = c == CodecId::tq4 ? 16 : 8;
      // The thresholds in registers (past the last one: +inf, never crossed) and level k in lane k: a code is 15
      // compares and a level one shuffle, where loads from the tables made every value a chain of them.
      float thr[15];
#pragma unroll
      for (int k = 0; k < 15; ++k) thr[k] = k + 1 < K ? t.thresholds[k] : INFINITY;
      const float lane_level = t.levels[lane % K];
      double n2 = 0;
      for (int i = lane; i < d; i += 32)
        if (finite(x[i])) n2 = __dadd_rn(n2, __dmul_rn(double(x[i]), double(x[i])));
      n2 = warp_sum_ordered(n2);
      const bool zero = !(n2 > 0) || !isfinite(n2);
      const float to_unit = zero ? 0.0f : float(sqrt(double(d)) / sqrt(n2));
      double c2 = 0;
      for (int i = lane; i < d; i += 32) {
        int code = K / 2;
        if (!zero) {
          const float u = finite(x[i]) ? __fmul_rn(x[i], to_unit) : 0.0f;
          code = 0;
#pragma unroll
          for (int k = 0; k < 15; ++k) code += u > thr[k];
        }
        codes[i] = uint8_t(code);
        const double l = __shfl_sync(0xffffffffu, lane_level, code);
        c2 = __dadd_rn(c2, __dmul_rn(l, l));
      }
      c2 = warp_sum_ordered(c2);
      __syncwarp();
      if (lane == 0) *reinterpret_cast<float*>(row) = zero ? 0.0f : float(sqrt(n2) / sqrt(c2));
      if (c == CodecId::tq4) {
        for (int i = 2 * lane; i < d; i += 64) row[4 + i / 2] = uint8_t(codes[i] | (codes[i + 1] << 4));
      } else {
        for (int g = lane; g < d / 8; g += 32) {
          uint32_t bits = 0;
          for (int j = 0; j < 8; ++j) bits |= uint32_t(codes[8 * g + j]) << (3 * j);
          row[4 + 3 * g] = uint8_t(bits);
          row[5 + 3 * g] = uint8_t(bits >> 8);
          row[6 + 3 * g] = uint8_t(bits >> 16);
        }
      }
      break;
    }
    default:
      break;
  }
  __syncwarp();
}

// Row pos of KV head h (its K row, or its V row when is_v) in the paged pool of a (EncodeArgs, or DecodeArgs whose
// pool is const: the pages are the decoder's, writable, and only the new token's row is written through it).
template <class A>
__device__ __forceinline__ uint8_t* paged_row(const A& a, int pos, int h, int is_v) {
  return const_cast<uint8_t*>(a.pool) + size_t(a.pages[pos >> kPageShift]) * a.page_bytes + (is_v ? a.v_offset : 0) +
         size_t(h) * a.head_stride + size_t(pos & (kPageTokens - 1)) * a.row_bytes;
}

// An encoded row (row_bytes, a multiple of 4) stored from shared memory by the warp's lanes, a word each.
__device__ __forceinline__ void store_row(uint8_t* dst, const uint8_t* row, size_t row_bytes, int lane) {
  for (int i = lane; i < int(row_bytes / 4); i += 32)
    reinterpret_cast<uint32_t*>(dst)[i] = reinterpret_cast<const uint32_t*>(row)[i];
}

}  // namespace kvtax::cuda::detail
