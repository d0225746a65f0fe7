#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "attn/cpu/attention.h"
#include "core/error.h"
#include "kv/cache.h"
#include "kv_test_util.h"

namespace kvtax {
namespace {

using kvtax::testing::gaussian;

// float64 attention over what the cache stores (decoded, un-rotated), with the policy's mask.
std::vector<double> reference(const KvCache& c, int layer, const std::vector<float>& q, int n_q, int n_heads) {
  const int H = c.shape().n_kv_heads, d = c.shape().head_dim, rep = n_heads / H, L = c.layer_len(layer);
  std::vector<double> out(size_t(n_q) * n_heads * d, 0.0);
  std::vector<float> k(d), v(d);
  for (int h = 0; h < H; ++h) {
    std::vector<std::vector<float>> K, V;
    std::vector<int> pos;
    for (int p = 0; p < L; ++p) {
      if (!c.present(p)) continue;
      c.read_token(layer, p, h, k.data(), v.data());
      K.push_back(k); V.push_back(v); pos.push_back(p);
    }
    for (int i = 0; i < n_q; ++i) {
      const int qp = L - n_q + i;
      for (int g = 0; g < rep; ++g) {
        const float* qr = q.data() + (size_t(i) * n_heads + h * rep + g) * d;
        std::vector<double> s(pos.size());
        double mx = -INFINITY;
        for (size_t t = 0; t < pos.size(); ++t) {
          if (!c.visible(pos[t], qp)) { s[t] = -INFINITY; continue; }
          double a = 0;
          for (int j = 0; j < d; ++j) a += double(qr[j]) * K[t][j];
          s[t] = a / std::sqrt(double(d));
          mx = std::max(mx, s[t]);
        }
        double l = 0;
        double* o = out.data() + (size_t(i) * n_heads + h * rep + g) * d;
        for (size_t t = 0; t < pos.size(); ++t) {
          if (s[t] == -INFINITY) continue;
          const double w = std::exp(s[t] - mx);
          l += w;
          for (int j = 0; j < d; ++j) o[j] += w * V[t][j];
        }
        for (int j = 0; j < d; ++j) o[j] /= l;
      }
    }
  }
  return out;
}

struct Case {
  const char* spec;
  int H, rep, d, ctx, n_q;
};

// Appends ctx tokens (the last n_q in one append with the query rows), runs attention before commit,
// and compares with the reference. Returns max |out - ref| / max |ref|.
double run_case(const Case& cs, SimdLevel lvl, ThreadPool& pool, uint64_t seed, std::vector<float>* out_keep = nullptr,
                std::vector<float>* unq_keep = nullptr) {
  const KvShape sh{1, cs.H, cs.d};
  const KvSpec spec = parse_kv_spec(cs.spec);
  KvCache c(sh, spec, cs.ctx + 64, std::max(512, cs.n_q));
  const size_t w = size_t(cs.H) * cs.d;
  // K gets a per-channel offset pattern like real keys; V plain Gaussian.
  int done = 0;
  const int prefix = cs.ctx - cs.n_q;
  while (done < prefix) {
    const int n = std::min(512, prefix - done);
    const auto k = gaussian(n * w, seed + done), v = gaussian(n * w, seed + done + 999);
    c.append(0, n, k.data(), v.data());
    c.commit(n);
    done += n;
  }
  const auto k = gaussian(size_t(cs.n_q) * w, seed + 77), v = gaussian(size_t(cs.n_q) * w, seed + 78);
  c.append(0, cs.n_q, k.data(), v.data());
  const int n_heads = cs.H * cs.rep;
  const auto q = gaussian(size_t(cs.n_q) * n_heads * cs.d, seed + 5, 2.0f);
  std::vector<float> out(q.size(), std::numeric_limits<float>::quiet_NaN());  // poisoned
  attention_at(lvl, c, 0, q.data(), cs.n_q, n_heads, out.data(), pool);
  const auto ref = reference(c, 0, q, cs.n_q, n_heads);
  double err = 0, mag = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i])) return INFINITY;
    err = std::max(err, std::fabs(out[i] - ref[i]));
    mag = std::max(mag, std::fabs(ref[i]));
  }
  if (out_keep) *out_keep = out;
  (void)unq_keep;
  return err / mag;
}

