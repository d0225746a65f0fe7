// The decode step's fused kernels vs their unfused counterparts and the CPU ops, on fresh random inputs with
// poisoned outputs: the residual add + norm and the attention's merge that also write the next GEMV's int8 x
// codes, and SwiGLU fused into the gate|up GEMV (float weights) or the down GEMV's x pass (quantized weights).
// Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "cuda/attention.h"
#include "cuda/gemm.h"
#include "cuda/gemv.h"
#include "cuda/gemv_launch.h"
#include "cuda/ops.h"
#include "cuda_test_util.h"
#include "ggml/quants.h"
#include "kv/codecs/codec.h"
#include "kv/rotation.h"
#include "ops/cpu/elementwise.h"
#include "random_values.h"

namespace kvtax {
namespace {

std::vector<float> download(const cuda::Buffer& b, size_t n) {
  cuda::check(cudaDeviceSynchronize(), "fused test");
  std::vector<float> v(n);
  b.download(v.data(), n * 4);
  return v;
}

cuda::Buffer upload(const std::vector<float>& v) {
  cuda::Buffer b(v.size() * 4);
  b.upload(v.data(), v.size() * 4);
  return b;
}

cuda::DeviceWeight random_weight(GgmlType t, int64_t rows, int64_t cols, uint32_t seed) {
  const auto wf = random_normal(rows * cols, seed);
  const size_t rb = ggml_row_bytes(t, uint64_t(cols));
  std::vector<uint8_t> wq(rb * rows);
  for (int64_t r = 0; r < rows; ++r) quantize_row(t, wf.data() + r * cols, wq.data() + r * rb, cols);
  return cuda::DeviceWeight(t, rows, cols, wq.data());
}

double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double e = 0, m = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    e = std::max(e, std::fabs(double(a[i]) - b[i]));
    m = std::max(m, std::fabs(double(b[i])));
  }
  return e / m;
}

// A quantized GEMV over the int8 codes another kernel wrote into `codes` (a GEMV scratch) equals, bit for bit,
// one that quantizes that kernel's output x (n values) itself.
void expect_gemv_takes_the_codes(const cuda::Buffer& codes, const cuda::Buffer& x, int n, uint32_t& seed,
                                 const char* writer) {
  cuda::Buffer own(cuda::gemv_scratch_bytes(n));
  own.fill(0xff);
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K}) {
    if (n % ggml_traits(t).block_size != 0) continue;
    const int rows = 70;
    cuda::DeviceWeight W = random_weight(t, rows, n, seed++);
    cuda::Buffer y1(rows * 4), y2(rows * 4);
    y1.fill(0xff);
    y2.fill(0xff);
    cuda::gemv(W, nullptr, y1.as<float>(), codes.get(), nullptr, cuda::GemvFusion{nullptr, true});
    cuda::gemv(W, x.as<float>(), y2.as<float>(), own.get());
    const auto a = download(y1, rows), b = download(y2, rows);
    EXPECT_EQ(max_rel_diff(a, b), 0.0) << writer << ": " << ggml_type_name(t) << " " << n;
  }
}

TEST(CudaFused, NormWritesTheCodesTheGemvMakes) {
  REQUIRE_GPU();
  uint32_t seed = 900;
  // 4096 (the llama3-8b width: one value per register slot), 14336 (past the registers: the tail loop), 384, 32.
  for (int n : {4096, 14336, 384, 32}) {
    auto x = random_normal(n, seed++), y = random_normal(n, seed++), w = random_normal(n, seed++);
    x[5] *= 30.0f;
    const float eps = 1e-5f;
    cuda::Buffer xd = upload(x), yd = upload(y), wd = upload(w), out(size_t(n) * 4);
    cuda::Buffer s1(cuda::gemv_scratch_bytes(n));
    out.fill(0xff);
    s1.fill(0xff);
    cuda::check(cuda::ops::add_rmsnorm(xd.as<float>(), yd.as<float>(), wd.as<float>(), out.as<float>(), n, eps,
                                       nullptr, cuda::detail::gemv_quant_x(s1.get(), n)),
                "add_rmsnorm");
    // CPU: x += y, then the norm.
    std::vector<float> xr = x, ref(n);
    add_inplace(xr.data(), y.data(), n);
    rmsnorm(xr.data(), w.data(), ref.data(), n, eps);
    const auto xg = download(xd, n), og = download(out, n);
    EXPECT_EQ(max_rel_diff(xg, xr), 0.0) << n;  // one float add per value: exact
    EXPECT_LE(max_rel_diff(og, ref), 1e-6) << n;
    expect_gemv_takes_the_codes(s1, out, n, seed, "norm");
  }
}

