#pragma once
// One rotary pair of one head vector, in the CPU's float steps (theta multiplied pair by pair, so only
// sinf/cosf differ, <= 2 ulp). One definition for the rope kernel (ops.cu) and the KV encoder that rotates k as
// it encodes it (kv_encode.cu), so the fused and the separate paths give the same floats.
#include <cuda_runtime.h>

#include "cuda/ops.h"

namespace kvtax::cuda::detail {

// v: one head's values (global or shared memory); i < p.dim / 2.
__device__ __forceinline__ void rope_pair(float* v, int i, int pos, const ops::RopeParams& p) {
  float theta = float(pos);
  for (int k = 0; k < i; ++k) theta = __fmul_rn(theta, p.theta_scale);
  const float extrap = theta / (p.factor ? p.factor[i] : 1.0f);
  float th = __fmul_rn(p.freq_scale, extrap);
  if (p.ramp) th = __fadd_rn(__fmul_rn(th, 1.0f - p.ramp[i]), __fmul_rn(extrap, p.ramp[i]));
  const float cs = __fmul_rn(cosf(th), p.mscale), sn = __fmul_rn(sinf(th), p.mscale);
  const int half = p.dim / 2, a = p.neox ? i : 2 * i, b = p.neox ? i + half : 2 * i + 1;
  const float x0 = v[a], x1 = v[b];
  v[a] = __fsub_rn(__fmul_rn(x0, cs), __fmul_rn(x1, sn));
  v[b] = __fadd_rn(__fmul_rn(x0, sn), __fmul_rn(x1, cs));
}

}  // namespace kvtax::cuda::detail
