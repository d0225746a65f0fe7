#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.h"
#include "gguf/gguf.h"
#include "model/config.h"

namespace kvtax {
namespace {

using gguf::Value;

// A tiny model image with zero weights: d 16, 4 heads of 4, 2 KV heads, ff 32, vocab 10.
struct Tiny {
  std::string arch = "llama";
  uint32_t layers = 2, d = 16, heads = 4, kv = 2, ff = 32, vocab = 10;
  bool qk_norm = false, bias = false, tied = false, rope_freqs = false;
  std::vector<std::string> skip;  // tensors to leave out
  std::vector<std::pair<std::string, std::vector<uint64_t>>> reshape;

  gguf::Writer writer() const {
    gguf::Writer w;
    w.set("general.architecture", Value::of_str(arch));
    w.set(arch + ".block_count", Value::of_u32(layers));
    w.set(arch + ".embedding_length", Value::of_u32(d));
    w.set(arch + ".feed_forward_length", Value::of_u32(ff));
    w.set(arch + ".attention.head_count", Value::of_u32(heads));
    w.set(arch + ".attention.head_count_kv", Value::of_u32(kv));
    w.set(arch + ".context_length", Value::of_u32(4096));
    w.set(arch + ".attention.layer_norm_rms_epsilon", Value::of_f32(1e-6f));
    w.set(arch + ".rope.freq_base", Value::of_f32(500000.0f));
    const uint64_t hd = d / heads;
    add(w, "token_embd.weight", {d, vocab});
    add(w, "output_norm.weight", {d});
    if (!tied) add(w, "output.weight", {d, vocab});
    if (rope_freqs) {
      std::vector<uint8_t> f(hd / 2 * 4);
      const float vals[2] = {1.0f, 8.0f};
      std::memcpy(f.data(), vals, 8);
      w.add_tensor("rope_freqs.weight", GgmlType::F32, {hd / 2}, f);
    }
    for (uint32_t l = 0; l < layers; ++l) {
      const std::string b = "blk." + std::to_string(l) + ".";
      add(w, b + "attn_norm.weight", {d});
      add(w, b + "attn_q.weight", {d, heads * hd});
      add(w, b + "attn_k.weight", {d, kv * hd});
      add(w, b + "attn_v.weight", {d, kv * hd});
      add(w, b + "attn_output.weight", {heads * hd, d});
      add(w, b + "ffn_norm.weight", {d});
      add(w, b + "ffn_gate.weight", {d, ff});
      add(w, b + "ffn_up.weight", {d, ff});
      add(w, b + "ffn_down.weight", {ff, d});
      if (qk_norm) {
        add(w, b + "attn_q_norm.weight", {hd});
        add(w, b + "attn_k_norm.weight", {hd});
      }
      if (bias) {
        add(w, b + "attn_q.bias", {heads * hd});
        add(w, b + "attn_k.bias", {kv * hd});
        add(w, b + "attn_v.bias", {kv * hd});
      }
    }
    return w;
  }
  void add(gguf::Writer& w, const std::string& name, std::vector<uint64_t> ne) const {
    if (std::find(skip.begin(), skip.end(), name) != skip.end()) return;
    for (const auto& [n, shape] : reshape)
      if (n == name) ne = shape;
    uint64_t n = 1;
    for (auto x : ne) n *= x;
    w.add_tensor(name, GgmlType::F32, ne, std::vector<uint8_t>(n * 4));
  }
};

std::string config_error(const gguf::Writer& w) {
  const auto bytes = w.to_bytes();
  const auto f = gguf::File::parse(bytes, "m.gguf");
  try {
    read_config(*f);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

ModelConfig config_of(const gguf::Writer& w) {
  const auto bytes = w.to_bytes();
  return read_config(*gguf::File::parse(bytes, "m.gguf"));
}

TEST(Config, Stories260K) {
  const std::string path = std::string(KVTAX_SHARED_DIR) + "/fixtures/stories260K.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "../shared absent: " << path;
  const auto f = gguf::File::open(path);
  const ModelConfig c = read_config(*f);
  EXPECT_EQ(c.arch, "llama");
  EXPECT_EQ(c.d_model, 64u);
  EXPECT_EQ(c.n_layers, 5u);
  EXPECT_EQ(c.n_heads, 8u);
  EXPECT_EQ(c.n_kv_heads, 4u);
  EXPECT_EQ(c.head_dim, 8u);
  EXPECT_EQ(c.d_ff, 172u);
  EXPECT_EQ(c.n_vocab, 512u);
  EXPECT_EQ(c.context_length, 2048u);
  EXPECT_EQ(c.rope_dim, 8u);
  EXPECT_FLOAT_EQ(c.rms_eps, 1e-5f);
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  EXPECT_EQ(c.rope_kind, RopeKind::normal);
  EXPECT_EQ(c.rope_scaling.type, "none");
  EXPECT_FALSE(c.qk_norm);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.tied_output);
  EXPECT_EQ(c.kv_bytes_per_token(2), 2u * 5 * 4 * 8 * 2);
}

TEST(Config, TinyLlamaDefaultsAndFlags) {
  Tiny t;
  ModelConfig c = config_of(t.writer());
  EXPECT_EQ(c.head_dim, 4u);
  EXPECT_EQ(c.rope_dim, 4u);
  EXPECT_EQ(c.n_vocab, 10u);
  EXPECT_FLOAT_EQ(c.rope_theta, 500000.0f);
  EXPECT_FLOAT_EQ(c.rms_eps, 1e-6f);
  EXPECT_EQ(c.rope_kind, RopeKind::normal);

  t.arch = "qwen3";
  t.qk_norm = true;
  t.tied = true;
  c = config_of(t.writer());
  EXPECT_EQ(c.rope_kind, RopeKind::neox);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_TRUE(c.tied_output);
  EXPECT_FALSE(c.qkv_bias);

  t.arch = "qwen2";
  t.qk_norm = false;
  t.bias = true;
  c = config_of(t.writer());
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_EQ(c.rope_kind, RopeKind::neox);
}

TEST(Config, Llama3RopeFreqs) {
  Tiny t;
  t.rope_freqs = true;
  const ModelConfig c = config_of(t.writer());
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_FLOAT_EQ(c.rope_scaling.factor, 8.0f);
  EXPECT_EQ(c.rope_scaling.freq_factors, (std::vector<float>{1.0f, 8.0f}));
}

TEST(Config, HeadDimFromKeyLength) {
  Tiny t;
  t.heads = 2;  // head_dim from key_length = 4, so q is 8 wide while d is 16
  t.kv = 1;
  auto w = t.writer();
  w.set("llama.attention.key_length", Value::of_u32(8));
  w.set("llama.attention.value_length", Value::of_u32(8));
  const ModelConfig c = config_of(w);
  EXPECT_EQ(c.head_dim, 8u);
}

TEST(Config, Errors) {
  Tiny t;
  {
    auto w = t.writer();
    w.set("general.architecture", Value::of_str("gpt2"));
    EXPECT_NE(config_error(w).find("unsupported architecture 'gpt2'"), std::string::npos);
  }
  {
    Tiny u = t;
    u.kv = 3;
    EXPECT_NE(config_error(u.writer()).find("not a multiple of head_count_kv 3"), std::string::npos);
  }
  {
    auto w = t.writer();
    w.set("llama.block_count", Value::of_str("2"));
    EXPECT_NE(config_error(w).find("llama.block_count"), std::string::npos);
  }
  {
    auto w = t.writer();
    w.set("llama.block_count", Value::of_u32(3));
    EXPECT_NE(config_error(w).find("missing tensor 'blk.2.attn_norm.weight'"), std::string::npos);
  }
  {
    auto w = t.writer();
    w.set("llama.block_count", Value::of_u32(1));
    EXPECT_NE(config_error(w).find("blk.1.attn_q.weight' exists"), std::string::npos);
  }
  {
    Tiny u = t;
    u.reshape = {{"blk.1.ffn_down.weight", {16, 32}}};
    const std::string e = config_error(u.writer());
    EXPECT_NE(e.find("tensor 'blk.1.ffn_down.weight' has shape [16, 32], expected [32, 16]"), std::string::npos) << e;
  }
  {
    Tiny u = t;
    u.skip = {"token_embd.weight"};
    EXPECT_NE(config_error(u.writer()).find("missing tensor 'token_embd.weight'"), std::string::npos);
  }
  {
    auto w = t.writer();
    w.set("llama.vocab_size", Value::of_u32(11));
    EXPECT_NE(config_error(w).find("vocab_size 11"), std::string::npos);
  }
  {
    auto w = t.writer();
    w.set("llama.rope.scaling.type", Value::of_str("su"));
    EXPECT_NE(config_error(w).find("rope scaling type 'su'"), std::string::npos);
  }
  {
    auto w = t.writer();
    w.set("llama.rope.dimension_count", Value::of_u32(6));
    EXPECT_NE(config_error(w).find("rope.dimension_count 6"), std::string::npos);
  }
  {
    gguf::Writer w;
    w.set("general.architecture", Value::of_str("llama"));
    EXPECT_NE(config_error(w).find("missing metadata key 'llama.block_count'"), std::string::npos);
  }
}

}  // namespace
}  // namespace kvtax
