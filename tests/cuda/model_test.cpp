// The whole model on the device vs the CPU backend on the same generated GGUF: logits after a prompt and
// after each of several decode steps (teacher-forced, so both walk the same tokens). Skips without a GPU.
//
// The prompt goes through the batched prefill (GEMMs on 16-bit activations, f16 attention tiles), the
// steps through the decode GEMV path. Bound: relative L2 of the logits <= 5e-3 with F16 weights (the token
// path alone gave <= 5.5e-4; the prefill rounds activations to f16), and the same top token wherever the
// CPU's top-2 gap is clear. Both store bit-identical KV rows (CudaKvEncode), so what differs is the f32 summation
// order of GEMV and attention, expf/sinf/cosf ulps, and through them an occasional KV code that rounds the
// other way (H200, 2026-11-30: f16/fp8/tq3 KV <= 7e-6, q8/q4r KV <= 5.5e-4).
// Quantized weights: <= 3e-2, because the activations are rounded differently: the device quantizes x to
// int8 per 32 values with an f32 scale, the CPU per 32 with an f16 scale (Q8_0) or per 256 (Q8_K, for
// the K-quants) as llama.cpp does (measured 5-7e-3 for Q8_0, 1.3-1.5e-2 for Q4_K).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>

#include "core/error.h"
#include "cuda/device_decoder.h"
#include "cuda_test_util.h"
#include "engine/sampler.h"
#include "pick_reference.h"
#include "model/forward.h"
#include "model/make_model.h"