// The prefill's fused residual add + norm + 16-bit rounding gives, bit for bit, the add, the f32 norm and the
// GEMM's own rounding (GemmRunner::round) run one after the other, for f16 and bf16, over several rows.
TEST(CudaFused, NormWritesTheHalvesTheGemmRounds) {
  REQUIRE_GPU();
  uint32_t seed = 920;
  const float eps = 1e-5f;
  for (int n : {4096, 14336, 96}) {
    const int rows = 5;
    const size_t total = size_t(rows) * n;
    auto x = random_normal(total, seed++), y = random_normal(total, seed++), w = random_normal(n, seed++);
    x[7] *= 1e4f;  // one outlier: the rest of its row normalizes to small values
    for (bool bf16 : {false, true}) {
      cuda::Buffer x1 = upload(x), x2 = upload(x), yd = upload(y), wd = upload(w), f(total * 4);
      cuda::Buffer h1(total * 2), h2(total * 2);
      h1.fill(0xff);
      h2.fill(0xff);
      cuda::check(cuda::ops::add_rmsnorm_half(x1.as<float>(), yd.as<float>(), wd.as<float>(), h1.get(), rows, n, bf16,
                                              eps, nullptr),
                  "add_rmsnorm_half");
      cuda::check(cuda::ops::add(x2.as<float>(), yd.as<float>(), int64_t(total), nullptr), "add");
      cuda::check(cuda::ops::rmsnorm(x2.as<float>(), wd.as<float>(), f.as<float>(), rows, n, eps, nullptr), "norm");
      cuda::check(cuda::detail::to_half(f.as<float>(), int64_t(total), bf16, h2.get(), nullptr), "to_half");
      cuda::check(cudaDeviceSynchronize(), "fused test");
      std::vector<uint16_t> a(total), b(total);
      h1.download(a.data(), total * 2);
      h2.download(b.data(), total * 2);
      EXPECT_EQ(a, b) << n << (bf16 ? " bf16" : " f16");
      EXPECT_EQ(download(x1, total), download(x2, total)) << n;  // the residual add is kept in x
    }
  }
}

// The prefill's RoPE over all tokens and heads at once (each pair's cos and sin computed once per token) gives
// bit for bit what the decode step's one-token kernel gives at each position, for plain, NeoX-over-part-of-the-head
// and per-pair-factor (llama3) rotations.
TEST(CudaFused, RopeRowsMatchesTheOneTokenKernel) {
  REQUIRE_GPU();
  const int d = 128, nq = 32, nk = 8, n = 37, pos0 = 30000;
  std::vector<float> factors(d / 2);
  for (int i = 0; i < d / 2; ++i) factors[size_t(i)] = 1.0f + 0.125f * float(i % 7);
  cuda::Buffer fd = upload(factors);
  uint32_t seed = 1500;
  for (int variant = 0; variant < 3; ++variant) {
    cuda::ops::RopeParams rp;
    rp.neox = variant == 1;
    rp.dim = variant == 1 ? 64 : d;
    rp.theta_scale = std::pow(500000.0f, -2.0f / float(rp.dim));
    rp.factor = variant == 2 ? fd.as<float>() : nullptr;
    const auto q = random_normal(size_t(n) * nq * d, seed++), k = random_normal(size_t(n) * nk * d, seed++);
    cuda::Buffer q1 = upload(q), k1 = upload(k), q2 = upload(q), k2 = upload(k), posd(4);
    cuda::check(cuda::ops::rope_rows(q1.as<float>(), nq, k1.as<float>(), nk, n, d, pos0, rp, nullptr), "rope_rows");
    for (int t = 0; t < n; ++t) {
      const int pos = pos0 + t;
      posd.upload(&pos, 4);
      cuda::check(cuda::ops::rope_qk(q2.as<float>() + size_t(t) * nq * d, nq, k2.as<float>() + size_t(t) * nk * d, nk,
                                     d, posd.as<int>(), rp, nullptr),
                  "rope_qk");
      cuda::check(cudaDeviceSynchronize(), "rope test");
    }
    const auto qa = download(q1, q.size()), qb = download(q2, q.size());
    EXPECT_EQ(qa, qb) << "variant " << variant;
    EXPECT_EQ(download(k1, k.size()), download(k2, k.size())) << "variant " << variant;
    EXPECT_NE(qa, q) << "q was not rotated";
  }
}

