#pragma once
// One rotary pair of one head vector, in the CPU's float steps (theta multiplied pair by pair, so only
// sinf/cosf differ, <= 2 ulp). One definition for the rope kernel (ops.cu) and the KV encoder that rotates k as
// it encodes it (kv_encode.cu), so the fused and the separate paths give the same floats.
#include <cuda_runtime.h>

#include "cuda/ops.h"

namespace kvtax::cuda::detail {

// cos and sin of rotary pair i's angle at position pos, each times mscale (the same for every head).
__device__ __forceinline__ float2 rope_cos_sin(int i, int pos, const ops::RopeParams& p) {
  float theta = float(pos);
  for (int k = 0; k < i; ++k) theta = __fmul_rn(theta, p.theta_scale);
  const float extrap = theta / (p.factor ? p.factor[i] : 1.0f);
  float th = __fmul_rn(p.freq_scale, extrap);
  if (p.ramp) th = __fadd_rn(__fmul_rn(th, 1.0f - p.ramp[i]), __fmul_rn(extrap, p.ramp[i]));
  return make_float2(__fmul_rn(cosf(th), p.mscale), __fmul_rn(sinf(th), p.mscale));
}

// One pair (x0, x1) turned by cs = (cos, sin), in the CPU's float steps.
__device__ __forceinline__ float2 rope_turn(float x0, float x1, float2 cs) {
  return make_float2(__fsub_rn(__fmul_rn(x0, cs.x), __fmul_rn(x1, cs.y)),
                     __fadd_rn(__fmul_rn(x0, cs.y), __fmul_rn(x1, cs.x)));
}

// Rotates pair i of one head's values v (global or shared memory) by cs = rope_cos_sin(i, ...).
__device__ __forceinline__ void rope_rotate(float* v, int i, float2 cs, const ops::RopeParams& p) {
  const int half = p.dim / 2, a = p.neox ? i : 2 * i, b = p.neox ? i + half : 2 * i + 1;
  const float2 r = rope_turn(v[a], v[b], cs);
  v[a] = r.x;
  v[b] = r.y;
}

// v: one head's values; i < p.dim / 2.
__device__ __forceinline__ void rope_pair(float* v, int i, int pos, const ops::RopeParams& p) {
  rope_rotate(v, i, rope_cos_sin(i, pos, p), p);
}

}  // namespace kvtax::cuda::detail