namespace kvtax {
namespace {

using kvtax::testing::rel_l2;

struct Variant {
  const char* name;
  GgmlType type;
  bool llama3_rope, qwen3;
  double bound;
};

std::string make(const Variant& v) {
  MakeModelOptions o;
  o.spec = arch_spec("tiny");  // d 512, ff 1536, 8 heads / 2 KV heads of 64, byte vocab
  o.spec.llama3_rope = v.llama3_rope;
  if (v.qwen3) {  // neox RoPE, per-head q/k RMSNorm, tied output
    o.spec.gguf_arch = "qwen3";
    o.spec.qk_norm = true;
    o.spec.tied_output = true;
  }
  o.n_layers = 2;
  o.type = v.type;
  o.seed = 11;
  o.n_threads = 2;
  o.out_path = (std::filesystem::temp_directory_path() /
                ("kvtax-cuda-model-" + std::string(v.name) + "-" + std::to_string(getpid()) + ".gguf"))
                   .string();
  make_model(o);
  return o.out_path;
}

// Index of the largest value and the gap to the second largest.
std::pair<int, float> top1(const std::vector<float>& l) {
  int best = 0;
  for (int i = 1; i < int(l.size()); ++i)
    if (l[i] > l[best]) best = i;
  float second = -INFINITY;
  for (int i = 0; i < int(l.size()); ++i)
    if (i != best) second = std::max(second, l[i]);
  return {best, l[best] - second};
}

TEST(CudaModel, LogitsMatchCpuBackend) {
  REQUIRE_GPU();
  const Variant variants[] = {{"f16", GgmlType::F16, false, false, 5e-3},
                              {"q4k", GgmlType::Q4_K, false, false, 3e-2},
                              {"f16-llama3rope", GgmlType::F16, true, false, 5e-3},
                              {"q8-qwen3", GgmlType::Q8_0, false, true, 3e-2}};
  const char* codecs[] = {"f16", "fp8", "q8", "q4r", "tq3"};
  const int n_prompt = 289, n_steps = 8;  // the prompt spans two KV pages
  for (const Variant& v : variants) {
    const std::string path = make(v);
    auto model = Model::load(path);
    const int n_vocab = int(model->config().n_vocab);
    std::mt19937 rng(uint32_t(v.type) * 31 + 7);
    std::vector<int32_t> toks(n_prompt + n_steps);
    for (auto& t : toks) t = int32_t(rng() % uint32_t(n_vocab));
    cuda::CudaBackend backend(*model);
    ThreadPool pool(2);
    for (const char* codec : codecs) {
      const KvSpec spec = parse_kv_spec(codec);
      Forward cpu(*model, spec, n_prompt + n_steps, 128, pool);
      auto dev = backend.decoder(spec, n_prompt + n_steps, 0);
      std::vector<float> lc(n_vocab), ld(n_vocab, NAN);
      double worst = 0;
      int positions = 0;
      for (int p = 0; p < n_prompt; p += 128) cpu.eval(toks.data() + p, std::min(128, n_prompt - p), lc.data());
      // The device takes the whole prompt in one eval, prefilled in chunks of 96 rows (batched GEMMs and
      // tensor-core attention; chunks that start mid-page and cross the page boundary at 256), then one of a
      // single row (the f32 norm and products).
      static_cast<cuda::CudaDecoder*>(dev.get())->set_prefill_chunk(96);
      dev->eval(toks.data(), n_prompt, ld.data());
      for (int s = 0;; ++s) {
        for (float x : ld) ASSERT_TRUE(std::isfinite(x)) << v.name << " " << codec << ": non-finite logit";
        const double e = rel_l2(ld, lc);
        worst = std::max(worst, e);
        ++positions;
        EXPECT_LE(e, v.bound) << v.name << " KV " << codec << " step " << s;
        const auto [tc, gap] = top1(lc);
        if (gap > 1e-2f * std::fabs(lc[tc]) + 1e-3f) {
          EXPECT_EQ(top1(ld).first, tc) << v.name << " KV " << codec << " step " << s;
        }
        if (s == n_steps) break;
        cpu.eval(&toks[size_t(n_prompt + s)], 1, lc.data());
        std::fill(ld.begin(), ld.end(), NAN);  // poison: the device must write every logit
        dev->eval(&toks[size_t(n_prompt + s)], 1, ld.data());
      }
      EXPECT_EQ(dev->n_past(), cpu.n_past());
      std::printf("[cuda-model] %-15s KV %-4s: worst rel-L2 of logits over %d positions %.2e\n", v.name, codec,
                  positions, worst);
    }
    std::filesystem::remove(path);
  }
}

// Two decoders of one tiny F16 model fed the same 40 tokens, a 30-token prompt then single steps: step(a, b, tokens,
// n, n_vocab) evaluates both and compares.
template <class Step>
void side_by_side(const char* name, const char* kv, const Step& step) {
  const std::string path = make({name, GgmlType::F16, false, false, 0.0});
  auto model = Model::load(path);
  cuda::CudaBackend backend(*model);
  const int n_vocab = int(model->config().n_vocab);
  auto a = backend.decoder(parse_kv_spec(kv), 64, 0), b = backend.decoder(parse_kv_spec(kv), 64, 0);
  std::vector<int32_t> toks(40);
  for (int i = 0; i < 40; ++i) toks[size_t(i)] = int32_t((i * 37 + 5) % n_vocab);
  for (int at = 0; at < 40; at += at == 0 ? 30 : 1) {
    SCOPED_TRACE(::testing::Message() << "position " << at);
    step(*a, *b, toks.data() + at, at == 0 ? 30 : 1, n_vocab);
  }
  EXPECT_EQ(b->n_past(), 40);
  std::filesystem::remove(path);
}

// eval() into the decoder's own page-locked row (Decoder::logits_row, as generate() reads the logits) leaves the same
// floats as eval() into a buffer of the caller's.
TEST(CudaModel, LogitsRowHoldsTheSameLogits) {
  REQUIRE_GPU();
  side_by_side("row", "fp8", [](DeviceDecoder& a, DeviceDecoder& b, const int32_t* t, int n, int n_vocab) {
    ASSERT_NE(b.logits_row(), nullptr);
    std::vector<float> la(static_cast<size_t>(n_vocab));
    a.eval(t, n, la.data());
    std::fill(b.logits_row(), b.logits_row() + n_vocab, NAN);  // poison
    b.eval(t, n, b.logits_row());
    EXPECT_TRUE(std::equal(la.begin(), la.end(), b.logits_row()));
  });
}

// eval_pick: the token the CPU sampler's argmax picks from eval()'s logits, and the draw the float64 walk makes.
TEST(CudaModel, EvalPickPicksWhatTheLogitsSay) {
  REQUIRE_GPU();
  side_by_side("pick", "f16", [](DeviceDecoder& a, DeviceDecoder& b, const int32_t* t, int n, int n_vocab) {
    ASSERT_TRUE(b.has_pick());
    std::vector<float> la(static_cast<size_t>(n_vocab));
    a.eval(t, n, la.data());
    EXPECT_EQ(b.eval_pick(t, n, TokenPick{}), argmax(la.data(), n_vocab));
  });
  side_by_side("draw", "fp8", [](DeviceDecoder& a, DeviceDecoder& b, const int32_t* t, int n, int n_vocab) {
    std::vector<float> la(static_cast<size_t>(n_vocab));
    a.eval(t, n, la.data());
    const TokenPick p{0.8f, double((t[0] * 7919) % 1000) / 1000.0};
    const testing::DrawReference want = testing::draw_reference(la.data(), n_vocab, p.inv_temperature, p.u);
    const int32_t got = b.eval_pick(t, n, p);
    if (want.margin >= 1e-6) {  // else a running sum within rounding of the target: a neighbour is as right
      EXPECT_EQ(got, want.index) << "u " << p.u;
    }
  });
}

TEST(CudaModel, RejectsWhatTheDeviceDoesNotServe) {
  REQUIRE_GPU();
  const std::string path = make({"reject", GgmlType::F16, false, false, 0.0});
  auto model = Model::load(path);
  cuda::CudaBackend backend(*model);
  EXPECT_THROW(backend.decoder(parse_kv_spec("q8/q4"), 100, 0), Error);           // mixed K/V codecs
  EXPECT_THROW(backend.decoder(parse_kv_spec("f16,window=64"), 100, 0), Error);   // window policy
  EXPECT_THROW(backend.decoder(parse_kv_spec("f16"), 100000, 1 << 20), Error);     // reservation too small
  auto dec = backend.decoder(parse_kv_spec("q8"), 300, 0);
  EXPECT_GE(dec->capacity_tokens(), 300u);
  std::vector<float> logits(model->config().n_vocab);
  const int32_t bad = int32_t(model->config().n_vocab);
  EXPECT_THROW(dec->eval(&bad, 1, logits.data()), Error);
  std::vector<int32_t> many(301, 1);
  EXPECT_THROW(dec->eval(many.data(), 301, logits.data()), Error);  // past the context
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace kvtax
