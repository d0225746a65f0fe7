#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/cpu.h"
#include "core/error.h"
#include "ggml/quants.h"
#include "ops/cpu/matmul.h"
#include "random_values.h"

using namespace kvtax;

namespace {


std::vector<SimdLevel> levels() {
  std::vector<SimdLevel> l{SimdLevel::scalar};
  if (simd_level() >= SimdLevel::avx2) l.push_back(SimdLevel::avx2);
  if (simd_level() >= SimdLevel::avx512) l.push_back(SimdLevel::avx512);
  return l;
}

struct Matrix {
  GgmlType type;
  int64_t rows, cols;
  std::vector<uint8_t> data;
  std::vector<double> row_norm;  // of the dequantized rows
  Weight weight() const { return {type, data.data(), rows, cols}; }
};

Matrix make_matrix(GgmlType t, int64_t rows, int64_t cols, uint32_t seed) {
  Matrix m{t, rows, cols, std::vector<uint8_t>(ggml_row_bytes(t, uint64_t(cols)) * size_t(rows)), {}};
  const auto src = random_normal(rows * cols, seed);
  const size_t stride = ggml_row_bytes(t, uint64_t(cols));
  std::vector<float> deq(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    quantize_row(t, src.data() + r * cols, m.data.data() + size_t(r) * stride, cols);
    dequantize_row(t, m.data.data() + size_t(r) * stride, deq.data(), cols);
    double s = 0;
    for (float v : deq) s += double(v) * v;
    m.row_norm.push_back(std::sqrt(s));
  }
  return m;
}

bool quantized_activations(GgmlType t) {
  return t != GgmlType::F32 && t != GgmlType::F16 && t != GgmlType::BF16;
}

// Checks y against the double reference. Error scale: |dot| of random vectors is typically
// |w||x|/sqrt(cols). Quantizing activations to 8 bits (one scale per 32 or 256 values) adds an
// error with standard deviation ~0.007 of that scale, so k = 0.05 is ~7 sigma; float-weight paths
// only differ by f32 summation order (k = 1e-3).
void expect_close(const Matrix& m, const std::vector<float>& x, int64_t ntok, const std::vector<float>& y,
                  const std::vector<float>& ref, const char* what) {
  const double k = quantized_activations(m.type) ? 0.05 : 1e-3;
  int bad = 0;
  for (int64_t t = 0; t < ntok; ++t) {
    double xn = 0;
    for (int64_t c = 0; c < m.cols; ++c) xn += double(x[size_t(t * m.cols + c)]) * x[size_t(t * m.cols + c)];
    xn = std::sqrt(xn);
    for (int64_t r = 0; r < m.rows; ++r) {
      const size_t i = size_t(t * m.rows + r);
      const double tol = k * m.row_norm[size_t(r)] * xn / std::sqrt(double(m.cols)) + 1e-6;
      if (!(std::fabs(double(y[i]) - ref[i]) <= tol) && bad++ < 5)
        ADD_FAILURE() << what << " " << ggml_type_name(m.type) << " " << m.rows << "x" << m.cols << " ntok " << ntok
                      << " t=" << t << " r=" << r << ": got " << y[i] << " want " << ref[i] << " tol " << tol;
    }
  }
  EXPECT_EQ(bad, 0);
}

const GgmlType kTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,
                           GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

struct Shape { int64_t rows, cols, ntok; };

void check_type(GgmlType t, ThreadPool& pool) {
  std::vector<Shape> shapes = {{1, 256, 1},   {3, 256, 2},    {17, 4096, 5}, {130, 256, 64},
                               {17, 14336, 1}, {3, 14336, 2}, {130, 4096, 1}, {33, 256, 7},
                               {9, 1280, 6}};  // two column panels (1024 + 256)
  if (!quantized_activations(t) || t == GgmlType::Q8_0 || t == GgmlType::Q4_0) shapes.push_back({5, 96, 3});
  if (!quantized_activations(t)) {
    shapes.push_back({4, 101, 5});   // float tails
    shapes.push_back({6, 1100, 9});  // a panel plus a short one with a tail
    // the packed GEMM: k-chunk tails, token groups of 6 with a remainder, a second row block
    shapes.push_back({32, 264, 9});
    shapes.push_back({48, 520, 13});
    shapes.push_back({272, 256, 8});
  }
  uint32_t seed = 1;
  for (const Shape& s : shapes) {
    const Matrix m = make_matrix(t, s.rows, s.cols, seed++);
    const auto x = random_normal(s.ntok * s.cols, seed++);
    std::vector<float> ref(size_t(s.ntok * s.rows));
    matmul_reference(m.weight(), x.data(), s.ntok, ref.data());
    for (SimdLevel level : levels()) {
      std::vector<float> y(ref.size(), NAN);
      matmul_at(level, m.weight(), x.data(), s.ntok, y.data(), pool);
      for (float v : y) ASSERT_TRUE(std::isfinite(v)) << "unwritten output at " << simd_name(level);
      expect_close(m, x, s.ntok, y, ref, simd_name(level));
    }
  }
}

}  // namespace