// The attention's merge writes the int8 codes of its output that a quantized wo would make itself: the GEMV over
// them equals one that quantizes the attention output, bit for bit. f16 runs the plain merge, q4r the merge with
// its inverse rotation first; f32 the scalar split kernel.
TEST(CudaFused, AttentionWritesTheCodesTheGemvMakes) {
  REQUIRE_GPU();
  const int n_kv = 8, n_heads = 32, d = 128, len = 1000, qd = n_heads * d;
  uint32_t seed = 1300;
  for (kv::CodecId c : {kv::CodecId::f16, kv::CodecId::q4r, kv::CodecId::f32}) {
    const kv::CodecInfo& info = kv::codec(c);
    const size_t rb = info.row_bytes(d);
    cuda::DeviceKv kvd(c, n_kv, d, len);
    for (int h = 0; h < n_kv; ++h) {
      std::vector<uint8_t> kr(size_t(len) * rb), vr(size_t(len) * rb);
      auto kf = random_normal(size_t(len) * d, seed++), vf = random_normal(size_t(len) * d, seed++);
      for (int t = 0; t < len; ++t) {
        float* kt = kf.data() + size_t(t) * d;
        float* vt = vf.data() + size_t(t) * d;
        if (info.rotated) kv::rotate(kt, d, kt), kv::rotate(vt, d, vt);
        info.encode(kt, d, kr.data() + t * rb);
        info.encode(vt, d, vr.data() + t * rb);
      }
      kvd.write_rows(h, 0, len, kr.data(), vr.data());
    }
    cuda::Buffer q = upload(random_normal(qd, seed++)), out(size_t(qd) * 4),
        scratch(cuda::decode_scratch_bytes(kvd, n_heads)), s1(cuda::gemv_scratch_bytes(qd));
    out.fill(0xff);
    s1.fill(0xff);
    cuda::decode_attention(kvd, q.as<float>(), n_heads, out.as<float>(), scratch.get(), nullptr, s1.get());
    expect_gemv_takes_the_codes(s1, out, qd, seed, info.name);
  }
}

TEST(CudaFused, SwigluMatchesTheSeparateKernel) {
  REQUIRE_GPU();
  uint32_t seed = 950;
  const int ff = 1000, d = 512;  // 1000 rows: a partial last block of warps
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16}) {
    // gate|up stacked: y = silu(gate x) * (up x) from the GEMV's epilogue vs a GEMV then ops::silu_mul.
    cuda::DeviceWeight gu = random_weight(t, 2 * ff, d, seed++);
    cuda::Buffer x = upload(random_normal(d, seed++)), y1(ff * 4), y2(2 * ff * 4), s(cuda::gemv_scratch_bytes(d));
    y1.fill(0xff);
    y2.fill(0xff);
    cuda::gemv(gu, x.as<float>(), y1.as<float>(), s.get(), nullptr, cuda::GemvFusion{nullptr, false, true});
    cuda::gemv(gu, x.as<float>(), y2.as<float>(), s.get());
    cuda::check(cuda::ops::silu_mul(y2.as<float>(), y2.as<float>() + ff, ff, nullptr), "silu");
    EXPECT_LE(max_rel_diff(download(y1, ff), download(y2, ff)), 1e-6) << ggml_type_name(t);
  }
  const int cols = 1024, rows = 300;
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K}) {
    // down(silu(g) * u) with the SwiGLU in the x pass vs ops::silu_mul then a plain GEMV.
    cuda::DeviceWeight down = random_weight(t, rows, cols, seed++);
    auto g = random_normal(cols, seed++);
    g[7] = 12.0f;
    cuda::Buffer gd = upload(g), ud = upload(random_normal(cols, seed++)), y1(rows * 4), y2(rows * 4);
    cuda::Buffer s(cuda::gemv_scratch_bytes(cols));
    y1.fill(0xff);
    y2.fill(0xff);
    cuda::gemv(down, gd.as<float>(), y1.as<float>(), s.get(), nullptr, cuda::GemvFusion{ud.as<float>()});
    cuda::check(cuda::ops::silu_mul(gd.as<float>(), ud.as<float>(), cols, nullptr), "silu");
    cuda::gemv(down, gd.as<float>(), y2.as<float>(), s.get());
    EXPECT_EQ(max_rel_diff(download(y1, rows), download(y2, rows)), 0.0) << ggml_type_name(t);
  }
}

