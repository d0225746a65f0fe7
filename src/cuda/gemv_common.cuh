#pragma once
// Pieces both GEMV kernel families share (gemv.cu: loads straight from global memory; gemv_staged.cu: weights staged
// through shared memory by the bulk copy engine): the norm prologue and the residual epilogue of the
// decode step's fusions, and the realigning loader of 2-byte aligned ggml blocks. Device code only (nvcc).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/block_scan.cuh"
#include "cuda/gemv_launch.h"
#include "cuda/quantize_x.cuh"
#include "ggml/types.h"

namespace kvtax::cuda::detail {

__device__ __forceinline__ float half_to_f32(uint32_t bits16) { return __half2float(__ushort_as_half(uint16_t(bits16))); }

// acc plus the dot product of 8 16-bit weights (F16 or BF16, in w) with x[0..8), one FMA at a time in order.
template <GgmlType T>
__device__ __forceinline__ float dot_half8(const uint4 w, const float* x, float acc) {
  const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    float lo, hi;
    if constexpr (T == GgmlType::F16) {
      lo = half_to_f32(ws[k] & 0xffff);
      hi = half_to_f32(ws[k] >> 16);
    } else {
      lo = __uint_as_float(ws[k] << 16);
      hi = __uint_as_float(ws[k] & 0xffff0000u);
    }
    acc = fmaf(lo, x[2 * k], acc);
    acc = fmaf(hi, x[2 * k + 1], acc);
  }
  return acc;
}

// N + 1 aligned words starting at the 2-byte aligned block `blk`; returns the block's first u16 and puts the N words
// that follow it in q (the block's payload, realigned). kShared: blk points into shared memory (no read-only path).
template <int N, bool kShared = false>
__device__ __forceinline__ uint32_t load_block_u16_then(const uint8_t* blk, uint32_t* q) {
  const int off = int(reinterpret_cast<uintptr_t>(blk) & 3);  // 0 or 2
  const uint32_t* p = reinterpret_cast<const uint32_t*>(blk - off);
  uint32_t w[N + 1];
#pragma unroll
  for (int k = 0; k <= N; ++k) w[k] = kShared ? p[k] : __ldg(p + k);
#pragma unroll
  for (int k = 0; k < N; ++k) q[k] = off ? w[k + 1] : __funnelshift_r(w[k], w[k + 1], 16);
  return off ? (w[0] >> 16) : (w[0] & 0xffff);
}

// The norm prologue (GemvArgs::rms_part): 1 / sqrtf(mean + eps) from the rms_n / 32 partial sums of squares, added
// in one fixed order by the calling warp (the same double everywhere, run after run). 1 without partial sums.
__device__ __forceinline__ float rms_scale(const GemvArgs& a) {
  if (!a.rms_part) return 1.0f;
  double t = 0;
  for (int i = threadIdx.x & 31; i < a.rms_n / 32; i += 32) t += a.rms_part[i];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
  return rms_factor(t, a.rms_n, a.rms_eps);
}

// The residual epilogue (GemvArgs::res) of a block of 32 rows, their products in dots: the residual add, the next
// norm's input without its 1/rms, its int8 codes, and the block's sum of squares (float squares summed in double,
// as ops::rmsnorm). One warp, lane i on row 32 blockIdx.x + i.
// pre (optional): the rows' residual then norm weights, 32 each, loaded by the caller ahead of time.
__device__ __forceinline__ void residual_epilogue(const GemvArgs& a, const float* dots, const float* pre = nullptr) {
  if (threadIdx.x >= 32) return;
  const int lane = threadIdx.x, r = blockIdx.x * 32 + lane;
  const float xn = (pre ? pre[lane] : a.res[r]) + dots[lane];
  a.res[r] = xn;
  norm_part_block32(xn, pre ? pre[32 + lane] : a.norm_w[r], blockIdx.x * 32, a.norm_x, a.norm_q.xq, a.norm_q.xd,
                    a.norm_q.xs, a.ss_part);
}

}  // namespace kvtax::cuda::detail
