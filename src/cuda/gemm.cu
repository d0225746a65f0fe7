// Elementwise helpers of the prefill GEMM: activations rounded to 16 bits, quantized weights expanded to bf16.
#include <cuda_runtime.h>

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

// One thread per 8 consecutive values (cols is a multiple of 32): one 16-byte store.
template <GgmlType T>
__global__ void dequant_kernel(const uint8_t* w, size_t row_bytes, int64_t row0, int64_t rows, int cols,
                               uint4* out) {
  const int64_t u = int64_t(blockIdx.x) * kThreads + threadIdx.x, per_row = cols / 8;
  if (u >= rows * per_row) return;
  const int64_t r = u / per_row;
  const int c0 = int(u % per_row) * 8;
  const uint8_t* row = w + size_t(row0 + r) * row_bytes;
  float v[8];
  if constexpr (T == GgmlType::Q4_K) {
    // The 8 values share one sub-block of 32: its scale and min are decoded once, the nibbles come in two
    // 4-byte loads (the same arithmetic as dequant_at).
    const BlockQ4_K* b = reinterpret_cast<const BlockQ4_K*>(row) + c0 / kQK_K;
    const int i = c0 % kQK_K, sub = i / 32, l = i % 32;
    uint8_t sc, m;
    k_scale_min_at(sub, [&](int k) { return b->scales[k]; }, sc, m);
    const float ds = h2f(b->d) * float(sc), dm = h2f(b->dmin) * float(m);
    const uint32_t* q = reinterpret_cast<const uint32_t*>(b->qs + 32 * (sub / 2) + l);
    const uint32_t q2[2] = {q[0], q[1]};
    const int sh = sub % 2 ? 4 : 0;
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = ds * float((q2[k / 4] >> (8 * (k % 4) + sh)) & 15) - dm;
  } else {
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = dequant_at<T>(row, c0 + k);
  }
  out[u] = pack8<true>(v);
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
    case GgmlType::Q4_K: dequant_kernel<GgmlType::Q4_K><<<grid, kThreads, 0, s>>>(w, row_bytes, row0, rows, cols, o); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace kvtax::cuda::detail