// Quantized gate|up with codes out (GemvFusion::pair_codes): the int8 codes of silu(gate) * up that it writes are the
// ones down's own x pass makes from a plain gate|up GEMV's two halves, so down gives the same output bit for bit.
// Both block widths of the staged kernel (8 warps, and 16 from 8192 columns), x's codes from the GEMV's own
// quantizer and from a scratch (the decode step's), poisoned scratches; and where it is not served, an error.
TEST(CudaFused, GateUpWritesTheSwigluCodes) {
  REQUIRE_GPU();
  uint32_t seed = 3000;
  if (!cuda::gemv_pair_codes_supported(random_weight(GgmlType::Q4_K, 64, 256, seed++)))
    GTEST_SKIP() << "the staged GEMV (sm_90's bulk copies) is not available on this GPU";
  const int ff = 256, rows = 100;  // gate|up 2 ff x d, down rows x ff (Q4_K: ff in whole super-blocks)
  for (const int d : {1024, 8192})
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K}) {
    SCOPED_TRACE(std::string(ggml_type_name(t)) + " d " + std::to_string(d));
    cuda::DeviceWeight gu = random_weight(t, 2 * ff, d, seed++), down = random_weight(t, rows, ff, seed++);
    ASSERT_TRUE(cuda::gemv_pair_codes_supported(gu));
    auto xv = random_normal(d, seed++);
    xv[5] = 30.0f;
    cuda::Buffer x = upload(xv), xs(cuda::gemv_scratch_bytes(d)), gate(2 * ff * 4), y1(rows * 4), y2(rows * 4);
    cuda::Buffer s1(cuda::gemv_scratch_bytes(ff)), codes(cuda::gemv_scratch_bytes(ff));
    for (cuda::Buffer* b : {&gate, &y1, &y2, &s1, &codes}) b->fill(0xff);
    // Unfused: gate|up into floats, then down quantizes silu(gate) * up in its x pass.
    cuda::gemv(gu, x.as<float>(), gate.as<float>(), xs.get());
    cuda::gemv(down, gate.as<float>(), y1.as<float>(), s1.get(), nullptr, cuda::GemvFusion{gate.as<float>() + ff});
    // Fused, x's codes made by the GEMV's quantizer: gate|up writes the codes, down reads them.
    cuda::GemvFusion f{nullptr, false, true};
    f.pair_codes = codes.get();
    cuda::gemv(gu, x.as<float>(), nullptr, xs.get(), nullptr, f);
    cuda::gemv(down, nullptr, y2.as<float>(), codes.get(), nullptr, cuda::GemvFusion{nullptr, true});
    EXPECT_EQ(max_rel_diff(download(y2, rows), download(y1, rows)), 0.0);
    // Fused again with x's codes already in the scratch (xs still holds them from the call above).
    codes.fill(0xff);
    y2.fill(0xff);
    f.x_in_scratch = true;
    cuda::gemv(gu, nullptr, nullptr, xs.get(), nullptr, f);
    cuda::gemv(down, nullptr, y2.as<float>(), codes.get(), nullptr, cuda::GemvFusion{nullptr, true});
    EXPECT_EQ(max_rel_diff(download(y2, rows), download(y1, rows)), 0.0);
  }
  // Not served: float weights, a half that is not whole blocks of 32 rows, the register-fed kernel.
  cuda::DeviceWeight f16 = random_weight(GgmlType::F16, 128, 256, seed++);
  cuda::DeviceWeight odd = random_weight(GgmlType::Q8_0, 96, 256, seed++);
  cuda::DeviceWeight q = random_weight(GgmlType::Q4_K, 128, 256, seed++);
  cuda::Buffer x(256 * 4), s(cuda::gemv_scratch_bytes(256)), c(cuda::gemv_scratch_bytes(64));
  cuda::GemvFusion f{nullptr, false, true};
  f.pair_codes = c.get();
  EXPECT_FALSE(cuda::gemv_pair_codes_supported(f16));
  EXPECT_FALSE(cuda::gemv_pair_codes_supported(odd));
  EXPECT_THROW(cuda::gemv(f16, x.as<float>(), nullptr, s.get(), nullptr, f), Error);
  EXPECT_THROW(cuda::gemv(odd, x.as<float>(), nullptr, s.get(), nullptr, f), Error);
  struct StagedAgain {
    ~StagedAgain() { cuda::set_gemv_staged(true); }
  } staged_again;
  cuda::set_gemv_staged(false);
  EXPECT_FALSE(cuda::gemv_pair_codes_supported(q));
  EXPECT_THROW(cuda::gemv(q, x.as<float>(), nullptr, s.get(), nullptr, f), Error);
  cuda::set_gemv_staged(true);
  EXPECT_TRUE(cuda::gemv_pair_codes_supported(q));
}

