#include "model/model.h"

#include <malloc.h>

#include <fmt/format.h>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace kvtax {
namespace {

struct Loader {
  const gguf::File& f;
  size_t bytes = 0;

  const gguf::TensorInfo& info(const std::string& name, std::vector<uint64_t> ne) {
    const gguf::TensorInfo* t = f.tensor(name);
    if (!t) fail("{}: missing tensor '{}'", f.path(), name);
    if (t->ne != ne)
      fail("{}: tensor '{}' has shape [{}], expected [{}]", f.path(), name, fmt::join(t->ne, ", "), fmt::join(ne, ", "));
    bytes += t->nbytes;
    return *t;
  }
  bool has(const std::string& name) const { return f.tensor(name) != nullptr; }

  // A matrix [rows x cols] (ne = {cols, rows}) in any type the matmul kernels support.
  Weight matrix(const std::string& name, uint64_t cols, uint64_t rows) {
    const auto& t = info(name, {cols, rows});
    if (!matmul_supported(t.type))
      fail("{}: tensor '{}' has type {}, which kvtax cannot multiply (supported: f32, f16, bf16, q8_0, q4_0, q4_K, "
           "q5_K, q6_K)", f.path(), name, ggml_type_name(t.type));
    return Weight{t.type, f.tensor_data(t).data(), int64_t(rows), int64_t(cols)};
  }
  // A vector of n f32 values (norm weights, biases, rope factors).
  const float* vec(const std::string& name, uint64_t n) {
    const auto& t = info(name, {n});
    if (t.type != GgmlType::F32) fail("{}: tensor '{}' must be f32, is {}", f.path(), name, ggml_type_name(t.type));
    return reinterpret_cast<const float*>(f.tensor_data(t).data());
  }
};

}  // namespace

Model::~Model() = default;

std::unique_ptr<Model> Model::load(const std::string& path) {
  std::unique_ptr<Model> m(new Model());
  m->file_ = gguf::File::open(path);
  const gguf::File& f = *m->file_;
  m->config_ = read_config(f);
  const ModelConfig& c = m->config_;
  if (c.arch != "llama" && c.arch != "qwen2" && c.arch != "qwen3")
    fail("{}: architecture '{}' is not supported (llama, qwen2, qwen3)", path, c.arch);
  if (c.head_dim > 1024 || (c.rope_dim ? c.rope_dim : c.head_dim) > c.head_dim)
    fail("{}: head_dim {} / rope dims {} out of range", path, c.head_dim, c.rope_dim);
  m->tokenizer_ = tok::Tokenizer::from_gguf(f);
  // The tokenizer holds its own copy; as metadata Values these arrays would stay resident all run.
  for (const char* k : {"tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.scores",
                        "tokenizer.ggml.token_type"})
    m->file_->release_array(k);
  malloc_trim(0);  // hand the freed metadata pages back to the OS instead of keeping them in malloc's arenas
  f.drop_header_pages();

  Loader L{f};
  const uint64_t d = c.d_model, hd = c.head_dim, q_dim = uint64_t(c.n_heads) * hd,
                 kv_dim = uint64_t(c.n_kv_heads) * hd, ff = c.d_ff;
  m->token_embd_ = L.matrix("token_embd.weight", d, c.n_vocab);
  if (const gguf::TensorInfo* t = f.tensor("token_embd.weight")) f.advise_random(*t);
  for (uint32_t i = 0; i < c.n_layers; ++i) {
    const std::string p = fmt::format("blk.{}.", i);
    LayerWeights w;
    w.attn_norm = L.vec(p + "attn_norm.weight", d);
    w.wq = L.matrix(p + "attn_q.weight", d, q_dim);
    w.wk = L.matrix(p + "attn_k.weight", d, kv_dim);
    w.wv = L.matrix(p + "attn_v.weight", d, kv_dim);
    w.wo = L.matrix(p + "attn_output.weight", q_dim, d);
    if (c.qkv_bias) {
      w.bq = L.vec(p + "attn_q.bias", q_dim);
      w.bk = L.vec(p + "attn_k.bias", kv_dim);
      w.bv = L.vec(p + "attn_v.bias", kv_dim);
    }
    if (c.qk_norm) {
      w.q_norm = L.vec(p + "attn_q_norm.weight", hd);
      w.k_norm = L.vec(p + "attn_k_norm.weight", hd);
    }
    w.ffn_norm = L.vec(p + "ffn_norm.weight", d);
    w.w_gate = L.matrix(p + "ffn_gate.weight", d, ff);
    w.w_up = L.matrix(p + "ffn_up.weight", d, ff);
    w.w_down = L.matrix(p + "ffn_down.weight", ff, d);
    m->layers_.push_back(w);
  }
  m->output_norm_ = L.vec("output_norm.weight", d);
  m->output_ = c.tied_output ? m->token_embd_ : L.matrix("output.weight", d, c.n_vocab);
  if (L.has("rope_freqs.weight"))
    m->rope_freqs_ = L.vec("rope_freqs.weight", (c.rope_dim ? c.rope_dim : c.head_dim) / 2);
  m->weight_bytes_ = L.bytes;
  return m;
}

}  // namespace kvtax