// q8/q4/q4r/tq4 K take the int8 dot path, which quantizes q per 32-block (step max|q|/127); the codec loop
// test bounds that error exactly, here it shows up as a small max-norm error of the output.
constexpr double kIntTol = 5e-2;

bool int_k(const std::string& spec) {
  const std::string k = parse_kv_spec(spec).k;
  return k == "q8" || k == "q4" || k == "q4r" || k == "tq4";
}

TEST(KvAttention, EveryCodecPairMatchesReference) {
  ThreadPool pool(2);
  const char* codecs[] = {"f32", "f16", "bf16", "fp8", "q8", "q4", "q4r", "tq4", "tq3"};
  int i = 0;
  for (const char* kc : codecs)
    for (const char* vc : codecs) {
      const std::string spec = std::string(kc) + "/" + vc;
      // alternate shapes so all combinations are covered without a big grid
      const Case cs{spec.c_str(), 2, (i % 2) ? 4 : 1, (i % 3) ? 64 : 128, 300 + 37 * (i % 5), 1 + (i % 4) * 3};
      ++i;
      for (SimdLevel lvl : {SimdLevel::scalar, simd_level()}) {
        const double e = run_case(cs, lvl, pool, 100 + i);
        const double tol = (lvl != SimdLevel::scalar && int_k(spec)) ? kIntTol : 2e-5;
        EXPECT_LE(e, tol) << spec << " level " << simd_name(lvl) << " d=" << cs.d << " rep=" << cs.rep
                          << " ctx=" << cs.ctx << " n_q=" << cs.n_q;
      }
    }
}

TEST(KvAttention, ContextSizesAndShapes) {
  ThreadPool pool(2);
  const Case cases[] = {
      {"f16", 8, 4, 128, 1, 1},      {"q8", 8, 4, 128, 63, 1},     {"q4", 2, 4, 64, 64, 1},
      {"tq3", 2, 1, 64, 65, 1},      {"q8/q4", 2, 4, 128, 257, 1}, {"fp8", 4, 1, 128, 1000, 1},
      {"q4r", 2, 4, 128, 700, 130},  {"f16", 2, 1, 64, 600, 600},  {"tq4/q8", 2, 4, 64, 3000, 1},
      {"q8", 2, 4, 64, 70001, 1},
      // 2 and 3 query heads per KV head, 3 and 8 scale blocks per row
      {"q8", 2, 2, 128, 333, 1},     {"q4/q8", 2, 3, 96, 200, 1},  {"q8/q4r", 1, 4, 256, 300, 1},
      {"tq4/q4", 2, 2, 128, 150, 1}, {"q4r/fp8", 2, 3, 128, 129, 1},
      // head_dim not a multiple of 16 (stories260K has 8): scalar loops
      {"f16", 4, 2, 8, 300, 1},      {"tq3/fp8", 4, 2, 8, 300, 20}, {"bf16/f32", 2, 4, 40, 129, 3},
  };
  for (const auto& cs : cases) {
    const double e = run_case(cs, simd_level(), pool, 7);
    EXPECT_LE(e, int_k(cs.spec) ? kIntTol : 2e-5) << cs.spec << " ctx=" << cs.ctx << " n_q=" << cs.n_q << " d=" << cs.d;
  }
}

TEST(KvAttention, QuantizedOutputCloseToUnquantized) {
  // Codec error (not kernel error): attention over quantized K/V vs over f32 K/V, same inputs.
  ThreadPool pool(2);
  std::vector<float> ref, out;
  run_case({"f32", 2, 4, 128, 2000, 1}, simd_level(), pool, 9, &ref);
  // Relative RMS error of the output; random K/V make the output an average of many V rows, so it is
  // small and its relative error is much larger than the per-vector codec error.
  struct B { const char* spec; double tol; } bounds[] = {
      {"f16", 2e-3}, {"bf16", 1e-2}, {"fp8", 8e-2}, {"q8", 2e-2}, {"q4r", 0.25}, {"tq4", 0.25}, {"tq3", 0.6}};
  std::vector<double> errs;
  for (const auto& b : bounds) {
    run_case({b.spec, 2, 4, 128, 2000, 1}, simd_level(), pool, 9, &out);
    double err = 0, mag = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      err += (out[i] - ref[i]) * (out[i] - ref[i]);
      mag += ref[i] * ref[i];
    }
    EXPECT_LE(std::sqrt(err / mag), b.tol) << b.spec;
    errs.push_back(std::sqrt(err / mag));
  }
  EXPECT_LT(errs[0], errs[3]);  // f16 < q8
  EXPECT_LT(errs[3], errs[5]);  // q8 < tq4
  EXPECT_LT(errs[5], errs[6]);  // tq4 < tq3
}

