// Kernels of prefill_ops.h: 8 values per thread, 16-byte loads and stores.
#include <cuda_runtime.h>

#include "cuda/half_pack.cuh"
#include "cuda/prefill_ops.h"
#include "cuda/quantize_x.cuh"

namespace kvtax::cuda::detail {
namespace {

constexpr int kThreads = 256;

template <bool kBf16>
__global__ void __launch_bounds__(kThreads) silu_mul_half_kernel(const uint4* gu, int64_t rows, int ff8, uint4* out) {
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= rows * ff8) return;
  const int64_t r = i / ff8, j = i % ff8;
  const uint4 g = gu[r * 2 * ff8 + j], u = gu[r * 2 * ff8 + ff8 + j];
  const uint32_t gs[4] = {g.x, g.y, g.z, g.w}, us[4] = {u.x, u.y, u.z, u.w};
  uint32_t o[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 a = unpack_pair<kBf16>(gs[k]), b = unpack_pair<kBf16>(us[k]);
    o[k] = pack_pair<kBf16>(silu_mul(a.x, b.x), silu_mul(a.y, b.y));
  }
  out[i] = make_uint4(o[0], o[1], o[2], o[3]);
}

}  // namespace

cudaError_t silu_mul_half(const void* gu, int64_t rows, int ff, bool bf16, void* out, cudaStream_t s) {
  if (rows <= 0) return cudaSuccess;
  if (ff % 8 != 0 || ((reinterpret_cast<uintptr_t>(gu) | reinterpret_cast<uintptr_t>(out)) % 16))
    return cudaErrorInvalidValue;
  const int ff8 = ff / 8;
  const unsigned grid = unsigned((rows * ff8 + kThreads - 1) / kThreads);
  if (bf16)
    silu_mul_half_kernel<true><<<grid, kThreads, 0, s>>>(static_cast<const uint4*>(gu), rows, ff8, static_cast<uint4*>(out));
  else
    silu_mul_half_kernel<false><<<grid, kThreads, 0, s>>>(static_cast<const uint4*>(gu), rows, ff8, static_cast<uint4*>(out));
  return cudaGetLastError();
}

}  // namespace kvtax::cuda::detail