TEST(Matmul, LevelsUnderTest) {
  std::printf("  levels: scalar%s%s (cpu: %s)\n", simd_level() >= SimdLevel::avx2 ? " avx2" : "",
              simd_level() >= SimdLevel::avx512 ? (cpu().avx512_vnni ? " avx512(vnni)" : " avx512(no vnni: avx2 kernels)") : "",
              cpu_model_name().c_str());
  if (simd_level() < SimdLevel::avx512) GTEST_SKIP() << "AVX-512 kernels not exercised: CPU or KVTAX_SIMD lacks it";
}

TEST(Matmul, F32) { ThreadPool p(2); check_type(GgmlType::F32, p); }
TEST(Matmul, F16) { ThreadPool p(2); check_type(GgmlType::F16, p); }
TEST(Matmul, BF16) { ThreadPool p(2); check_type(GgmlType::BF16, p); }
TEST(Matmul, Q8_0) { ThreadPool p(2); check_type(GgmlType::Q8_0, p); }
TEST(Matmul, Q4_0) { ThreadPool p(2); check_type(GgmlType::Q4_0, p); }
TEST(Matmul, Q4_K) { ThreadPool p(2); check_type(GgmlType::Q4_K, p); }
TEST(Matmul, Q5_K) { ThreadPool p(2); check_type(GgmlType::Q5_K, p); }
TEST(Matmul, Q6_K) { ThreadPool p(2); check_type(GgmlType::Q6_K, p); }

TEST(Matmul, ThreadCountDoesNotChangeResults) {
  ThreadPool one(1), three(3);
  for (GgmlType t : kTypes) {
    const Matrix m = make_matrix(t, 257, 512, 11);
    const auto x = random_normal(9 * 512, 12);
    std::vector<float> a(9 * 257, NAN), b(9 * 257, NAN);
    matmul(m.weight(), x.data(), 9, a.data(), one);
    matmul(m.weight(), x.data(), 9, b.data(), three);
    EXPECT_EQ(a, b) << ggml_type_name(t);
  }
}

TEST(Matmul, RejectsBadInput) {
  ThreadPool pool(1);
  const Matrix m = make_matrix(GgmlType::Q8_0, 2, 64, 1);
  std::vector<float> x(64 * 2), y(4);
  Weight bad_type{GgmlType::Q2_K, m.data.data(), 1, 256};
  EXPECT_THROW(matmul(bad_type, x.data(), 1, y.data(), pool), Error);
  Weight bad_cols{GgmlType::Q8_0, m.data.data(), 1, 48};
  EXPECT_THROW(matmul(bad_cols, x.data(), 1, y.data(), pool), Error);
  Weight null_data{GgmlType::F32, nullptr, 2, 8};
  EXPECT_THROW(matmul(null_data, x.data(), 1, y.data(), pool), Error);
  EXPECT_THROW(matmul(m.weight(), x.data(), -1, y.data(), pool), Error);
  if (simd_level() < SimdLevel::avx512) {
    EXPECT_THROW(matmul_at(SimdLevel::avx512, m.weight(), x.data(), 1, y.data(), pool), Error);
  }
  EXPECT_FALSE(matmul_supported(GgmlType::Q3_K));
  EXPECT_TRUE(matmul_supported(GgmlType::Q6_K));
}

TEST(Matmul, WeightRowMatchesDequantize) {
  const Matrix m = make_matrix(GgmlType::Q4_K, 5, 512, 3);
  std::vector<float> row(512, NAN), want(512);
  weight_row(m.weight(), 3, row.data());
  dequantize_row(GgmlType::Q4_K, m.data.data() + 3 * ggml_row_bytes(GgmlType::Q4_K, 512), want.data(), 512);
  EXPECT_EQ(row, want);
  EXPECT_THROW(weight_row(m.weight(), 5, row.data()), Error);
  EXPECT_THROW(weight_row(m.weight(), -1, row.data()), Error);
}
