// CUDA GEMV vs float64 references on fresh random weights and activations. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "cuda/gemv.h"
#include "cuda_test_util.h"
#include "ggml/quants.h"
#include "ops/cpu/matmul.h"
#include "random_values.h"

namespace kvtax {
namespace {

// x as the GPU quantizes it for integer dots: per 32 values d = max|x|/127, q = round(x/d).
std::vector<float> quantized_x(const std::vector<float>& x) {
  std::vector<float> out(x.size());
  for (size_t b = 0; b < x.size(); b += 32) {
    float amax = 0;
    for (size_t i = b; i < b + 32; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float d = amax / 127.0f;
    for (size_t i = b; i < b + 32; ++i) out[i] = d > 0 ? d * float(int(std::nearbyint(x[i] / d))) : 0.0f;
  }
  return out;
}

// Largest |y_r - ref_r| relative to sum_c |W_rc x_c|: a row's dot product can cancel to near zero
// (a single Q4_K row of 256 did, on the H200, 2026-11-30), its terms cannot.
double scaled_err(const std::vector<float>& y, const std::vector<float>& ref, const std::vector<double>& mag) {
  double e = 0;
  for (size_t r = 0; r < y.size(); ++r) e = std::max(e, std::fabs(double(y[r]) - ref[r]) / mag[r]);
  return e;
}

// Both quantized kernels (staged through shared memory, register-fed), as set_gemv_staged picks.
class CudaGemv : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { cuda::set_gemv_staged(GetParam()); }
  void TearDown() override { cuda::set_gemv_staged(true); }
};

TEST_P(CudaGemv, EveryTypeMatchesReference) {
  REQUIRE_GPU();
  struct Shape { int64_t rows, cols; };
  // 384 columns (the shipped recall model's width): not a whole Q4_K super-block, every other type. 14336: three
  // whole units of the staged kernel and half of one; 2500 rows: several rows per warp of its resident grid.
  const Shape shapes[] = {{1, 256}, {37, 512}, {300, 4096}, {64, 14336}, {5, 384}, {2500, 1280}};
  const GgmlType types[] = {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0,
                            GgmlType::Q4_K};
  uint32_t seed = 500;
  for (GgmlType t : types)
    for (const Shape& s : shapes) {
      if (s.cols % ggml_traits(t).block_size != 0) continue;
      const auto wf = random_normal(s.rows * s.cols, seed++);
      auto x = random_normal(s.cols, seed++);
      x[3] *= 20.0f;  // an outlier channel, as real activations have
      const size_t rb = ggml_row_bytes(t, uint64_t(s.cols));
      std::vector<uint8_t> wq(rb * s.rows);
      for (int64_t r = 0; r < s.rows; ++r) quantize_row(t, wf.data() + r * s.cols, wq.data() + r * rb, s.cols);

      cuda::DeviceWeight w(t, s.rows, s.cols, wq.data());
      cuda::Buffer xd(x.size() * 4), yd(size_t(s.rows) * 4), scratch(cuda::gemv_scratch_bytes(s.cols));
      xd.upload(x.data(), x.size() * 4);
      yd.fill(0xff);  // NaN: unwritten rows fail
      cuda::gemv(w, xd.as<float>(), yd.as<float>(), scratch.get());
      cuda::check(cudaDeviceSynchronize(), "gemv test");
      std::vector<float> y(s.rows);
      yd.download(y.data(), y.size() * 4);
      for (float v : y) ASSERT_TRUE(std::isfinite(v)) << ggml_type_name(t) << " " << s.rows << "x" << s.cols;
      // Two blocks per SM (more rows per warp than the resident grid's): each row's products in the same order. Only
      // the staged kernel takes blocks_per_sm (F32 never runs on it), so only there can the check fail.
      if (GetParam() && t != GgmlType::F32) {
        cuda::GemvFusion two;
        two.blocks_per_sm = 2;
        yd.fill(0xff);
        cuda::gemv(w, xd.as<float>(), yd.as<float>(), scratch.get(), nullptr, two);
        cuda::check(cudaDeviceSynchronize(), "gemv test");
        std::vector<float> y2(s.rows);
        yd.download(y2.data(), y2.size() * 4);
        EXPECT_EQ(y2, y) << ggml_type_name(t) << " " << s.rows << "x" << s.cols << ": two blocks per SM";
      }

      // Kernel error: the same products in float64 over what the GPU multiplies (x quantized for
      // integer types), so only the f32 summation order differs.
      const bool int_dot = t == GgmlType::Q8_0 || t == GgmlType::Q4_0 || t == GgmlType::Q4_K;
      const Weight cw{t, wq.data(), s.rows, s.cols};
      std::vector<float> ref(s.rows), ref_exact(s.rows);
      const std::vector<float> xq = int_dot ? quantized_x(x) : x;
      matmul_reference(cw, xq.data(), 1, ref.data());
      matmul_reference(cw, x.data(), 1, ref_exact.data());
      std::vector<double> mag(s.rows);
      std::vector<float> row(s.cols);
      for (int64_t r = 0; r < s.rows; ++r) {
        weight_row(cw, r, row.data());
        for (int64_t c = 0; c < s.cols; ++c) mag[r] += std::fabs(double(row[c]) * x[c]);
      }
      EXPECT_LE(scaled_err(y, ref, mag), 1e-6) << ggml_type_name(t) << " " << s.rows << "x" << s.cols;
      // Activation rounding (x to int8 per 32 values), as in the CPU's quantized-activation matmul.
      EXPECT_LE(scaled_err(y, ref_exact, mag), int_dot ? 1e-2 : 1e-6) << ggml_type_name(t) << " " << s.rows << "x"
                                                                       << s.cols;
    }
}

INSTANTIATE_TEST_SUITE_P(Kernels, CudaGemv, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "staged" : "registers"; });

TEST(CudaGemvShapes, RejectsBadShapes) {
  REQUIRE_GPU();
  std::vector<uint8_t> host(1 << 16);
  EXPECT_THROW(cuda::DeviceWeight(GgmlType::F16, 4, 100, host.data()), Error);  // cols % 32
  EXPECT_THROW(cuda::DeviceWeight(GgmlType::Q6_K, 4, 256, host.data()), Error);  // no kernel
  EXPECT_THROW(cuda::DeviceWeight(GgmlType::Q8_0, 0, 256, host.data()), Error);
  EXPECT_FALSE(cuda::gemv_supported(GgmlType::Q5_K));
}

}  // namespace
}  // namespace kvtax
