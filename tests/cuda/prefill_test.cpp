// Batched prefill pieces on the device vs float64 references on fresh random inputs: the tensor-core
// causal attention over the paged KV (every codec, GQA groups of 1/4/7, odd chunk lengths, chunks that
// start past earlier tokens) and the cuBLAS GEMM (every weight type). Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/f16.h"
#include "cuda/gemm.h"
#include "cuda/ops.h"
#include "cuda/prefill_attention.h"
#include "cuda/prefill_launch.h"
#include "cuda/prefill_ops.h"
#include "cuda_test_util.h"
#include "ggml/quants.h"
#include "kv/cache.h"
#include "kv_test_util.h"
#include "random_values.h"

namespace kvtax {
namespace {

using kvtax::testing::gaussian;
using kvtax::testing::outliers;
using kvtax::testing::rel_l2;

// A device KV of codec c holding k and v ([len][n_kv][d]) as the CPU cache encodes them, in one append.
cuda::DeviceKv device_kv(kv::CodecId c, int n_kv, int d, int len, const std::vector<float>& k,
                         const std::vector<float>& v) {
  KvCache cache({1, n_kv, d}, parse_kv_spec(kv::codec(c).name), size_t(len));
  cache.append(0, len, k.data(), v.data());
  cache.commit(len);
  cuda::DeviceKv dkv(c, n_kv, d, len);
  dkv.copy_from(cache, 0);
  return dkv;
}

struct Shape { int n_kv, n_heads, d, pos0, n; };

// The K/V tiles and q go through f16 on the tensor cores (11-bit significands, f32 accumulation), so the
// output sits ~1e-3 from the float64 attention over the stored rows; a wrong fragment, mask or scale
// gives O(1). Bound 4e-3 for every codec (the rows are decoded exactly; only f16 rounding differs).
TEST(CudaPrefill, AttentionMatchesFloat64EveryCodec) {
  REQUIRE_GPU();
  const Shape shapes[] = {{2, 8, 128, 0, 133}, {2, 8, 128, 223, 77}, {4, 4, 64, 0, 300}, {1, 7, 64, 40, 61},
                          {8, 32, 128, 1000, 129}, {2, 8, 128, 0, 1100}, {2, 8, 64, 0, 133},
                          {4, 4, 128, 0, 300},     {1, 7, 128, 40, 61}};
  uint64_t seed = 4000;
  for (int ci = 0; ci < kv::kNumCodecs; ++ci) {
    const auto c = kv::CodecId(ci);
    for (const Shape& s : shapes) {
      const int len = s.pos0 + s.n;
      KvCache cache({1, s.n_kv, s.d}, parse_kv_spec(kv::codec(c).name), size_t(len));
      const auto k = outliers(size_t(len) * s.n_kv, s.d, seed++);
      const auto v = gaussian(size_t(len) * s.n_kv * s.d, seed++);
      const auto q = gaussian(size_t(s.n) * s.n_heads * s.d, seed++);
      for (int p = 0; p < len; p += KvCache::kDefaultMaxChunk) {
        const int n = std::min(KvCache::kDefaultMaxChunk, len - p);
        const size_t off = size_t(p) * s.n_kv * s.d;
        cache.append(0, n, k.data() + off, v.data() + off);
        cache.commit(n);
      }
      std::vector<float> kd(k.size()), vd(v.size());
      for (int t = 0; t < len; ++t)
        for (int h = 0; h < s.n_kv; ++h) {
          const size_t off = (size_t(t) * s.n_kv + h) * s.d;
          cache.read_token(0, t, h, kd.data() + off, vd.data() + off);
        }
      cuda::DeviceKv dkv(c, s.n_kv, s.d, len);
      dkv.copy_from(cache, 0);
      cuda::Buffer qd(q.size() * 4), out(q.size() * 4);
      const std::vector<double> ref = kvtax::testing::exact_attention(q, kd, vd, s.n_kv, s.n_heads, s.d, s.pos0, s.n);
      // Every kernel: mma.sync in both block shapes (16 warps falls back to 8 where it does not fit), and the
      // wgmma kernel where the device runs it.
      // f32 on the wgmma kernel converts its tiles in pairs of blocks (the default), or each block alone ("wgmma0",
      // KVTAX_PREFILL_SPLIT=0).
      for (const auto& [kernel, warps] : {std::pair{"mma", "8"}, std::pair{"mma", "16"}, std::pair{"wgmma", "8"},
                                          std::pair{"wgmma0", "8"}}) {
        const std::string k(kernel);
        const bool wgmma = k.starts_with("wgmma");
        // (The wgmma kernel takes head_dim 128 only; other dims run the mma.sync kernel.)
        if (wgmma && (s.d != 128 || !cuda::detail::prefill_wgmma_available())) continue;
        if (k == "wgmma0" && c != kv::CodecId::f32) continue;
        setenv("KVTAX_PREFILL_KERNEL", wgmma ? "wgmma" : "mma", 1);
        setenv("KVTAX_PREFILL_SPLIT", k == "wgmma0" ? "0" : "1", 1);
        setenv("KVTAX_PREFILL_WARPS", warps, 1);
        qd.upload(q.data(), q.size() * 4);
        out.fill(0xff);  // NaN: unwritten outputs fail
        cuda::prefill_attention(dkv.view(), qd.as<float>(), s.n, s.pos0, s.n_heads, out.as<float>());
        cuda::check(cudaDeviceSynchronize(), "prefill attention test");
        std::vector<float> gpu(q.size());
        out.download(gpu.data(), gpu.size() * 4);
        for (float x : gpu) ASSERT_TRUE(std::isfinite(x)) << kv::codec(c).name << ": unwritten or NaN output";
        const double e = rel_l2(gpu, ref);
        EXPECT_LE(e, 4e-3) << kv::codec(c).name << " kv " << s.n_kv << " heads " << s.n_heads << " d " << s.d
                           << " pos0 " << s.pos0 << " n " << s.n << " " << kernel << " warps " << warps;
        std::printf("[cuda-prefill] %-4s kv %d heads %2d d %3d pos0 %4d n %3d %-6s warps %2s: rel-L2 %.2e\n",
                    kv::codec(c).name, s.n_kv, s.n_heads, s.d, s.pos0, s.n, kernel, warps, e);
      }
      unsetenv("KVTAX_PREFILL_KERNEL");
      unsetenv("KVTAX_PREFILL_SPLIT");
      unsetenv("KVTAX_PREFILL_WARPS");
    }
  }
}

// The 16-bit output (the next product's input) is the f32 output rounded, bit for bit, from both kernels; the
// rotated codecs (q4r, tq3) rotate it back before either store. q is left as it was.
TEST(CudaPrefill, HalfOutputIsTheRoundedFloatOutput) {
  REQUIRE_GPU();
  const int n_kv = 2, n_heads = 8, d = 128, n = 300;
  uint64_t seed = 4700;
  for (kv::CodecId c : {kv::CodecId::f32, kv::CodecId::f16, kv::CodecId::fp8, kv::CodecId::q4, kv::CodecId::bf16,
                        kv::CodecId::q4r, kv::CodecId::tq3}) {
    const auto k = gaussian(size_t(n) * n_kv * d, seed++), v = gaussian(size_t(n) * n_kv * d, seed++);
    const auto q = gaussian(size_t(n) * n_heads * d, seed++);
    cuda::DeviceKv dkv = device_kv(c, n_kv, d, n, k, v);
    cuda::Buffer qd(q.size() * 4), out(q.size() * 4), h1(q.size() * 2), h2(q.size() * 2);
    for (const char* kernel : {"mma", "wgmma"}) {
      if (std::string(kernel) == "wgmma" && !cuda::detail::prefill_wgmma_available()) continue;
      setenv("KVTAX_PREFILL_KERNEL", kernel, 1);
      for (bool bf16 : {false, true}) {
        h1.fill(0xff);
        h2.fill(0xff);
        out.fill(0xff);  // NaN: an unwritten f32 output fails below instead of rounding to the poisoned halves
        if (!bf16) qd.upload(q.data(), q.size() * 4);  // once: neither call may change it
        cuda::prefill_attention(dkv.view(), qd.as<float>(), n, 0, n_heads, out.as<float>());
        cuda::check(cuda::detail::to_half(out.as<float>(), int64_t(q.size()), bf16, h1.get(), nullptr), "round");
        cuda::prefill_attention_half(dkv.view(), qd.as<float>(), n, 0, n_heads, h2.get(), bf16);
        cuda::check(cudaDeviceSynchronize(), "half output test");
        std::vector<float> f(q.size());
        out.download(f.data(), f.size() * 4);
        for (float x : f) ASSERT_TRUE(std::isfinite(x)) << kv::codec(c).name << " " << kernel << ": unwritten output";
        std::vector<uint16_t> a(q.size()), b(q.size());
        h1.download(a.data(), a.size() * 2);
        h2.download(b.data(), b.size() * 2);
        EXPECT_EQ(a, b) << kv::codec(c).name << " " << kernel << (bf16 ? " bf16" : " f16");
        std::vector<float> qa(q.size());
        qd.download(qa.data(), qa.size() * 4);
        EXPECT_EQ(qa, q) << kv::codec(c).name << ": q changed";
      }
      unsetenv("KVTAX_PREFILL_KERNEL");
    }
  }
}

// RoPE applied to q by the attention as it stages it (QRope, the factors ops::rope_rows writes) gives the output
// of ops::rope_rows on q first, bit for bit: the same float steps, before the codec's rotation where there is one.
// Adjacent pairs and neox halves (with llama3 divisors), chunks past position 0, both kernels; q is not written.
TEST(CudaPrefill, RopeAppliedAsQIsStagedIsRopeRowsFirst) {
  REQUIRE_GPU();
  const int n_kv = 2, n_heads = 8, pos0 = 40, n = 77, len = pos0 + n;
  uint64_t seed = 4900;
  for (int d : {64, 128}) {
    std::vector<float> factors(size_t(d / 2));
    for (int i = 0; i < d / 2; ++i) factors[size_t(i)] = 1.0f + 0.125f * float(i % 7);
    cuda::Buffer fd(factors.size() * 4);
    fd.upload(factors.data(), factors.size() * 4);
    for (kv::CodecId c : {kv::CodecId::f16, kv::CodecId::f32, kv::CodecId::q4r}) {
      const auto k = gaussian(size_t(len) * n_kv * d, seed++), v = gaussian(size_t(len) * n_kv * d, seed++);
      const auto q = gaussian(size_t(n) * n_heads * d, seed++);
      cuda::DeviceKv dkv = device_kv(c, n_kv, d, len, k, v);
      cuda::Buffer q0(q.size() * 4), q1(q.size() * 4), o0(q.size() * 4), o1(q.size() * 4);
      cuda::Buffer cs(size_t(n) * d / 2 * sizeof(float2));
      for (bool neox : {false, true}) {
        cuda::ops::RopeParams rp;
        rp.neox = neox;
        rp.dim = d;
        rp.theta_scale = std::pow(500000.0f, -2.0f / float(d));
        rp.factor = neox ? fd.as<float>() : nullptr;
        for (const char* kernel : {"mma", "wgmma"}) {
          if (std::string(kernel) == "wgmma" && (d != 128 || !cuda::detail::prefill_wgmma_available())) continue;
          setenv("KVTAX_PREFILL_KERNEL", kernel, 1);
          q0.upload(q.data(), q.size() * 4);
          q1.upload(q.data(), q.size() * 4);
          o0.fill(0xff);
          o1.fill(0xfe);
          cs.fill(0xff);
          cuda::check(cuda::ops::rope_rows(q0.as<float>(), n_heads, nullptr, 0, n, d, pos0, rp, nullptr), "rope");
          cuda::prefill_attention(dkv.view(), q0.as<float>(), n, pos0, n_heads, o0.as<float>());
          cuda::check(cuda::ops::rope_rows(nullptr, 0, nullptr, 0, n, d, pos0, rp, nullptr, cs.as<float2>()), "cs");
          cuda::prefill_attention(dkv.view(), q1.as<float>(), n, pos0, n_heads, o1.as<float>(), nullptr,
                                  cuda::QRope{cs.as<float2>(), neox});
          cuda::check(cudaDeviceSynchronize(), "rope in the prefill test");
          std::vector<float> a(q.size()), b(q.size()), qa(q.size());
          o0.download(a.data(), a.size() * 4);
          o1.download(b.data(), b.size() * 4);
          q1.download(qa.data(), qa.size() * 4);
          const std::string what = std::string(kv::codec(c).name) + " d " + std::to_string(d) + (neox ? " neox " : " ") +
                                   kernel;
          for (float x : a) ASSERT_TRUE(std::isfinite(x)) << what << ": unwritten output";
          EXPECT_EQ(a, b) << what;
          EXPECT_EQ(qa, q) << what << ": q changed";
        }
        unsetenv("KVTAX_PREFILL_KERNEL");
      }
    }
  }
}

TEST(CudaPrefill, RejectsBadCalls) {
  REQUIRE_GPU();
  cuda::DeviceKv kv(kv::CodecId::f16, 2, 128, 300);
  kv.set_len(100);
  cuda::Buffer q(100 * 8 * 128 * 4), out(100 * 8 * 128 * 4);
  EXPECT_THROW(cuda::prefill_attention(kv.view(), q.as<float>(), 50, 10, 8, out.as<float>()), Error);  // 60 != 100
  EXPECT_THROW(cuda::prefill_attention(kv.view(), q.as<float>(), 50, 50, 7, out.as<float>()), Error);  // 7 % 2
  const auto* odd = reinterpret_cast<const float2*>(q.as<float>() + 2);  // RoPE factors off 16-byte alignment
  EXPECT_THROW(cuda::prefill_attention(kv.view(), q.as<float>(), 50, 50, 8, out.as<float>(), nullptr, {odd, false}),
               Error);
  cuda::DeviceKv wide(kv::CodecId::f16, 1, 256, 10);
  wide.set_len(4);
  EXPECT_THROW(cuda::prefill_attention(wide.view(), q.as<float>(), 4, 0, 1, out.as<float>()), Error);  // d 256
}

// cuBLAS GEMM (x rounded to bf16/f16, quantized weights dequantized to bf16) vs float64 over the stored
// weights and the unrounded x: 16-bit rounding of x (and of the dequantized weights) gives ~1e-3 relative.
TEST(CudaGemm, EveryTypeMatchesReference) {
  REQUIRE_GPU();
  const GgmlType types[] = {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0,
                            GgmlType::Q4_K};
  struct Case { int64_t rows, cols, row0, take; int n; };
  // A row range of a stacked matrix (as q|k|v), and more rows than one dequantization pass holds.
  const Case cases[] = {{96, 512, 32, 40, 37}, {cuda::GemmRunner::kDequantRows + 40, 256, 0,
                                                cuda::GemmRunner::kDequantRows + 40, 3}};
  cuda::GemmRunner gemm(nullptr);
  uint32_t seed = 900;
  for (GgmlType t : types)
    for (const Case& cs : cases) {
      const auto wf = random_normal(cs.rows * cs.cols, seed++);
      auto x = random_normal(cs.n * cs.cols, seed++);
      x[5] *= 20.0f;  // an outlier channel
      const size_t rb = ggml_row_bytes(t, uint64_t(cs.cols));
      std::vector<uint8_t> wq(rb * cs.rows);
      for (int64_t r = 0; r < cs.rows; ++r) quantize_row(t, wf.data() + r * cs.cols, wq.data() + r * rb, cs.cols);
      std::vector<float> wd(size_t(cs.rows * cs.cols));  // the weights as stored
      for (int64_t r = 0; r < cs.rows; ++r) dequantize_row(t, wq.data() + r * rb, wd.data() + r * cs.cols, cs.cols);
      cuda::DeviceWeight w(t, cs.rows, cs.cols, wq.data());
      const int64_t ldy = cs.take + 3;  // output rows wider than the part written (as q inside q|k|v)
      cuda::Buffer xd(x.size() * 4), yd(size_t(cs.n * ldy) * 4);
      xd.upload(x.data(), x.size() * 4);
      yd.fill(0xff);
      gemm.run(w, cs.row0, cs.take, xd.as<float>(), cs.n, yd.as<float>(), ldy);
      cuda::check(cudaDeviceSynchronize(), "gemm test");
      std::vector<float> y(size_t(cs.n * ldy));
      yd.download(y.data(), y.size() * 4);
      std::vector<float> got;
      std::vector<double> ref;
      for (int i = 0; i < cs.n; ++i)
        for (int64_t r = 0; r < cs.take; ++r) {
          double a = 0;
          for (int64_t j = 0; j < cs.cols; ++j) a += double(wd[size_t((cs.row0 + r) * cs.cols + j)]) * x[size_t(i * cs.cols + j)];
          ref.push_back(a);
          got.push_back(y[size_t(i * ldy + r)]);
        }
      for (float v : got) ASSERT_TRUE(std::isfinite(v)) << ggml_type_name(t) << ": unwritten output";
      EXPECT_LE(rel_l2(got, ref), t == GgmlType::F32 ? 1e-5 : t == GgmlType::F16 ? 1.5e-3 : 6e-3)
          << ggml_type_name(t) << " " << cs.rows << "x" << cs.cols;
      // Columns past the part stay as they were (NaN): the GEMM writes only its rows.
      EXPECT_TRUE(std::isnan(y[size_t(ldy - 1)])) << ggml_type_name(t);
    }
}

// The quantized weights as bf16, value by value, vs the CPU's dequantization rounded to bf16: a rows range that
// starts past row 0, into a poisoned scratch. The device may contract d * q - m into one fma, so a value may land
// one bf16 step from the CPU's (never more); a wrong nibble, scale or position is many steps off.
TEST(CudaGemm, DequantizedRowsAreTheCpuValuesInBf16) {
  REQUIRE_GPU();
  const int64_t rows = 37, cols = 768, row0 = 5, take = 30;
  uint32_t seed = 950;
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K}) {
    const auto wf = random_normal(rows * cols, seed++);
    const size_t rb = ggml_row_bytes(t, uint64_t(cols));
    std::vector<uint8_t> wq(rb * rows);
    for (int64_t r = 0; r < rows; ++r) quantize_row(t, wf.data() + r * cols, wq.data() + r * rb, cols);
    cuda::DeviceWeight w(t, rows, cols, wq.data());
    cuda::Buffer out(size_t(take * cols) * 2 + 16);
    out.fill(0xff);
    cuda::check(cuda::detail::dequant_rows_bf16(t, w.data(), rb, row0, take, int(cols), out.get(), nullptr),
                "dequant");
    cuda::check(cudaDeviceSynchronize(), "dequant test");
    std::vector<uint16_t> got(size_t(take * cols) + 8);
    out.download(got.data(), got.size() * 2);
    std::vector<float> ref(static_cast<size_t>(cols));
    int off_by_one = 0;
    for (int64_t r = 0; r < take; ++r) {
      dequantize_row(t, wq.data() + (row0 + r) * rb, ref.data(), cols);
      for (int64_t c = 0; c < cols; ++c) {
        const uint16_t a = got[size_t(r * cols + c)], b = f32_to_bf16(ref[size_t(c)]);
        const float va = bf16_to_f32(a), vb = bf16_to_f32(b);
        // One bf16 step (8 significant bits), or float rounding where d * q and m nearly cancel.
        ASSERT_LE(std::abs(va - vb), std::ldexp(std::abs(vb), -7) + 1e-6f)
            << ggml_type_name(t) << " row " << row0 + r << " col " << c << ": " << va << " vs " << ref[size_t(c)];
        off_by_one += a != b;
      }
    }
    EXPECT_LE(off_by_one, take * cols / 100) << ggml_type_name(t);
    for (int k = 0; k < 8; ++k) EXPECT_EQ(got[size_t(take * cols + k)], 0xffff) << "written past the rows";
  }
}

