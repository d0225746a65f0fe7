// Model hyper-parameters from GGUF metadata, cross-checked against the tensor shapes so a bad file
// fails here with a clear message instead of deep inside the forward pass.
#include "model/config.h"

#include <cmath>
#include <cstring>

#include "core/error.h"

namespace kvtax {
namespace {

struct Reader {
  const gguf::File& f;
  std::string arch;

  std::string key(std::string_view suffix) const { return arch + "." + std::string(suffix); }

  uint32_t u32(std::string_view suffix, std::optional<uint32_t> def = std::nullopt) const {
    const std::string k = key(suffix);
    const auto v = f.get_uint(k);
    if (!v) {
      if (def) return *def;
      fail("{}: missing metadata key '{}'", f.path(), k);
    }
    if (*v > UINT32_MAX) fail("{}: key '{}' value {} is too large", f.path(), k, *v);
    return uint32_t(*v);
  }

  float f32(std::string_view suffix, float def) const {
    const auto v = f.get_float(key(suffix));
    return v ? float(*v) : def;
  }
};

[[noreturn]] void bad_shape(const gguf::File& f, const gguf::TensorInfo& t, const std::vector<uint64_t>& want) {
  fail("{}: tensor '{}' has shape [{}], expected [{}] from the metadata", f.path(), t.name, fmt::join(t.ne, ", "),
       fmt::join(want, ", "));
}

void expect_shape(const gguf::File& f, const std::string& name, const std::vector<uint64_t>& want) {
  const gguf::TensorInfo* t = f.tensor(name);
  if (!t) fail("{}: missing tensor '{}'", f.path(), name);
  if (t->ne != want) bad_shape(f, *t, want);
}

void read_llama3_factors(const gguf::File& f, const gguf::TensorInfo& t, ModelConfig& c) {
  if (t.ne != std::vector<uint64_t>{c.rope_dim / 2}) bad_shape(f, t, {c.rope_dim / 2});
  if (t.type != GgmlType::F32) fail("{}: tensor 'rope_freqs.weight' must be f32, not {}", f.path(), ggml_type_name(t.type));
  const auto bytes = f.tensor_data(t);
  c.rope_scaling.freq_factors.resize(t.ne[0]);
  std::memcpy(c.rope_scaling.freq_factors.data(), bytes.data(), bytes.size());
  float mx = 0;
  for (float x : c.rope_scaling.freq_factors) {
    if (!std::isfinite(x) || x <= 0) fail("{}: tensor 'rope_freqs.weight' holds {} (factors must be > 0)", f.path(), x);
    mx = std::max(mx, x);
  }
  c.rope_scaling.type = "llama3";
  c.rope_scaling.factor = mx;  // the longest wavelengths are divided by the full factor
}

}  // namespace

bool is_supported_arch(std::string_view arch) { return arch == "llama" || arch == "qwen2" || arch == "qwen3"; }

RopeKind rope_kind_for_arch(std::string_view arch) {
  // llama.cpp rotates adjacent pairs for llama-family models and first/second halves for the qwen family.
  return (arch == "qwen2" || arch == "qwen3" || arch == "qwen2moe" || arch == "qwen3moe") ? RopeKind::neox
                                                                                          : RopeKind::normal;
}

std::string_view rope_kind_name(RopeKind k) { return k == RopeKind::neox ? "neox" : "normal"; }

ModelConfig read_config(const gguf::File& f) {
  ModelConfig c;
  const auto arch = f.get_string("general.architecture");
  if (!arch) fail("{}: missing metadata key 'general.architecture'", f.path());
  if (!is_supported_arch(*arch))
    fail("{}: unsupported architecture '{}' (supported: llama, qwen2, qwen3; mistral uses llama)", f.path(), *arch);
  c.arch = *arch;
  c.name = f.get_string("general.name").value_or("");
  Reader r{f, c.arch};

  c.n_layers = r.u32("block_count");
  c.d_model = r.u32("embedding_length");
  c.d_ff = r.u32("feed_forward_length");
  c.n_heads = r.u32("attention.head_count");
  c.n_kv_heads = r.u32("attention.head_count_kv", c.n_heads);
  if (c.n_layers == 0 || c.d_model == 0 || c.d_ff == 0 || c.n_heads == 0 || c.n_kv_heads == 0)
    fail("{}: block_count, embedding_length, feed_forward_length and head counts must be > 0 "
         "(got {}, {}, {}, {}, {})", f.path(), c.n_layers, c.d_model, c.d_ff, c.n_heads, c.n_kv_heads);
  if (c.n_heads % c.n_kv_heads)
    fail("{}: head_count {} is not a multiple of head_count_kv {}", f.path(), c.n_heads, c.n_kv_heads);
  if (!f.find(r.key("attention.key_length")) && c.d_model % c.n_heads)
    fail("{}: embedding_length {} is not a multiple of head_count {} and key_length is absent", f.path(), c.d_model,
         c.n_heads);
  c.head_dim = r.u32("attention.key_length", c.d_model / c.n_heads);
  const uint32_t v_len = r.u32("attention.value_length", c.head_dim);
  if (v_len != c.head_dim)
    fail("{}: value_length {} differs from key_length {} (not supported)", f.path(), v_len, c.head_dim);
  if (c.head_dim == 0 || c.head_dim % 2) fail("{}: head dimension {} must be even and > 0", f.path(), c.head_dim);
  c.context_length = r.u32("context_length", 0);
  c.rms_eps = r.f32("attention.layer_norm_rms_epsilon", 1e-5f);
  if (!(c.rms_eps > 0 && c.rms_eps < 1)) fail("{}: rms epsilon {} is out of range", f.path(), c.rms_eps);
  c.rope_theta = r.f32("rope.freq_base", 10000.0f);
  if (!(c.rope_theta > 1)) fail("{}: rope.freq_base {} must be > 1", f.path(), c.rope_theta);
  c.rope_dim = r.u32("rope.dimension_count", c.head_dim);
  if (c.rope_dim == 0 || c.rope_dim > c.head_dim || c.rope_dim % 2)
    fail("{}: rope.dimension_count {} must be even and in 1..{}", f.path(), c.rope_dim, c.head_dim);
  c.rope_kind = rope_kind_for_arch(c.arch);

  if (auto t = f.get_string(r.key("rope.scaling.type"))) {
    if (*t != "none" && *t != "linear" && *t != "yarn")
      fail("{}: rope scaling type '{}' is not supported (none, linear, yarn)", f.path(), *t);
    c.rope_scaling.type = *t;
  }
  c.rope_scaling.factor = r.f32("rope.scaling.factor", 1.0f);
  c.rope_scaling.original_context = r.u32("rope.scaling.original_context_length", 0);
  if (c.rope_scaling.factor == 0) c.rope_scaling.factor = 1.0f;  // llama.cpp treats 0 as "no scaling"
  if (!(c.rope_scaling.factor > 0)) fail("{}: rope scaling factor {} must be > 0", f.path(), c.rope_scaling.factor);
  if (const auto* t = f.tensor("rope_freqs.weight")) read_llama3_factors(f, *t, c);

  const gguf::TensorInfo* emb = f.tensor("token_embd.weight");
  if (!emb) fail("{}: missing tensor 'token_embd.weight'", f.path());
  if (emb->ne.size() != 2 || emb->ne[0] != c.d_model)
    fail("{}: tensor 'token_embd.weight' has shape [{}], expected [{}, n_vocab]", f.path(), fmt::join(emb->ne, ", "),
         c.d_model);
  if (emb->ne[1] > UINT32_MAX) fail("{}: vocabulary of {} tokens is too large", f.path(), emb->ne[1]);
  c.n_vocab = uint32_t(emb->ne[1]);
  if (auto vs = f.get_uint(r.key("vocab_size")); vs && *vs != c.n_vocab)
    fail("{}: {}.vocab_size {} differs from token_embd.weight rows {}", f.path(), c.arch, *vs, c.n_vocab);

  c.qk_norm = f.tensor("blk.0.attn_q_norm.weight") != nullptr;
  c.qkv_bias = f.tensor("blk.0.attn_q.bias") != nullptr;
  c.tied_output = f.tensor("output.weight") == nullptr;

  const uint64_t d = c.d_model, q = uint64_t(c.n_heads) * c.head_dim, kv = uint64_t(c.n_kv_heads) * c.head_dim;
  expect_shape(f, "output_norm.weight", {d});
  if (!c.tied_output) expect_shape(f, "output.weight", {d, c.n_vocab});
  for (uint32_t l = 0; l < c.n_layers; ++l) {
    const std::string b = fmt::format("blk.{}.", l);
    expect_shape(f, b + "attn_norm.weight", {d});
    expect_shape(f, b + "attn_q.weight", {d, q});
    expect_shape(f, b + "attn_k.weight", {d, kv});
    expect_shape(f, b + "attn_v.weight", {d, kv});
    expect_shape(f, b + "attn_output.weight", {q, d});
    expect_shape(f, b + "ffn_norm.weight", {d});
    expect_shape(f, b + "ffn_gate.weight", {d, c.d_ff});
    expect_shape(f, b + "ffn_up.weight", {d, c.d_ff});
    expect_shape(f, b + "ffn_down.weight", {c.d_ff, d});
    if (c.qk_norm) {
      expect_shape(f, b + "attn_q_norm.weight", {c.head_dim});
      expect_shape(f, b + "attn_k_norm.weight", {c.head_dim});
    }
    if (c.qkv_bias) {
      expect_shape(f, b + "attn_q.bias", {q});
      expect_shape(f, b + "attn_k.bias", {kv});
      expect_shape(f, b + "attn_v.bias", {kv});
    }
  }
  if (f.tensor(fmt::format("blk.{}.attn_q.weight", c.n_layers)))
    fail("{}: tensor 'blk.{}.attn_q.weight' exists but block_count is {}", f.path(), c.n_layers, c.n_layers);
  return c;
}

}  // namespace kvtax