// The decode step's residual epilogue (GemvFusion::res: a GEMV adds its rows into the residual stream and makes the
// next norm's input in its blocks) and the norm prologue of the GEMV after it (GemvFusion::rms_part) give what the
// GEMV, ops::add_rmsnorm and the next GEMV give one after the other: the residual bit for bit, the next GEMV's
// output within float rounding (its 1/rms is applied to the product instead of to x). Every producer type, float and
// quantized readers (the quantized one over the codes the epilogue wrote), the SwiGLU pairs reader; poisoned
// outputs and partial sums.
TEST(CudaFused, GemvEpilogueIsTheAddAndNorm) {
  REQUIRE_GPU();
  uint32_t seed = 2000;
  const int d = 1024, k = 512, m = 96;  // producer d x k; readers m x d
  const float eps = 1e-5f;
  struct StagedAgain {  // the default kernel again for the tests after this one, also when a call here throws
    ~StagedAgain() { cuda::set_gemv_staged(true); }
  } staged_again;
  for (const bool staged : {true, false})  // both quantized kernels (cuda/gemv.h)
  for (GgmlType pt : {GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K}) {
    cuda::set_gemv_staged(staged);
    SCOPED_TRACE(staged ? "staged" : "registers");
    cuda::DeviceWeight W1 = random_weight(pt, d, k, seed++);
    auto r0 = random_normal(d, seed++);
    r0[3] *= 40.0f;
    const auto nw = random_normal(d, seed++);
    cuda::Buffer x = upload(random_normal(k, seed++)), nwd = upload(nw), s(cuda::gemv_scratch_bytes(std::max(d, k)));
    // Unfused: y = W1 x, then x += y and the norm (with codes), then the readers.
    cuda::Buffer res1 = upload(r0), y(d * 4), xb1(d * 4), ns1(cuda::gemv_scratch_bytes(d));
    cuda::gemv(W1, x.as<float>(), y.as<float>(), s.get());
    cuda::check(cuda::ops::add_rmsnorm(res1.as<float>(), y.as<float>(), nwd.as<float>(), xb1.as<float>(), d, eps,
                                       nullptr, cuda::detail::gemv_quant_x(ns1.get(), d)),
                "add_rmsnorm");
    // Fused.
    cuda::Buffer res2 = upload(r0), xb2(d * 4), ns2(cuda::gemv_scratch_bytes(d)), ss(d / 32 * 8);
    xb2.fill(0xff);
    ns2.fill(0xff);
    ss.fill(0xff);
    cuda::GemvFusion f;
    f.res = res2.as<float>(), f.norm_w = nwd.as<float>(), f.norm_x = xb2.as<float>(), f.norm_scratch = ns2.get();
    f.ss_part = ss.as<double>();
    cuda::gemv(W1, x.as<float>(), nullptr, s.get(), nullptr, f);
    EXPECT_EQ(download(res2, d), download(res1, d)) << ggml_type_name(pt);
    cuda::GemvFusion rms;
    rms.rms_part = ss.as<double>(), rms.rms_n = d, rms.rms_eps = eps;
    for (GgmlType rt : {GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_K}) {
      const bool q = cuda::gemv_quantizes_x(rt);
      cuda::DeviceWeight W2 = random_weight(rt, m, d, seed++);
      cuda::Buffer z1(m * 4), z2(m * 4);
      z2.fill(0xff);
      cuda::GemvFusion r = rms;
      r.x_in_scratch = q;
      cuda::gemv(W2, xb1.as<float>(), z1.as<float>(), ns1.get(), nullptr, cuda::GemvFusion{nullptr, q});
      cuda::gemv(W2, xb2.as<float>(), z2.as<float>(), ns2.get(), nullptr, r);
      // A quantized reader's codes may differ where x * w / max|x * w| lands within an ulp of a rounding boundary
      // (one such code moves an output by ~1e-3 of the largest); a wrong scale or missing codes miss by far more.
      EXPECT_LE(max_rel_diff(download(z2, m), download(z1, m)), q ? 2e-3 : 2e-6)
          << ggml_type_name(pt) << " -> " << ggml_type_name(rt);
    }
    cuda::DeviceWeight gu = random_weight(GgmlType::F16, 2 * m, d, seed++);  // SwiGLU pairs: silu(s g) * (s u)
    cuda::Buffer z1(m * 4), z2(m * 4);
    z2.fill(0xff);
    cuda::GemvFusion r = rms;
    r.silu_pairs = true;
    cuda::gemv(gu, xb1.as<float>(), z1.as<float>(), s.get(), nullptr, cuda::GemvFusion{nullptr, false, true});
    cuda::gemv(gu, xb2.as<float>(), z2.as<float>(), s.get(), nullptr, r);
    EXPECT_LE(max_rel_diff(download(z2, m), download(z1, m)), 4e-6) << ggml_type_name(pt) << " -> pairs";
  }
}

