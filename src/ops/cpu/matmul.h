#pragma once
// Weight x activation products for the forward pass. Quantized weights multiply activations that are
// quantized once per call (Q8_0 for Q8_0/Q4_0 weights, Q8_K for K-quants) with integer dot products;
// f32/f16/bf16 weights use float FMA. Decode (n_tokens == 1) streams each weight row once; prefill
// reuses every weight block for several tokens from registers.
// Quantized weights are batch-invariant: a token's output row is bit-identical whatever n_tokens and
// thread count (tests/matmul_batch_invariance_test.cpp). Float weights are not: from 8 tokens they take
// the packed GEMM, which sums in another order than the decode kernel.
#include <cstdint>

#include "core/cpu.h"
#include "core/thread_pool.h"
#include "ggml/types.h"

namespace kvtax {

// rows x cols, row-major: cols = ne[0] (contiguous), rows = ne[1]; row bytes = ggml_row_bytes(type, cols).
struct Weight {
  GgmlType type;
  const uint8_t* data;
  int64_t rows;
  int64_t cols;
};

// y[t*rows + r] = sum_c W[r][c] * x[t*cols + c] for t < n_tokens.
void matmul(const Weight& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool);
// Same, at an explicit SIMD level (<= simd_level(); for tests and benchmarks).
void matmul_at(SimdLevel level, const Weight& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool);
// Dequantizes each row and accumulates in double against the unquantized x.
void matmul_reference(const Weight& w, const float* x, int64_t n_tokens, float* y);
// F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K.
bool matmul_supported(GgmlType t);
// One row as f32 (token embedding lookup); any type dequantize_row supports.
void weight_row(const Weight& w, int64_t row, float* out);

}  // namespace kvtax
