// Elementwise helpers of the prefill GEMM: activations rounded to 16 bits, quantized weights expanded to bf16.
#include <cuda_runtime.h>

#include <cstddef>

#include "cuda/dequant.cuh"
#include "cuda/gemm.h"
#include "cuda/half_pack.cuh"

namespace kvtax::cuda::detail {
namespace {

constexpr int kThreads = 256;

__global__ void to_half_kernel(const float* x, int64_t n, bool bf16, uint16_t* out) {
  const int64_t i = (int64_t(blockIdx.x) * kThreads + threadIdx.x) * 2;
  if (i >= n) return;
  const float a = x[i], b = i + 1 < n ? x[i + 1] : 0.0f;
  const uint32_t p = bf16 ? pack_pair<true>(a, b) : pack_pair<false>(a, b);
  out[i] = uint16_t(p);
  if (i + 1 < n) out[i + 1] = uint16_t(p >> 16);
}

// 8 values per thread: two 16-byte loads, one 16-byte store (n % 8 == 0, both pointers 16-byte aligned).
template <bool kBf16>
__global__ void to_half8_kernel(const float4* x, int64_t n8, uint4* out) {
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= n8) return;
  const float4 a = x[2 * i], b = x[2 * i + 1];
  const float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
  out[i] = pack8<kBf16>(v);
}

// Q8_0 and Q4_0: one thread per 8 consecutive values (cols is a multiple of 32), one 16-byte store.
template <GgmlType T>
__global__ void dequant_kernel(const uint8_t* w, size_t row_bytes, int64_t row0, int64_t rows, int cols,
                               uint4* out) {
  const int64_t u = int64_t(blockIdx.x) * kThreads + threadIdx.x, per_row = cols / 8;
  if (u >= rows * per_row) return;
  const int64_t r = u / per_row;
  const int c0 = int(u % per_row) * 8;
  const uint8_t* row = w + size_t(row0 + r) * row_bytes;
  float v[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) v[k] = dequant_at<T>(row, c0 + k);
  out[u] = pack8<true>(v);
}

// Q4_K: rows [row0, row0 + rows) are a run of whole 144-byte blocks, and their bf16 values a run of 256 per block,
// so the kernel walks blocks, not rows. A warp takes 4 consecutive blocks, each lane 8 values of each: the
// block's 16-byte head (d, dmin, the packed scales; one address for the warp), 8 bytes of nibbles, one 16-byte
// store (a warp's stores fill 512 consecutive bytes). The loads of all its blocks are issued before any store.
// 15.3 us for 4096 x 4096 (ncu), where a thread per 8 values of a row with a 64-bit division each took 19.3 us.
constexpr int kQ4kBlocksPerWarp = 4;

__global__ void dequant_q4k_kernel(const uint8_t* w, int64_t blocks, uint4* out) {
  constexpr int kB = kQ4kBlocksPerWarp;
  const int lane = threadIdx.x % 32, sub = lane / 4, l = 8 * (lane % 4);
  const int64_t g0 = (int64_t(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32) * kB;
  uint4 head[kB];
  uint2 q[kB];
#pragma unroll
  for (int i = 0; i < kB; ++i) {
    if (g0 + i >= blocks) break;
    const uint8_t* b = w + size_t(g0 + i) * sizeof(BlockQ4_K);
    head[i] = *reinterpret_cast<const uint4*>(b);
    q[i] = *reinterpret_cast<const uint2*>(b + offsetof(BlockQ4_K, qs) + 32 * (sub / 2) + l);
  }
#pragma unroll
  for (int i = 0; i < kB; ++i) {
    if (g0 + i >= blocks) break;
    const uint32_t sw[3] = {head[i].y, head[i].z, head[i].w};  // scales[0..11]
    uint8_t sc, m;
    k_scale_min_at(sub, [&](int k) { return uint8_t(sw[k / 4] >> (8 * (k % 4))); }, sc, m);
    const float ds = h2f(uint16_t(head[i].x)) * float(sc), dm = h2f(uint16_t(head[i].x >> 16)) * float(m);
    const int sh = 4 * (sub % 2);  // odd sub-blocks are the high nibbles
    float v[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = ds * float(((k < 4 ? q[i].x : q[i].y) >> (8 * (k % 4) + sh)) & 15) - dm;
    out[size_t(g0 + i) * (kQK_K / 8) + lane] = pack8<true>(v);
  }
}

}  // namespace

cudaError_t to_half(const float* x, int64_t n, bool bf16, void* out, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  if (n % 8 == 0 && (reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(out)) % 16 == 0) {
    const int64_t n8 = n / 8;
    const unsigned grid = unsigned((n8 + kThreads - 1) / kThreads);
    if (bf16)
      to_half8_kernel<true><<<grid, kThreads, 0, s>>>(reinterpret_cast<const float4*>(x), n8, static_cast<uint4*>(out));
    else
      to_half8_kernel<false><<<grid, kThreads, 0, s>>>(reinterpret_cast<const float4*>(x), n8, static_cast<uint4*>(out));
    return cudaGetLastError();
  }
  const int64_t pairs = (n + 1) / 2;
  to_half_kernel<<<unsigned((pairs + kThreads - 1) / kThreads), kThreads, 0, s>>>(x, n, bf16,
                                                                                    static_cast<uint16_t*>(out));
  return cudaGetLastError();
}

cudaError_t dequant_rows_bf16(GgmlType t, const uint8_t* w, size_t row_bytes, int64_t row0, int64_t rows, int cols,
                              void* out, cudaStream_t s) {
  if (cols % 32 != 0 || rows <= 0) return cudaErrorInvalidValue;
  const int64_t units = rows * (cols / 8);
  const unsigned grid = unsigned((units + kThreads - 1) / kThreads);
  uint4* o = static_cast<uint4*>(out);
  switch (t) {
    case GgmlType::Q8_0: dequant_kernel<GgmlType::Q8_0><<<grid, kThreads, 0, s>>>(w, row_bytes, row0, rows, cols, o); break;
    case GgmlType::Q4_0: dequant_kernel<GgmlType::Q4_0><<<grid, kThreads, 0, s>>>(w, row_bytes, row0, rows, cols, o); break;
    case GgmlType::Q4_K: {
      if ((reinterpret_cast<uintptr_t>(w) | row_bytes) % 16 != 0) return cudaErrorMisalignedAddress;
      const int64_t blocks = rows * (cols / kQK_K), per_cta = (kThreads / 32) * kQ4kBlocksPerWarp;
      dequant_q4k_kernel<<<unsigned((blocks + per_cta - 1) / per_cta), kThreads, 0, s>>>(w + size_t(row0) * row_bytes,
                                                                                       blocks, o);
      break;
    }
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace kvtax::cuda::detail