// The prefill's 16-bit path: one rounding of x shared by several products (run_rounded), outputs written as
// 16-bit values side by side (gate|up), then SwiGLU from and to 16 bits, and a product added into f32 values
// already there (the residual stream). Each vs float64 over the stored weights and the unrounded x; bounds add
// one 16-bit rounding of the output to the GEMM test's.
TEST(CudaGemm, RoundedInputHalfOutputAndSwiGluMatchReference) {
  REQUIRE_GPU();
  const GgmlType types[] = {GgmlType::F16, GgmlType::BF16, GgmlType::Q4_K};
  const int64_t ff = cuda::GemmRunner::kDequantRows / 2 + 8, cols = 256;  // 2 ff rows: two dequantization passes
  const int n = 5;
  cuda::GemmRunner gemm(nullptr);
  uint32_t seed = 1700;
  for (GgmlType t : types) {
    const auto wf = random_normal(2 * ff * cols, seed++);
    auto x = random_normal(n * cols, seed++);
    const size_t rb = ggml_row_bytes(t, uint64_t(cols));
    std::vector<uint8_t> wq(rb * 2 * ff);
    for (int64_t r = 0; r < 2 * ff; ++r) quantize_row(t, wf.data() + r * cols, wq.data() + r * rb, cols);
    std::vector<float> wd(size_t(2 * ff * cols));
    for (int64_t r = 0; r < 2 * ff; ++r) dequantize_row(t, wq.data() + r * rb, wd.data() + r * cols, cols);
    cuda::DeviceWeight w(t, 2 * ff, cols, wq.data());
    const bool bf = cuda::GemmRunner::takes_bf16(w);
    EXPECT_EQ(bf, t != GgmlType::F16);
    cuda::Buffer xd(x.size() * 4), gu(size_t(n) * 2 * ff * 2), h(size_t(n) * ff * 2), yf(size_t(n) * ff * 4);
    auto base = random_normal(size_t(n) * ff, seed++);  // the residual the up rows are added into,
    for (float& v : base) v *= 16;  // as large as a product (a sum of 256 products of two N(0, 1) values)
    cuda::Buffer ya(base.size() * 4);
    ya.upload(base.data(), base.size() * 4);
    xd.upload(x.data(), x.size() * 4);
    gu.fill(0xff);  // NaN as f16 and as bf16
    h.fill(0xff);
    yf.fill(0xff);
    const void* xh = gemm.round(xd.as<float>(), n, cols, bf);
    using Out = cuda::GemmRunner::Out;
    gemm.run_rounded(w, 0, 2 * ff, xh, n, gu.get(), 2 * ff, Out::half);  // gate|up in one product, 16-bit out
    gemm.run_rounded(w, ff, ff, xh, n, yf.get(), ff, Out::f32);          // the up rows again, f32 out
    gemm.run_rounded(w, ff, ff, xh, n, ya.get(), ff, Out::add);          // and added into base
    cuda::check(cuda::detail::silu_mul_half(gu.get(), n, int(ff), bf, h.get(), nullptr), "silu");
    cuda::check(cudaDeviceSynchronize(), "half path test");
    std::vector<uint16_t> g16(size_t(n) * 2 * ff), h16(size_t(n) * ff);
    std::vector<float> y32(size_t(n) * ff), yadd(base.size());
    ya.download(yadd.data(), yadd.size() * 4);
    gu.download(g16.data(), g16.size() * 2);
    h.download(h16.data(), h16.size() * 2);
    yf.download(y32.data(), y32.size() * 4);
    auto to_f = [&](uint16_t v) { return bf ? bf16_to_f32(v) : f16_to_f32(v); };
    std::vector<float> got_gu, got_up, got_h, want_h, got_add;
    std::vector<double> ref_gu, ref_up, ref_add;
    for (int i = 0; i < n; ++i) {
      for (int64_t r = 0; r < 2 * ff; ++r) {
        double a = 0;
        for (int64_t j = 0; j < cols; ++j) a += double(wd[size_t(r * cols + j)]) * x[size_t(i * cols + j)];
        ref_gu.push_back(a);
        got_gu.push_back(to_f(g16[size_t(i * 2 * ff + r)]));
        if (r >= ff) {
          const size_t k = size_t(i * ff + r - ff);
          ref_up.push_back(a), got_up.push_back(y32[k]);
          ref_add.push_back(a + base[k]), got_add.push_back(yadd[k]);
        }
      }
      for (int64_t r = 0; r < ff; ++r) {  // SwiGLU of the device's own 16-bit gate and up values
        const float g = to_f(g16[size_t(i * 2 * ff + r)]), u = to_f(g16[size_t(i * 2 * ff + ff + r)]);
        const float e = g / (1.0f + std::exp(-g)) * u;
        want_h.push_back(bf ? bf16_to_f32(f32_to_bf16(e)) : f16_to_f32(f32_to_f16(e)));
        got_h.push_back(to_f(h16[size_t(i * ff + r)]));
      }
    }
    for (float v : got_gu) ASSERT_TRUE(std::isfinite(v)) << ggml_type_name(t) << ": unwritten gate|up";
    for (float v : got_h) ASSERT_TRUE(std::isfinite(v)) << ggml_type_name(t) << ": unwritten SwiGLU";
    EXPECT_LE(rel_l2(got_gu, ref_gu), t == GgmlType::F16 ? 2e-3 : 8e-3) << ggml_type_name(t);
    EXPECT_LE(rel_l2(got_up, ref_up), t == GgmlType::F16 ? 1.5e-3 : 6e-3) << ggml_type_name(t);
    // Neither term dominates the sum, so an add that dropped base, or wrote the product alone, misses this bound
    // by orders of magnitude.
    EXPECT_LE(rel_l2(got_add, ref_add), t == GgmlType::F16 ? 1.5e-3 : 6e-3) << ggml_type_name(t);
    // One rounding of the product; exp may differ from the host's by an ulp or two.
    double e = 0, m = 0;
    for (size_t i = 0; i < want_h.size(); ++i) e += double(got_h[i] - want_h[i]) * (got_h[i] - want_h[i]), m += double(want_h[i]) * want_h[i];
    EXPECT_LE(std::sqrt(e / m), bf ? 4e-3 : 1e-3) << ggml_type_name(t);
  }
}

}  // namespace
}  // namespace kvtax
