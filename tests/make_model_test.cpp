#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "core/error.h"
#include "ggml/quants.h"
#include "gguf/gguf.h"
#include "model/config.h"
#include "model/make_model.h"

namespace kvtax {
namespace {

namespace fs = std::filesystem;
using gguf::Value;

// Per-process names: several checkouts may run this suite at the same time.
std::string tmp(const std::string& name) {
  return ::testing::TempDir() + "/kvtax_mm_" + std::to_string(::getpid()) + "_" + name;
}

// A 64-token vocab file so tests do not pay for 150k-row embeddings.
const std::string& tiny_vocab() {
  static const std::string path = [] {
    gguf::Writer w;
    std::vector<std::string> toks;
    std::vector<float> scores;
    std::vector<int32_t> types;
    for (int i = 0; i < 64; ++i) {
      toks.push_back("t" + std::to_string(i));
      scores.push_back(-float(i));
      types.push_back(1);
    }
    w.set("general.architecture", Value::of_str("llama"));
    w.set("tokenizer.ggml.model", Value::of_str("llama"));
    w.set("tokenizer.ggml.pre", Value::of_str("default"));
    w.set("tokenizer.ggml.tokens", Value::of_strings(toks));
    w.set("tokenizer.ggml.scores", Value::of_f32s(scores));
    w.set("tokenizer.ggml.token_type", Value::of_i32s(types));
    w.set("tokenizer.ggml.bos_token_id", Value::of_u32(1));
    const std::string p = tmp("vocab.gguf");
    w.write(p);
    return p;
  }();
  return path;
}

// The real head geometry with a narrow residual stream and FFN, so a model costs a few MB.
ArchSpec small(const std::string& id) {
  ArchSpec s = arch_spec(id);
  s.d_model = 256;
  s.d_ff = 512;
  return s;
}

MakeModelOptions opts(const ArchSpec& s, GgmlType t, uint64_t seed, const std::string& out, uint32_t layers = 2) {
  MakeModelOptions o;
  o.spec = s;
  o.n_layers = layers;
  o.type = t;
  o.seed = seed;
  o.vocab_path = tiny_vocab();
  o.out_path = out;
  return o;
}

std::vector<char> slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

std::vector<float> to_f32(const gguf::File& f, const std::string& name) {
  const auto* t = f.tensor(name);
  EXPECT_NE(t, nullptr) << name;
  if (!t) return {};
  std::vector<float> out(t->n_elements());
  dequantize_row(t->type, f.tensor_data(*t).data(), out.data(), int64_t(out.size()));
  return out;
}

void mean_std(const std::vector<float>& v, double& mean, double& sd) {
  double s = 0, s2 = 0;
  for (float x : v) s += x, s2 += double(x) * x;
  mean = s / v.size();
  sd = std::sqrt(s2 / v.size() - mean * mean);
}

TEST(MakeModel, RealSpecs) {
  const ArchSpec& l = arch_spec("llama3-8b");
  EXPECT_EQ(l.gguf_arch, "llama");
  EXPECT_EQ(std::tuple(l.d_model, l.d_ff, l.n_heads, l.n_kv_heads, l.head_dim, l.n_vocab, l.context),
            std::tuple(4096u, 14336u, 32u, 8u, 128u, 128256u, 131072u));
  EXPECT_TRUE(l.llama3_rope);
  const ArchSpec& q3 = arch_spec("qwen3-4b");
  EXPECT_EQ(std::tuple(q3.d_model, q3.d_ff, q3.n_heads, q3.n_kv_heads, q3.head_dim, q3.n_vocab, q3.context),
            std::tuple(2560u, 9728u, 32u, 8u, 128u, 151936u, 40960u));
  EXPECT_TRUE(q3.qk_norm && q3.tied_output);
  const ArchSpec& q2 = arch_spec("qwen2.5-7b");
  EXPECT_EQ(std::tuple(q2.d_model, q2.d_ff, q2.n_heads, q2.n_kv_heads, q2.n_vocab, q2.context),
            std::tuple(3584u, 18944u, 28u, 4u, 152064u, 32768u));
  EXPECT_TRUE(q2.qkv_bias);
  const ArchSpec& m = arch_spec("mistral-7b");
  EXPECT_EQ(m.gguf_arch, "llama");
  EXPECT_EQ(std::tuple(m.n_vocab, m.context, m.rope_theta), std::tuple(32768u, 32768u, 1000000.0f));
  EXPECT_THROW(arch_spec("gpt-5"), Error);
}

TEST(MakeModel, Llama3RopeFactorsMatchConverter) {
  const auto f = llama3_rope_factors(128, 500000.0f, 8.0f, 1.0f, 4.0f, 8192);
  ASSERT_EQ(f.size(), 64u);
  // Values from the converter's formula evaluated in Python (float64).
  const std::pair<int, float> mid[] = {{29, 1.207484f}, {30, 1.553415f}, {31, 2.026313f},
                                       {32, 2.694530f}, {33, 3.684253f}, {34, 5.257327f}};
  for (auto [i, v] : mid) EXPECT_NEAR(f[i], v, 1e-5) << i;
  for (int i = 0; i < 29; ++i) EXPECT_EQ(f[i], 1.0f) << i;
  for (int i = 35; i < 64; ++i) EXPECT_EQ(f[i], 8.0f) << i;
}

TEST(MakeModel, EachArchReadsBackWithItsConfig) {
  for (const auto& spec : arch_specs()) {
    SCOPED_TRACE(spec.id);
    const std::string out = tmp(spec.id + ".gguf");
    const auto r = make_model(opts(small(spec.id), GgmlType::Q8_0, 7, out));
    EXPECT_EQ(r.n_vocab, 64u);
    ASSERT_EQ(r.notes.size(), 1u);  // 64 tokens differ from the real vocab size
    const auto f = gguf::File::open(out);
    const ModelConfig c = read_config(*f);
    EXPECT_EQ(c.arch, spec.gguf_arch);
    EXPECT_EQ(c.n_layers, 2u);
    EXPECT_EQ(c.d_model, 256u);
    EXPECT_EQ(c.n_heads, spec.n_heads);
    EXPECT_EQ(c.n_kv_heads, spec.n_kv_heads);
    EXPECT_EQ(c.head_dim, spec.head_dim);
    EXPECT_EQ(c.n_vocab, 64u);
    EXPECT_EQ(c.context_length, spec.context);
    EXPECT_FLOAT_EQ(c.rope_theta, spec.rope_theta);
    EXPECT_FLOAT_EQ(c.rms_eps, spec.rms_eps);
    EXPECT_EQ(c.qk_norm, spec.qk_norm);
    EXPECT_EQ(c.qkv_bias, spec.qkv_bias);
    EXPECT_EQ(c.tied_output, spec.tied_output);
    EXPECT_EQ(c.rope_kind, spec.gguf_arch == "llama" ? RopeKind::normal : RopeKind::neox);
    EXPECT_EQ(c.rope_scaling.type, spec.llama3_rope ? "llama3" : "none");
    if (spec.llama3_rope) { EXPECT_FLOAT_EQ(c.rope_scaling.factor, 8.0f); }
    EXPECT_EQ(f->tensor("blk.1.attn_q.weight")->type, GgmlType::Q8_0);
    EXPECT_EQ(f->tensor("token_embd.weight")->type, GgmlType::Q8_0);
    EXPECT_EQ(f->tensor("blk.0.ffn_norm.weight")->type, GgmlType::F32);
    EXPECT_EQ(f->get_string("tokenizer.ggml.model"), "llama");
    EXPECT_EQ(f->get_strings("tokenizer.ggml.tokens")->size(), 64u);
    EXPECT_EQ(f->get_uint("general.file_type"), 7u);
    fs::remove(out);
  }
}

TEST(MakeModel, DeterministicAcrossRunsAndThreads) {
  const ArchSpec s = small("qwen2.5-7b");
  const std::string a = tmp("a.gguf"), b = tmp("b.gguf"), c = tmp("c.gguf");
  auto o = opts(s, GgmlType::F16, 42, a);
  o.n_threads = 1;
  make_model(o);
  o.out_path = b;
  o.n_threads = 2;
  make_model(o);
  EXPECT_TRUE(slurp(a) == slurp(b)) << "same seed, different thread count";
  o.seed = 43;
  o.out_path = c;
  make_model(o);
  const auto fa = gguf::File::open(a), fc = gguf::File::open(c);
  for (const auto& t : fa->tensors()) {
    if (t.name == "rope_freqs.weight") continue;
    const auto x = fa->tensor_data(t), y = fc->tensor_data(*fc->tensor(t.name));
    EXPECT_FALSE(std::equal(x.begin(), x.end(), y.begin())) << t.name << " same for seeds 42 and 43";
  }
  // Distinct tensors of the same shape must not repeat each other.
  const auto k = fa->tensor_data(*fa->tensor("blk.0.attn_k.weight")), v = fa->tensor_data(*fa->tensor("blk.0.attn_v.weight"));
  EXPECT_FALSE(std::equal(k.begin(), k.end(), v.begin()));
  for (const auto& p : {a, b, c}) fs::remove(p);
}

TEST(MakeModel, WeightScales) {
  const std::string out = tmp("scales.gguf");
  make_model(opts(small("llama3-8b"), GgmlType::F32, 3, out, 4));
  const auto f = gguf::File::open(out);
  double m, sd;
  mean_std(to_f32(*f, "token_embd.weight"), m, sd);
  EXPECT_NEAR(m, 0, 0.02);
  EXPECT_NEAR(sd, 1.0, 0.02);
  mean_std(to_f32(*f, "blk.2.attn_q.weight"), m, sd);
  EXPECT_NEAR(sd, 1 / std::sqrt(256.0), 0.02 / 16);
  mean_std(to_f32(*f, "blk.3.ffn_down.weight"), m, sd);
  EXPECT_NEAR(sd, 1 / std::sqrt(512.0 * 2 * 4), 0.02 / std::sqrt(512.0 * 8));
  mean_std(to_f32(*f, "blk.0.attn_output.weight"), m, sd);
  EXPECT_NEAR(sd, 1 / std::sqrt(4096.0 * 2 * 4), 0.02 / std::sqrt(4096.0 * 8));
  mean_std(to_f32(*f, "blk.1.attn_norm.weight"), m, sd);
  EXPECT_NEAR(m, 1.0, 0.01);
  EXPECT_NEAR(sd, 0.02, 0.005);
  mean_std(to_f32(*f, "output.weight"), m, sd);
  EXPECT_NEAR(sd, 1 / 16.0, 0.01);
  fs::remove(out);
}

TEST(MakeModel, TypesAgreeWithF32) {
  const ArchSpec s = small("mistral-7b");
  const std::string ref = tmp("ref.gguf");
  make_model(opts(s, GgmlType::F32, 5, ref, 1));
  const auto fr = gguf::File::open(ref);
  const auto want = to_f32(*fr, "blk.0.ffn_up.weight");
  for (GgmlType t : {GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0}) {
    SCOPED_TRACE(std::string(ggml_type_name(t)));
    const std::string out = tmp("typed.gguf");
    make_model(opts(s, t, 5, out, 1));
    const auto f = gguf::File::open(out);
    EXPECT_EQ(f->tensor("blk.0.ffn_up.weight")->type, t);
    const auto got = to_f32(*f, "blk.0.ffn_up.weight");
    ASSERT_EQ(got.size(), want.size());
    double err = 0, ref2 = 0;
    for (size_t i = 0; i < got.size(); ++i) err += (got[i] - want[i]) * double(got[i] - want[i]), ref2 += want[i] * double(want[i]);
    const double rel = std::sqrt(err / ref2);
    EXPECT_LT(rel, t == GgmlType::Q4_0 ? 0.15 : t == GgmlType::Q8_0 ? 0.01 : 0.005);
    EXPECT_GT(rel, 0.0);
    fs::remove(out);
  }
  fs::remove(ref);
}

TEST(MakeModel, BadOptions) {
  fs::remove(tmp("bad.gguf"));
  auto o = opts(small("qwen3-4b"), GgmlType::IQ2_XXS, 1, tmp("bad.gguf"));
  EXPECT_THROW(make_model(o), Error);  // type not offered
  o.type = GgmlType::F16;
  o.n_layers = 0;
  EXPECT_THROW(make_model(o), Error);
  o.n_layers = 1;
  o.vocab_path = "/nonexistent/vocab.gguf";
  EXPECT_THROW(make_model(o), Error);
  gguf::Writer w;  // a GGUF without tokens
  w.set("general.architecture", Value::of_str("llama"));
  w.write(tmp("notok.gguf"));
  o.vocab_path = tmp("notok.gguf");
  try {
    make_model(o);
    ADD_FAILURE() << "vocab without tokens accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.tokens"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(tmp("bad.gguf")));
}

// Full-size qwen3-4b block through the CLI, then `inspect`.
TEST(MakeModel, CliFullSizeQwen3) {
  const std::string out = tmp("cli.gguf");
  const std::string cmd = std::string(KVTAX_BINARY) + " make-model --arch qwen3-4b --layers 1 --type q4_0 --seed 9 --vocab " +
                          tiny_vocab() + " -o " + out + " > " + tmp("cli.txt") + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const auto f = gguf::File::open(out);
  const ModelConfig c = read_config(*f);
  EXPECT_EQ(std::tuple(c.d_model, c.d_ff, c.n_heads, c.n_kv_heads, c.head_dim), std::tuple(2560u, 9728u, 32u, 8u, 128u));
  EXPECT_EQ(f->tensor("blk.0.ffn_down.weight")->ne, (std::vector<uint64_t>{9728, 2560}));
  const std::string insp = std::string(KVTAX_BINARY) + " inspect " + out + " > " + tmp("insp.txt");
  ASSERT_EQ(std::system(insp.c_str()), 0);
  const auto text = slurp(tmp("insp.txt"));
  const std::string s(text.begin(), text.end());
  EXPECT_NE(s.find("layers 1  d_model 2560  d_ff 9728  heads 32  kv heads 8  head dim 128  vocab 64"), std::string::npos) << s;
  EXPECT_NE(s.find("KV cache (f16): 4.00 KiB per token"), std::string::npos) << s;  // K+V x 1 layer x 8 x 128 x 2 B
  const std::string bad = std::string(KVTAX_BINARY) + " make-model --arch nope --layers 1 -o " + out + " 2>/dev/null";
  EXPECT_NE(std::system(bad.c_str()), 0);
  for (const auto& p : {out, tmp("cli.txt"), tmp("insp.txt")}) fs::remove(p);
}

}  // namespace
}  // namespace kvtax
