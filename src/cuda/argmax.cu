#include "cuda/argmax.h"

#include <climits>
#include <cmath>

namespace kvtax::cuda {
namespace {

constexpr int kBlocks = 64, kThreads = 256;  // 16k threads: 8 values each over 128k logits

struct Scratch {
  float value[kBlocks];
  int index[kBlocks];
  unsigned arrived;  // blocks done; the last one resets it
};

// (v, i) beats (bv, bi): larger, or equal and earlier. A NaN v never beats anything.
__device__ __forceinline__ bool beats(float v, int i, float bv, int bi) { return v > bv || (v == bv && i < bi); }

__device__ __forceinline__ void warp_best(float& v, int& i) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, off);
    const int oi = __shfl_xor_sync(0xffffffffu, i, off);
    if (beats(ov, oi, v, i)) v = ov, i = oi;
  }
}

// The best of the block's threads' (v, i), in every thread of warp 0.
__device__ __forceinline__ void block_best(float& v, int& i) {
  __shared__ float sv[kThreads / 32];
  __shared__ int si[kThreads / 32];
  warp_best(v, i);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) sv[warp] = v, si[warp] = i;
  __syncthreads();
  if (warp == 0) {
    v = lane < kThreads / 32 ? sv[lane] : -INFINITY;
    i = lane < kThreads / 32 ? si[lane] : INT_MAX;
    warp_best(v, i);
  }
}

__global__ void __launch_bounds__(kThreads) argmax_kernel(const float* x, int n, Scratch* s, int32_t* out) {
  float v = -INFINITY;  // index INT_MAX: any value, -inf included, beats the start
  int i = INT_MAX;
  for (int k = blockIdx.x * kThreads + threadIdx.x; k < n; k += kBlocks * kThreads)
    if (beats(x[k], k, v, i)) v = x[k], i = k;
  block_best(v, i);
  __shared__ bool last;
  if (threadIdx.x == 0) {
    s->value[blockIdx.x] = v;
    s->index[blockIdx.x] = i;
    __threadfence();  // the partial is visible before the count says so
    last = atomicAdd(&s->arrived, 1u) == kBlocks - 1;
  }
  __syncthreads();
  if (!last || threadIdx.x >= 32) return;
  __threadfence();
  v = -INFINITY, i = INT_MAX;
  for (int b = threadIdx.x; b < kBlocks; b += 32) {
    const float bv = __ldcg(&s->value[b]);
    const int bi = __ldcg(&s->index[b]);
    if (beats(bv, bi, v, i)) v = bv, i = bi;
  }
  warp_best(v, i);
  if (threadIdx.x == 0) {
    *out = i == INT_MAX ? 0 : i;
    s->arrived = 0;
  }
}

}  // namespace

size_t argmax_scratch_bytes() { return sizeof(Scratch); }

cudaError_t argmax(const float* x, int n, void* scratch, int32_t* out, cudaStream_t s) {
  if (n < 1) return cudaErrorInvalidValue;
  argmax_kernel<<<kBlocks, kThreads, 0, s>>>(x, n, static_cast<Scratch*>(scratch), out);
  return cudaGetLastError();
}

}  // namespace kvtax::cuda
