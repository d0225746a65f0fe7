// Batch invariance of the quantized matmul: a token's output row must be bit-identical whether the
// token is multiplied alone (decode) or inside a batch of any size (prefill chunks, `kvtax serve`
// stepping several requests in one call). Otherwise a batched request can flip a near-tied greedy
// token and stop giving the tokens it gives alone.
//
// Float weights (F32/F16/BF16) are NOT batch-invariant and are not tested here: from 8 tokens they go
// through the packed GEMM, whose per-token summation order differs from the decode kernel's.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/cpu.h"
#include "ggml/quants.h"
#include "ops/cpu/matmul.h"
#include "random_values.h"

using namespace kvtax;

namespace {

const int64_t kBatchSizes[] = {1, 2, 3, 4, 5, 8, 13, 32, 100};
constexpr int64_t kMaxTokens = 100;

std::vector<uint8_t> quantized_matrix(GgmlType t, int64_t rows, int64_t cols, uint32_t seed) {
  const size_t stride = ggml_row_bytes(t, uint64_t(cols));
  std::vector<uint8_t> data(stride * size_t(rows));
  const auto src = random_normal(rows * cols, seed);
  for (int64_t r = 0; r < rows; ++r) quantize_row(t, src.data() + r * cols, data.data() + size_t(r) * stride, cols);
  return data;
}

// For every batch size n, each of the first n tokens' rows equals that token computed alone, bit for bit.
void check_invariant(SimdLevel level, GgmlType type, int64_t rows, int64_t cols, ThreadPool& pool) {
  const auto data = quantized_matrix(type, rows, cols, uint32_t(cols + rows));
  const Weight w{type, data.data(), rows, cols};
  // Tokens of different magnitudes so their activation scales differ.
  auto x = random_normal(kMaxTokens * cols, uint32_t(cols) * 7 + 1);
  for (int64_t t = 0; t < kMaxTokens; ++t)
    for (int64_t c = 0; c < cols; ++c) x[size_t(t * cols + c)] *= 0.25f + 0.1f * float(t % 13);

  std::vector<float> alone(size_t(kMaxTokens * rows));
  for (int64_t t = 0; t < kMaxTokens; ++t) matmul_at(level, w, x.data() + t * cols, 1, alone.data() + t * rows, pool);
  int bad = 0;
  for (int64_t n : kBatchSizes) {
    std::vector<float> y(size_t(n * rows), NAN);
    matmul_at(level, w, x.data(), n, y.data(), pool);
    for (int64_t t = 0; t < n; ++t)
      for (int64_t r = 0; r < rows; ++r) {
        const float got = y[size_t(t * rows + r)], want = alone[size_t(t * rows + r)];
        if (std::memcmp(&got, &want, sizeof got) != 0 && bad++ < 5)
          ADD_FAILURE() << simd_name(level) << " " << ggml_type_name(type) << " " << rows << "x" << cols
                        << " batch " << n << " token " << t << " row " << r << ": " << got << " vs alone " << want;
      }
  }
  EXPECT_EQ(bad, 0) << simd_name(level) << " " << ggml_type_name(type) << " " << rows << "x" << cols;
}

void check_type(GgmlType type) {
  ThreadPool pool(2);
  // 67 rows: row tiles with a remainder; 4096 and 14336 columns: several column panels of the
  // prefill blocking (and the 14336-wide down projection of llama3-8b).
  check_invariant(simd_level(), type, 67, 4096, pool);
  check_invariant(simd_level(), type, 64, 14336, pool);
  // The portable kernels must hold the same property (one width: they are slow).
  if (simd_level() != SimdLevel::scalar) check_invariant(SimdLevel::scalar, type, 64, 4096, pool);
}

}  // namespace

TEST(MatmulBatchInvariance, Q8_0) { check_type(GgmlType::Q8_0); }
TEST(MatmulBatchInvariance, Q4_0) { check_type(GgmlType::Q4_0); }
TEST(MatmulBatchInvariance, Q4_K) { check_type(GgmlType::Q4_K); }
TEST(MatmulBatchInvariance, Q5_K) { check_type(GgmlType::Q5_K); }
TEST(MatmulBatchInvariance, Q6_K) { check_type(GgmlType::Q6_K); }
