#pragma once
// The int8 copy of x that the quantized GEMVs multiply: per 32 values d = max|x| / 127, q = round(x / d), and
// d * sum(q) for the min/offset terms of Q4_0 and Q4_K. One definition for every kernel that writes it (the
// GEMV's own x pass, the fused residual + norm), so the codes do not depend on which kernel made them.
#include <cuda_runtime.h>

#include <cstdint>

namespace kvtax::cuda::detail {

// Called by all 32 lanes of a warp holding x[base .. base + 32) (lane i holds x[base + i]).
__device__ __forceinline__ void quantize_x_block32(float v, int base, int8_t* xq, float* xd, float* xs) {
  float amax = fabsf(v);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float d = amax / 127.0f;
  const int q = d > 0.0f ? __float2int_rn(v / d) : 0;
  const int lane = threadIdx.x & 31;
  xq[base + lane] = int8_t(q);
  int s = q;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (lane == 0) {
    xd[base / 32] = d;
    xs[base / 32] = d * float(s);
  }
}

// A fused norm's part of 32 values, one per lane (lane i holds x[base + i]), as the decode step leaves it for the GEMVs
// after it (GemvFusion::rms_part): x * w without the 1/rms (into norm_x, if set), its int8 codes (if xq is set), and
// the 32 float squares of x summed in double into ss_part[base / 32].
__device__ __forceinline__ void norm_part_block32(float x, float w, int base, float* norm_x, int8_t* xq, float* xd,
                                                  float* xs, double* ss_part) {
  const float xw = __fmul_rn(x, w);
  if (norm_x) norm_x[base + (threadIdx.x & 31)] = xw;
  if (xq) quantize_x_block32(xw, base, xq, xd, xs);
  double sq = double(__fmul_rn(x, x));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) sq += __shfl_xor_sync(0xffffffffu, sq, o);
  if ((threadIdx.x & 31) == 0) ss_part[base / 32] = sq;
}

// An RMS norm's factor 1 / sqrt(mean + eps) from the row's sum of squares (float squares summed in double): llama.cpp's
// rounding steps, as the CPU, a float mean and 1/sqrtf. The norm kernels and the GEMVs that apply a fused norm's
// factor (GemvFusion::rms_part) both take it from here.
__device__ __forceinline__ float rms_factor(double sum_sq, int n, float eps) {
  return 1.0f / sqrtf(float(sum_sq / n) + eps);
}

// silu(g) * u in the CPU's float steps (ops/cpu/elementwise.cpp's silu_mul_inplace).
__device__ __forceinline__ float silu_mul(float g, float u) { return __fmul_rn(g / (1.0f + expf(-g)), u); }

}  // namespace kvtax::cuda::detail
