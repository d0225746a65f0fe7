// Elementwise helpers of the prefill GEMM: activations rounded to 16 bits, quantized weights expanded to bf16.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda/dequant.cuh"
#include "cuda/gemm.h"

namespace kvtax::cuda::detail {
namespace {

constexpr int kThreads = 256;

__global__ void to_half_kernel(const float* x, int64_t n, bool bf16, uint16_t* out) {
  const int64_t i = (int64_t(blockIdx.x) * kThreads + threadIdx.x) * 2;
  if (i >= n) return;
  const float a = x[i], b = i + 1 < n ? x[i + 1] : 0.0f;
  if (bf16) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    out[i] = __bfloat16_as_ushort(h.x);
    if (i + 1 < n) out[i + 1] = __bfloat16_as_ushort(h.y);
  } else {
    const __half2 h = __floats2half2_rn(a, b);
    out[i] = __half_as_ushort(h.x);
    if (i + 1 < n) out[i + 1] = __half_as_ushort(h.y);
  }
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
  uint32_t p[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(dequant_at<T>(row, c0 + 2 * k), dequant_at<T>(row, c0 + 2 * k + 1));
    p[k] = uint32_t(__bfloat16_as_ushort(h.x)) | (uint32_t(__bfloat16_as_ushort(h.y)) << 16);
  }
  out[u] = make_uint4(p[0], p[1], p[2], p[3]);
}

}  // namespace

cudaError_t to_half(const float* x, int64_t n, bool bf16, void* out, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
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
