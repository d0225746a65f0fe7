// Per-token kernels. One block per row for the reductions; one thread per value elsewhere. The rotary
// angles follow the CPU's float steps (theta multiplied pair by pair), so only sinf/cosf differ (<= 2 ulp).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "cuda/ops.h"
#include "cuda/dequant.cuh"
#include "cuda/half_pack.cuh"
#include "cuda/pdl.cuh"
#include "cuda/quantize_x.cuh"
#include "cuda/rope.cuh"
#include "ggml/blocks.h"

namespace kvtax::cuda::ops {

namespace {

constexpr int kThreads = 256;

template <GgmlType T>
__global__ void embed_kernel(const uint8_t* table, size_t row_bytes, const int32_t* ids, int d, float* out) {
  const int t = blockIdx.y;
  const uint8_t* row = table + size_t(ids[t]) * row_bytes;
  for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < d; c += gridDim.x * blockDim.x)
    out[size_t(t) * d + c] = dequant_at<T>(row, c);
}

template <GgmlType T>
__global__ void embed_norm_part_kernel(const uint8_t* table, size_t row_bytes, const int32_t* id, int d, float* x,
                                       const float* w, float* xw, double* ss_part, detail::QuantX q) {
  detail::pdl_trigger();  // the first GEMV's blocks may launch and stream their first weights meanwhile
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= d) return;  // whole warps: d is a multiple of 32
  const float v = dequant_at<T>(table + size_t(*id) * row_bytes, c);
  x[c] = v;
  detail::norm_part_block32(v, w[c], c & ~31, xw, q.xq, q.xd, q.xs, ss_part);
}

// The block's sum of the threads' partials ss -> 1 / sqrt(mean + eps) for every thread: warp sums by shuffles, then
// every warp sums the (at most 32) warp partials with shuffles, not a serial loop of dependent adds, and takes lane
// 0's total, so every thread scales by the same mean. part: one slot per warp.
__device__ __forceinline__ float block_rms_scale(double ss, int n, float eps, double* part) {
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x / 32] = ss;
  __syncthreads();
  double tot = (threadIdx.x & 31) < blockDim.x / 32 ? part[threadIdx.x & 31] : 0.0;
  for (int o = 16; o > 0; o >>= 1) tot += __shfl_xor_sync(0xffffffffu, tot, o);
  tot = __shfl_sync(0xffffffffu, tot, 0);
  return detail::rms_factor(tot, n, eps);
}

// llama.cpp's rounding steps, as the CPU: float squares summed in double, a float mean, 1/sqrtf in float.
// With y, x += y first (the residual add before the norm). Each thread keeps its first K values in registers
// and issues all their loads before the first use: one row of 4096 on one block was bound by the chain of
// dependent loads when it walked the row twice (14 us on the H200, 2026-11-30). With q, the int8 codes of
// out for the next quantized GEMV too (warp w holds 32 consecutive values, a whole block of the codes).
template <int K>
__global__ void __launch_bounds__(1024) rmsnorm_kernel(float* x, const float* y, const float* w, float* out, int n,
                                                       float eps, detail::QuantX q) {
  __shared__ double part[32];
  detail::pdl_wait();
  detail::pdl_trigger();  // the next GEMV's blocks may start streaming their weights (pdl.cuh)
  const int T = blockDim.x;
  float* xr = x + size_t(blockIdx.x) * n;  // y: one row only (a single-row launch; many rows take the rows kernel)
  float v[K], wv[K];
  double ss = 0;
#pragma unroll
  for (int k = 0; k < K; ++k) {  // the weights too: their loads overlap the reduction
    const int i = threadIdx.x + k * T;
    v[k] = i < n ? xr[i] : 0.0f;
    wv[k] = i < n ? w[i] : 0.0f;
    if (y && i < n) v[k] += y[i];
  }
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int i = threadIdx.x + k * T;
    if (i < n) {
      if (y) xr[i] = v[k];
      ss += double(__fmul_rn(v[k], v[k]));
    }
  }
  for (int i = threadIdx.x + K * T; i < n; i += T) {  // rows wider than K * T
    float u = xr[i];
    if (y) xr[i] = u = u + y[i];
    ss += double(__fmul_rn(u, u));
  }
  const float scale = block_rms_scale(ss, n, eps, part);
  float* orow = out + size_t(blockIdx.x) * n;
  auto emit = [&](int i, float u, float wi) {  // whole warps: n and T are multiples of 32 where q is set
    const float o = __fmul_rn(__fmul_rn(u, scale), wi);
    orow[i] = o;
    if (q.xq) detail::quantize_x_block32(o, i & ~31, q.xq, q.xd, q.xs);
  };
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int i = threadIdx.x + k * T;
    if (i < n) emit(i, v[k], wv[k]);
  }
  for (int i = threadIdx.x + K * T; i < n; i += T) emit(i, xr[i], w[i]);
}