TEST(KvAttention, WindowSinksAndRecentPolicies) {
  ThreadPool pool(2);
  for (const char* spec : {"q8,window=300,sinks=4", "f16,window=64", "q4r/q8,recent=200", "tq3,window=500,sinks=70,recent=100"}) {
    const KvShape sh{1, 2, 64};
    KvCache c(sh, parse_kv_spec(spec), 4000);
    const size_t w = 2 * 64;
    // prefill in chunks with attention on each chunk, then decode steps; compare every call
    int pos = 0, step = 0;
    while (pos < 1500) {
      const int n = pos < 1000 ? 250 : 1;
      const auto k = gaussian(n * w, 1000 + pos), v = gaussian(n * w, 2000 + pos);
      c.append(0, n, k.data(), v.data());
      if (n > 1 || step % 50 == 0) {
        const auto q = gaussian(size_t(n) * 8 * 64, 3000 + pos);
        std::vector<float> out(q.size(), std::numeric_limits<float>::quiet_NaN());
        attention(c, 0, q.data(), n, 8, out.data(), pool);
        const auto ref = reference(c, 0, q, n, 8);
        double err = 0, mag = 0;
        for (size_t i = 0; i < out.size(); ++i) {
          ASSERT_TRUE(std::isfinite(out[i])) << spec;
          err = std::max(err, std::fabs(out[i] - ref[i]));
          mag = std::max(mag, std::fabs(ref[i]));
        }
        EXPECT_LE(err / mag, int_k(spec) ? kIntTol : 2e-5) << spec << " pos " << pos;
      }
      c.commit(n);
      pos += n;
      ++step;
    }
  }
}

TEST(KvAttention, ScratchIndependentOfContext) {
  ThreadPool pool(2);
  size_t s2k = 0;
  for (int ctx : {2048, 32768}) {
    const KvShape sh{1, 8, 128};
    KvCache c(sh, parse_kv_spec("q8"), ctx);
    const size_t w = 8 * 128;
    const auto k = gaussian(512 * w, 3);
    for (int done = 0; done < ctx; done += 512) {
      c.append(0, 512, k.data(), k.data());
      c.commit(512);
    }
    const auto q = gaussian(32 * 128, 1);
    std::vector<float> out(q.size());
    attention(c, 0, q.data(), 1, 32, out.data(), pool);
    if (ctx == 2048) s2k = attention_scratch_last();
    else EXPECT_EQ(attention_scratch_last(), s2k);
  }
  EXPECT_GT(s2k, 0u);
  EXPECT_LT(s2k, size_t(1) << 20);
  EXPECT_GE(attention_scratch_peak(), s2k);
}

TEST(KvAttention, BadArguments) {
  ThreadPool pool(1);
  KvCache c(KvShape{1, 2, 64}, parse_kv_spec("f16"), 100);
  const auto x = gaussian(3 * 128, 1);
  c.append(0, 3, x.data(), x.data());
  std::vector<float> q(8 * 64 * 4), out(q.size());
  EXPECT_THROW(attention(c, 0, q.data(), 1, 7, out.data(), pool), Error);   // 7 % 2
  EXPECT_THROW(attention(c, 0, q.data(), 4, 8, out.data(), pool), Error);   // more rows than tokens
  EXPECT_THROW(attention(c, 1, q.data(), 1, 8, out.data(), pool), Error);   // bad layer
}

}  // namespace
}  // namespace kvtax
