#pragma once
// Prefill products for f32/f16/bf16 weights as a packed GEMM. Each block of weight rows is converted to
// f32 and transposed once per k-chunk into panels of 16 rows; a 6-token x 16-row register tile then
// needs 2 panel loads and 6 broadcast activations per 12 FMAs. (The dot-product tiles of dot_x86.inc
// convert every weight vector again for each group of 4 tokens and load 6 vectors per 8 FMAs.)
#include <cstddef>
#include <cstdint>

#include "ggml/types.h"

namespace kvtax::mm {

// Whether gemm_float_avx2 handles this product: a float weight type, rows a multiple of 16, columns a
// multiple of 8, and enough tokens to amortise the packing.
bool gemm_float_applies(GgmlType t, int64_t rows, int64_t cols, int64_t n_tokens);

// y[t*y_stride + r] = sum_c W[r][c] * x[t*cols + c] for rows [r0, r1) (multiples of 16) and t < n_tokens.
void gemm_float_avx2(GgmlType t, const uint8_t* w, size_t w_stride, int64_t r0, int64_t r1, int64_t cols,
                     const float* x, int64_t n_tokens, float* y, int64_t y_stride);

}  // namespace kvtax::mm