// With h.p, the output goes there as 16-bit values (bf16 or f16, rounded to nearest even) instead of to out.
struct HalfOut {
  uint16_t* p = nullptr;
  bool bf16 = false;
};

// As rmsnorm_kernel for many rows (the prefill; n a multiple of 4, no int8 codes): 16-byte loads and stores of 4
// consecutive values, up to K4 of them per thread in registers. One thread's squares are summed in the order of its
// values, so the sum's rounding differs from rmsnorm_kernel's (in double: far below the float mean's).
template <int K4>
__global__ void __launch_bounds__(256) rmsnorm_rows_kernel(float* x, const float* y, const float* w, float* out,
                                                           int n, float eps, HalfOut h) {
  __shared__ double part[8];
  detail::pdl_wait();
  detail::pdl_trigger();
  const int T = blockDim.x, n4 = n / 4;
  float4* xr = reinterpret_cast<float4*>(x + size_t(blockIdx.x) * n);
  const float4* yr = y ? reinterpret_cast<const float4*>(y + size_t(blockIdx.x) * n) : nullptr;
  const float4* w4 = reinterpret_cast<const float4*>(w);
  auto add = [](float4 a, float4 b) { return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w); };
  auto squares = [](float4 a) {
    return double(__fmul_rn(a.x, a.x)) + double(__fmul_rn(a.y, a.y)) + double(__fmul_rn(a.z, a.z)) +
           double(__fmul_rn(a.w, a.w));
  };
  float4 v[K4], wv[K4];
  double ss = 0;
#pragma unroll
  for (int k = 0; k < K4; ++k) {
    const int i = threadIdx.x + k * T;
    v[k] = i < n4 ? (yr ? add(xr[i], yr[i]) : xr[i]) : make_float4(0, 0, 0, 0);
    wv[k] = i < n4 ? w4[i] : make_float4(0, 0, 0, 0);
  }
#pragma unroll
  for (int k = 0; k < K4; ++k) {
    const int i = threadIdx.x + k * T;
    if (i < n4) {
      if (yr) xr[i] = v[k];
      ss += squares(v[k]);
    }
  }
  for (int i = threadIdx.x + K4 * T; i < n4; i += T) {  // rows wider than K4 * T * 4
    const float4 u = yr ? add(xr[i], yr[i]) : xr[i];
    if (yr) xr[i] = u;
    ss += squares(u);
  }
  const float scale = block_rms_scale(ss, n, eps, part);
  auto emit = [&](int i, float4 u, float4 wi) {
    const float4 o = make_float4(__fmul_rn(__fmul_rn(u.x, scale), wi.x), __fmul_rn(__fmul_rn(u.y, scale), wi.y),
                                 __fmul_rn(__fmul_rn(u.z, scale), wi.z), __fmul_rn(__fmul_rn(u.w, scale), wi.w));
    if (h.p) {
      const uint2 p = h.bf16 ? make_uint2(detail::pack_pair<true>(o.x, o.y), detail::pack_pair<true>(o.z, o.w))
                             : make_uint2(detail::pack_pair<false>(o.x, o.y), detail::pack_pair<false>(o.z, o.w));
      reinterpret_cast<uint2*>(h.p + size_t(blockIdx.x) * n)[i] = p;
    } else {
      reinterpret_cast<float4*>(out + size_t(blockIdx.x) * n)[i] = o;
    }
  };
#pragma unroll
  for (int k = 0; k < K4; ++k) {
    const int i = threadIdx.x + k * T;
    if (i < n4) emit(i, v[k], wv[k]);
  }
  for (int i = threadIdx.x + K4 * T; i < n4; i += T) emit(i, xr[i], w4[i]);
}

// A single row (the decode step) spreads over up to 1024 threads of 4 values each, for latency. Many rows (the
// prefill) take up to 256 threads of 4 x 4 values each: 1024-thread blocks, two per SM, left the loads of one
// waiting on the other's reduction, and 4-byte accesses cost 4x the instructions (2.3 TB/s on llama3-8b rows,
// H200, 2026-12-01).
constexpr int kNormK = 4, kRowsK4 = 4;

