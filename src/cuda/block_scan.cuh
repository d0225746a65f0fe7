#pragma once
// Maxima, sums and prefix sums over a warp or a block, in thread order, the result in every thread (the block forms end
// with a barrier). Exclusive prefixes come from shifting the inclusive scan, not from subtracting each value from it: a large
// value absorbs the small ones before it in "inclusive - v" (the device draw picked the wrong range that way).
#include <cuda_runtime.h>

namespace kvtax::cuda::detail {

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}
// Butterfly order: every lane gets the same sum, though not the lanes' sum in thread order.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

template <class T>
__device__ __forceinline__ T warp_inclusive_sum(T v) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const T o = __shfl_up_sync(0xffffffffu, v, off);
    if (lane >= off) v += o;
  }
  return v;
}

// The sum of the lanes' v before this one; *inclusive gets it with v.
template <class T>
__device__ __forceinline__ T warp_exclusive_sum(T v, T* inclusive) {
  *inclusive = warp_inclusive_sum(v);
  const T before = __shfl_up_sync(0xffffffffu, *inclusive, 1);
  return threadIdx.x % 32 == 0 ? T(0) : before;
}

// Exclusive prefix of v over the block's kThreads threads; *total gets the sum of all.
template <int kThreads, class T>
__device__ __forceinline__ T block_exclusive_sum(T v, T* total) {
  __shared__ T part[kThreads / 32];
  T inc;
  const T in_warp = warp_exclusive_sum(v, &inc);
  if (threadIdx.x % 32 == 31) part[threadIdx.x / 32] = inc;
  __syncthreads();
  T before = 0, all = 0;
#pragma unroll
  for (int w = 0; w < kThreads / 32; ++w) {
    if (w < int(threadIdx.x / 32)) before += part[w];
    all += part[w];
  }
  __syncthreads();
  *total = all;
  return before + in_warp;
}

}  // namespace kvtax::cuda::detail
