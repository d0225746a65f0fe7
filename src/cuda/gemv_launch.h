#pragma once
// Boundary between gemv.cpp (checks, errors) and gemv.cu (kernels).
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "ggml/types.h"

namespace kvtax::cuda::detail {

constexpr int kGemvPad = 64;  // bytes after the weights: the Q8_0/Q4_0 loaders read whole aligned words

struct GemvArgs {
  GgmlType type;
  const uint8_t* w;
  size_t row_bytes;
  int rows, cols;
  const float* x;
  int8_t* xq;   // [cols] int8 codes of x
  float* xd;    // [cols/32] scales
  float* xs;    // [cols/32] scale * sum of codes
  float* y;
};

inline size_t gemv_scratch_layout(int64_t cols, size_t* xd_off, size_t* xs_off) {
  *xd_off = (size_t(cols) + 255) / 256 * 256;
  *xs_off = *xd_off + size_t(cols / 32) * 4;
  return *xs_off + size_t(cols / 32) * 4;
}

cudaError_t launch_gemv(const GemvArgs& a, cudaStream_t stream);
void set_gemv_rows_per_warp(int r);

}  // namespace kvtax::cuda::detail