cudaError_t launch_norm(int rows, int n, cudaStream_t s, float* x, const float* y, const float* w, float* out,
                        float eps, const detail::QuantX& q, HalfOut h) {
  if (rows == 1 || n % 4 != 0 || q.xq) {
    if (h.p || (y && rows > 1)) return cudaErrorInvalidValue;  // the rows kernel only
    const unsigned threads = unsigned(std::clamp((n / kNormK + 31) / 32 * 32, 32, 1024));
    return detail::launch_pdl(rmsnorm_kernel<kNormK>, rows, threads, s, x, y, w, out, n, eps, q);
  }
  const unsigned threads = unsigned(std::clamp((n / (4 * kRowsK4) + 31) / 32 * 32, 32, 256));
  return detail::launch_pdl(rmsnorm_rows_kernel<kRowsK4>, rows, threads, s, x, y, w, out, n, eps, h);
}

__global__ void add_kernel(float* x, const float* y, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] += y[i];
}

__global__ void add_rows_kernel(float* x, const float* b, int64_t total, int n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < total) x[i] += b[i % n];
}

__global__ void silu_mul_kernel(float* g, const float* u, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  g[i] = detail::silu_mul(g[i], u[i]);
}

// One token per block: each rotary pair's cos and sin are computed once and applied to every head of q and k.
// One block per (token, head), as rope_kernel does for a single token, recomputed them for each of the 40 heads
// of a llama3-8b token: 0.8 TB/s over q and k, 4x the time of the memory traffic (H200, 2026-12-01).
constexpr int kRopeRowThreads = 256;
__global__ void __launch_bounds__(kRopeRowThreads) rope_rows_kernel(float* q, int n_q, float* k, int n_k,
                                                                    int head_dim, int pos0, RopeParams p,
                                                                    float2* cs_out) {
  __shared__ float2 cs[512];
  const int t = blockIdx.x, half = p.dim / 2;
  for (int i = threadIdx.x; i < half; i += kRopeRowThreads) {
    cs[i] = detail::rope_cos_sin(i, pos0 + t, p);
    if (cs_out) cs_out[size_t(t) * half + i] = cs[i];
  }
  __syncthreads();
  for (int j = threadIdx.x; j < (n_q + n_k) * half; j += kRopeRowThreads) {
    const int h = j / half, i = j % half;
    float* v = h < n_q ? q + (size_t(t) * n_q + h) * head_dim : k + (size_t(t) * n_k + (h - n_q)) * head_dim;
    detail::rope_rotate(v, i, cs[i], p);
  }
}

// One token (the decode step), one block per head: grid (1, n_heads + n_heads2), heads past n_heads are those
// of x2 (k next to q in one launch); block = dim/2 pairs (<= 512). The prefill's many tokens take rope_rows_kernel.
__global__ void rope_kernel(float* x, int n_heads, float* x2, int head_dim, int pos0, const int* pos_dev, RopeParams p) {
  detail::pdl_wait();
  detail::pdl_trigger();  // the KV encode after it may launch
  const int t = blockIdx.x, i = threadIdx.x;
  int h = blockIdx.y;
  if (i >= p.dim / 2) return;
  if (h >= n_heads) {  // x2 has one token
    h -= n_heads;
    x = x2;
    n_heads = gridDim.y - n_heads;
  }
  detail::rope_pair(x + (size_t(t) * n_heads + h) * head_dim, i, pos_dev ? pos_dev[t] : pos0 + t, p);
}

__device__ __forceinline__ uint64_t mix(uint64_t z) {  // splitmix64's finaliser
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__global__ void fill_normal_kernel(float* x, int64_t n, uint64_t seed) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const uint64_t r = mix(seed * 0x9e3779b97f4a7c15ull + uint64_t(i));
  const float u1 = (float(uint32_t(r >> 40)) + 0.5f) * (1.0f / 16777216.0f);  // (0, 1)
  const float u2 = float(uint32_t(r & 0xffffff)) * (1.0f / 16777216.0f);
  x[i] = sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);  // Box-Muller
}

unsigned blocks_for(int64_t n) { return unsigned((n + kThreads - 1) / kThreads); }

}  // namespace