TEST(CudaFused, RejectsFusionsATypeCannotDo) {
  REQUIRE_GPU();
  cuda::DeviceWeight f = random_weight(GgmlType::F16, 6, 256, 1), q = random_weight(GgmlType::Q8_0, 6, 256, 2);
  cuda::DeviceWeight odd = random_weight(GgmlType::BF16, 5, 256, 3);
  cuda::Buffer x(256 * 4), y(6 * 4), s(cuda::gemv_scratch_bytes(256));
  EXPECT_THROW(cuda::gemv(f, x.as<float>(), y.as<float>(), s.get(), nullptr, cuda::GemvFusion{x.as<float>()}), Error);
  EXPECT_THROW(cuda::gemv(f, x.as<float>(), y.as<float>(), s.get(), nullptr, cuda::GemvFusion{nullptr, true}), Error);
  EXPECT_THROW(cuda::gemv(q, x.as<float>(), y.as<float>(), s.get(), nullptr, cuda::GemvFusion{nullptr, false, true}),
               Error);
  EXPECT_THROW(cuda::gemv(odd, x.as<float>(), y.as<float>(), s.get(), nullptr, cuda::GemvFusion{nullptr, false, true}),
               Error);
  cuda::GemvFusion res;  // the residual epilogue: whole blocks of 32 rows, norm weights and partial sums
  res.res = x.as<float>(), res.norm_w = x.as<float>(), res.ss_part = reinterpret_cast<double*>(y.as<float>());
  EXPECT_THROW(cuda::gemv(f, x.as<float>(), nullptr, s.get(), nullptr, res), Error);  // 6 rows
  cuda::GemvFusion rms;
  rms.rms_part = reinterpret_cast<double*>(y.as<float>()), rms.rms_n = 100;  // not a multiple of 32
  EXPECT_THROW(cuda::gemv(f, x.as<float>(), y.as<float>(), s.get(), nullptr, rms), Error);
  EXPECT_FALSE(cuda::gemv_quantizes_x(GgmlType::BF16));
  EXPECT_TRUE(cuda::gemv_quantizes_x(GgmlType::Q4_K));
}

}  // namespace
}  // namespace kvtax
