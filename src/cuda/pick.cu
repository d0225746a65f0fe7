#include "cuda/pick.h"

#include <climits>
#include <cmath>

#include "cuda/block_scan.cuh"

namespace kvtax::cuda {
namespace {

constexpr int kBlocks = 64, kThreads = 256;  // 16k threads: 8 values each over 128k logits

struct Scratch {
  float value[kBlocks];  // argmax: a block's best value; draw: its largest scaled logit
  int index[kBlocks];    // argmax: that value's index
  double sum[kBlocks];   // draw: its weights' sum, relative to its largest
  unsigned arrived;      // blocks done; the last one resets it
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

// The block's largest v, in every thread (ends with a barrier).
__device__ __forceinline__ float block_max(float v) {
  __shared__ float part[kThreads / 32];
  v = detail::warp_max(v);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = v;
  __syncthreads();
  v = part[0];
#pragma unroll
  for (int w = 1; w < kThreads / 32; ++w) v = fmaxf(v, part[w]);
  __syncthreads();
  return v;
}

// Publishes this block's partial and tells whether it arrived last (then the others' partials are visible to it).
__device__ __forceinline__ bool arrive_last(Scratch* s) {
  __shared__ bool last;
  if (threadIdx.x == 0) {
    __threadfence();  // the partial is visible before the count says so
    last = atomicAdd(&s->arrived, 1u) == kBlocks - 1;
  }
  __syncthreads();
  if (last) __threadfence();
  return last;
}

__global__ void __launch_bounds__(kThreads) argmax_kernel(const float* x, int n, Scratch* s, int32_t* out) {
  float v = -INFINITY;  // index INT_MAX: any value, -inf included, beats the start
  int i = INT_MAX;
  for (int k = blockIdx.x * kThreads + threadIdx.x; k < n; k += kBlocks * kThreads)
    if (beats(x[k], k, v, i)) v = x[k], i = k;
  block_best(v, i);
  if (threadIdx.x == 0) s->value[blockIdx.x] = v, s->index[blockIdx.x] = i;
  if (!arrive_last(s) || threadIdx.x >= 32) return;
  v = -INFINITY, i = INT_MAX;
  for (int b = threadIdx.x; b < kBlocks; b += 32) {
    const float bv = __ldcg(&s->value[b]);
    const int bi = __ldcg(&s->index[b]);
    if (beats(bv, bi, v, i)) v = bv, i = bi;
  }
  warp_best(v, i);
  if (threadIdx.x == 0) {
    *out = i == INT_MAX ? -1 : i;  // every value NaN: no pick (kNoPick)
    s->arrived = 0;
  }
}

// Block b sums the weights of its contiguous range of indices (relative to its largest scaled logit); the last block
// to arrive scales those sums to the row's largest, finds the range where the running sum passes u times the total,
// and walks that range alone.
//
// Both searches (the range among the blocks', the share among its threads') take the last part with weight whose
// exclusive prefix sum is at most the target. The prefixes come from scans, so a part's prefix and the previous part's
// prefix plus its sum can differ by rounding: "the first part whose prefix plus sum passes the target" can then name
// no part at all (a target of 0 did), where "the last whose prefix does not" always names one, and the same one away
// from ties.
__global__ void __launch_bounds__(kThreads) draw_kernel(const float* x, int n, float inv_t, double u, Scratch* s,
                                                        int32_t* out) {
  const int per = (n + kBlocks - 1) / kBlocks;
  {
    const int lo = blockIdx.x * per, hi = min(n, lo + per);
    float m = -INFINITY;
    for (int i = lo + threadIdx.x; i < hi; i += kThreads) m = fmaxf(m, x[i] * inv_t);
    m = block_max(m);
    double t = 0;
    if (m > -INFINITY)
      for (int i = lo + threadIdx.x; i < hi; i += kThreads) t += expf(x[i] * inv_t - m);
    double sum;
    detail::block_exclusive_sum<kThreads>(t, &sum);
    if (threadIdx.x == 0) s->value[blockIdx.x] = m, s->sum[blockIdx.x] = sum;
  }
  if (!arrive_last(s)) return;

  __shared__ float top;    // the chosen range's largest scaled logit: its weights are relative to it
  __shared__ int range;    // the block range the draw falls in (-1: no weight at all)
  __shared__ double rest;  // what is left of the target at that range's start, in those weights
  if (threadIdx.x < 32) {  // lane l holds ranges 2l and 2l + 1
    const int lane = threadIdx.x;
    float m[2];
    double w[2];
    float mx = -INFINITY;
    for (int k = 0; k < 2; ++k) m[k] = __ldcg(&s->value[2 * lane + k]), mx = fmaxf(mx, m[k]);
    mx = detail::warp_max(mx);
    for (int k = 0; k < 2; ++k)
      w[k] = m[k] > -INFINITY ? __ldcg(&s->sum[2 * lane + k]) * exp(double(m[k]) - double(mx)) : 0.0;
    double inc;
    const double before = detail::warp_exclusive_sum(w[0] + w[1], &inc);
    const double total = __shfl_sync(0xffffffffu, inc, 31), target = u * total;
    const double pre[2] = {before, before + w[0]};
    const int k = w[1] > 0 && pre[1] <= target ? 1 : w[0] > 0 && pre[0] <= target ? 0 : -1;
    const unsigned lanes = __ballot_sync(0xffffffffu, k >= 0);
    if (lane == 0) range = -1;
    __syncwarp();
    if (total > 0 && total < INFINITY && lanes && lane == 31 - __clz(lanes))
      range = 2 * lane + k, top = m[k], rest = (target - pre[k]) / exp(double(m[k]) - double(mx));
  }
  __syncthreads();
  if (range < 0) {  // no positive finite weight anywhere: no pick (kNoPick)
    if (threadIdx.x == 0) *out = -1, s->arrived = 0;
    return;
  }
  // The range walked by all threads, each over a contiguous share: sums, their prefix, then the share that holds the
  // crossing walks its values (to its last token with weight, if rounding leaves its sum short of the target).
  __shared__ int share;
  if (threadIdx.x == 0) share = -1;
  const int lo = range * per, hi = min(n, lo + per), q = (hi - lo + kThreads - 1) / kThreads;
  const int tlo = min(hi, lo + int(threadIdx.x) * q), thi = min(hi, tlo + q);
  double mine = 0;
  for (int i = tlo; i < thi; ++i) mine += expf(x[i] * inv_t - top);
  double all;
  const double pre = detail::block_exclusive_sum<kThreads>(mine, &all);  // its barriers also publish share's start
  if (mine > 0 && pre <= rest) atomicMax(&share, int(threadIdx.x));
  __syncthreads();
  if (threadIdx.x == 0) s->arrived = 0;
  if (int(threadIdx.x) == share) {  // there is one: the range's largest value has weight 1
    double c = pre;
    int at = tlo;
    for (int i = tlo; i < thi; ++i) {
      const float wi = expf(x[i] * inv_t - top);
      c += wi;
      if (wi > 0) at = i;
      if (c > rest) break;
    }
    *out = at;
  }
}

}  // namespace

size_t pick_scratch_bytes() { return sizeof(Scratch); }

cudaError_t argmax(const float* x, int n, void* scratch, int32_t* out, cudaStream_t s) {
  if (n < 1) return cudaErrorInvalidValue;
  argmax_kernel<<<kBlocks, kThreads, 0, s>>>(x, n, static_cast<Scratch*>(scratch), out);
  return cudaGetLastError();
}

cudaError_t draw(const float* x, int n, float inv_t, double u, void* scratch, int32_t* out, cudaStream_t s) {
  if (n < 1 || !(inv_t > 0.0f) || !(u >= 0.0 && u < 1.0)) return cudaErrorInvalidValue;
  draw_kernel<<<kBlocks, kThreads, 0, s>>>(x, n, inv_t, u, static_cast<Scratch*>(scratch), out);
  return cudaGetLastError();
}

}  // namespace kvtax::cuda