namespace {

// go(std::integral_constant<GgmlType, T>{}) for the embedding table types the kernels read (dequant_at's), the one list
// behind embed_supported, embed and embed_norm_part.
template <class Go>
cudaError_t with_embed_type(GgmlType t, const Go& go) {
  using T = GgmlType;
  switch (t) {
    case T::F32: return go(std::integral_constant<T, T::F32>{});
    case T::F16: return go(std::integral_constant<T, T::F16>{});
    case T::BF16: return go(std::integral_constant<T, T::BF16>{});
    case T::Q8_0: return go(std::integral_constant<T, T::Q8_0>{});
    case T::Q4_0: return go(std::integral_constant<T, T::Q4_0>{});
    case T::Q4_K: return go(std::integral_constant<T, T::Q4_K>{});
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

bool embed_supported(GgmlType t) {
  return with_embed_type(t, [](auto) { return cudaSuccess; }) == cudaSuccess;
}

cudaError_t embed(GgmlType t, const uint8_t* table, size_t row_bytes, const int32_t* ids, int n, int d, float* out,
                  cudaStream_t s) {
  const dim3 grid((d + kThreads - 1) / kThreads, n);
  return with_embed_type(t, [&](auto type) {
    embed_kernel<decltype(type)::value><<<grid, kThreads, 0, s>>>(table, row_bytes, ids, d, out);
    return cudaGetLastError();
  });
}

cudaError_t embed_norm_part(GgmlType t, const uint8_t* table, size_t row_bytes, const int32_t* id, int d, float* x,
                            const float* w, float* xw, double* ss_part, const detail::QuantX& q, cudaStream_t s) {
  if (d % 32 != 0) return cudaErrorInvalidValue;
  return with_embed_type(t, [&](auto type) {
    embed_norm_part_kernel<decltype(type)::value><<<blocks_for(d), kThreads, 0, s>>>(table, row_bytes, id, d, x, w, xw,
                                                                                     ss_part, q);
    return cudaGetLastError();
  });
}

cudaError_t rmsnorm(const float* x, const float* w, float* out, int rows, int n, float eps, cudaStream_t s) {
  return launch_norm(rows, n, s, const_cast<float*>(x), nullptr, w, out, eps, {}, {});  // x only read
}

cudaError_t add_rmsnorm_half(float* x, const float* y, const float* w, void* out, int rows, int n, bool bf16,
                             float eps, cudaStream_t s) {
  return launch_norm(rows, n, s, x, y, w, nullptr, eps, {}, HalfOut{static_cast<uint16_t*>(out), bf16});
}

cudaError_t add_rmsnorm(float* x, const float* y, const float* w, float* out, int n, float eps, cudaStream_t s,
                        const detail::QuantX& q) {
  if (q.xq && n % 32 != 0) return cudaErrorInvalidValue;
  return launch_norm(1, n, s, x, y, w, out, eps, q, {});
}

cudaError_t add(float* x, const float* y, int64_t n, cudaStream_t s) {
  add_kernel<<<blocks_for(n), kThreads, 0, s>>>(x, y, n);
  return cudaGetLastError();
}

cudaError_t add_rows(float* x, const float* b, int rows, int n, cudaStream_t s) {
  add_rows_kernel<<<blocks_for(int64_t(rows) * n), kThreads, 0, s>>>(x, b, int64_t(rows) * n, n);
  return cudaGetLastError();
}

cudaError_t silu_mul(float* g, const float* u, int64_t n, cudaStream_t s) {
  silu_mul_kernel<<<blocks_for(n), kThreads, 0, s>>>(g, u, n);
  return cudaGetLastError();
}

cudaError_t rope_rows(float* q, int n_q, float* k, int n_k, int n_tok, int head_dim, int pos0, const RopeParams& p,
                      cudaStream_t s, float2* cs_out) {
  if (p.dim < 2 || p.dim > head_dim || p.dim > 1024 || (!q && n_q > 0) || (!k && n_k > 0))
    return cudaErrorInvalidValue;
  if (n_tok <= 0) return cudaSuccess;
  rope_rows_kernel<<<n_tok, kRopeRowThreads, 0, s>>>(q, n_q, k, n_k, head_dim, pos0, p, cs_out);
  return cudaGetLastError();
}

cudaError_t rope_qk(float* q, int n_q, float* k, int n_k, int head_dim, const int* pos_dev, const RopeParams& p,
                    cudaStream_t s) {
  if (p.dim < 2 || p.dim > head_dim || p.dim > 1024) return cudaErrorInvalidValue;
  return detail::launch_pdl(rope_kernel, dim3(1, n_q + n_k), (p.dim / 2 + 31) / 32 * 32, s, q, n_q, k, head_dim, 0,
                            pos_dev, p);
}

cudaError_t fill_normal(float* x, int64_t n, uint64_t seed, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  fill_normal_kernel<<<blocks_for(n), kThreads, 0, s>>>(x, n, seed);
  return cudaGetLastError();
}

}  // namespace kvtax::cuda::ops
