// The token path, top to bottom: embed → for each layer (attention over the KV cache, then the SwiGLU
// feed-forward) → final norm → logits. Everything else (weights, kernels, the cache) lives elsewhere.
#include "model/forward.h"

#include "attn/cpu/attention.h"
#include "core/error.h"

#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>

namespace kvtax {

Forward::Forward(const Model& m, const KvSpec& kv, int max_context, int max_batch, ThreadPool& pool)
    : m_(m), pool_(pool), max_context_(max_context), max_batch_(max_batch),
      cache_(KvShape{int(m.config().n_layers), int(m.config().n_kv_heads), int(m.config().head_dim)}, kv,
             size_t(max_context), max_batch),
      rope_(m.config(), m.rope_freqs()) {
  const auto& c = m.config();
  const size_t B = size_t(max_batch);
  x_.resize(B * c.d_model);
  xb_.resize(B * c.d_model);
  xb2_.resize(B * c.d_model);
  q_.resize(B * c.n_heads * c.head_dim);
  att_.resize(B * c.n_heads * c.head_dim);
  k_.resize(B * c.n_kv_heads * c.head_dim);
  v_.resize(B * c.n_kv_heads * c.head_dim);
  hb_.resize(B * c.d_ff);
  hb2_.resize(B * c.d_ff);
  if (const char* d = std::getenv("KVTAX_DUMP_DIR")) dump_dir_ = d;
}

void Forward::dump(const char* name, int layer, const float* p, size_t n) const {
  if (dump_dir_.empty()) return;
  const std::string path = fmt::format("{}/kvtax_{}-{}.f32", dump_dir_, name, layer);
  std::FILE* f = std::fopen(path.c_str(), "ab");  // appended: one eval() chunk after another
  if (!f) fail("KVTAX_DUMP_DIR: cannot write {}", path);
  std::fwrite(p, sizeof(float), n, f);
  std::fclose(f);
}

size_t Forward::scratch_bytes() const {
  size_t n = 0;
  for (const auto* b : {&x_, &xb_, &xb2_, &q_, &k_, &v_, &att_, &hb_, &hb2_}) n += b->size() * sizeof(float);
  return n;
}

void Forward::eval(const int32_t* tokens, int n, float* logits, bool all_logits) {
  const ModelConfig& c = m_.config();
  const int d = int(c.d_model), hd = int(c.head_dim), nh = int(c.n_heads), nkv = int(c.n_kv_heads);
  const int q_dim = nh * hd, kv_dim = nkv * hd, ff = int(c.d_ff);
  const int pos0 = n_past();
  if (n < 1 || n > max_batch_) fail("eval of {} tokens: must be 1..{}", n, max_batch_);
  if (pos0 + n > max_context_)
    fail("context overflow: {} tokens in the cache + {} new > context size {}", pos0, n, max_context_);

  // Embed.
  for (int t = 0; t < n; ++t) {
    if (tokens[t] < 0 || uint32_t(tokens[t]) >= c.n_vocab) fail("token id {} outside the vocabulary", tokens[t]);
    weight_row(m_.token_embd(), tokens[t], &x_[size_t(t) * d]);
  }

  for (int l = 0; l < int(c.n_layers); ++l) {
    const LayerWeights& w = m_.layers()[l];
    // Every row feeds the cache (k, v), but past the last layer's cache append only the rows whose logits
    // are wanted matter: the last layer computes q, attention and the feed-forward for rows [r0, n) only.
    const int r0 = (l + 1 == int(c.n_layers) && !all_logits) ? n - 1 : 0, m = n - r0;
    float* x = &x_[size_t(r0) * d];

    // Attention: q, k, v projections, per-head norm (qwen3), rotary positions, then attention over the cache.
    for (int t = 0; t < n; ++t) rmsnorm(&x_[size_t(t) * d], w.attn_norm, &xb_[size_t(t) * d], d, c.rms_eps);
    matmul(w.wq, &xb_[size_t(r0) * d], m, q_.data(), pool_);
    matmul(w.wk, xb_.data(), n, k_.data(), pool_);
    matmul(w.wv, xb_.data(), n, v_.data(), pool_);
    dump("attn_norm", l, xb_.data(), size_t(n) * d);
    dump("Qraw", l, q_.data(), size_t(m) * q_dim);
    dump("Kraw", l, k_.data(), size_t(n) * kv_dim);
    dump("Vcur", l, v_.data(), size_t(n) * kv_dim);
    for (int t = 0; t < n; ++t) {
      float* k = &k_[size_t(t) * kv_dim];
      if (w.bk) {
        add_inplace(k, w.bk, kv_dim);
        add_inplace(&v_[size_t(t) * kv_dim], w.bv, kv_dim);
      }
      if (w.k_norm)
        for (int h = 0; h < nkv; ++h) rmsnorm(k + h * hd, w.k_norm, k + h * hd, hd, c.rms_eps);
      rope_.apply(k, nkv, hd, pos0 + t);
      if (t < r0) continue;
      float* q = &q_[size_t(t - r0) * q_dim];
      if (w.bq) add_inplace(q, w.bq, q_dim);
      if (w.q_norm)
        for (int h = 0; h < nh; ++h) rmsnorm(q + h * hd, w.q_norm, q + h * hd, hd, c.rms_eps);
      rope_.apply(q, nh, hd, pos0 + t);
    }
    dump("Qcur", l, q_.data(), size_t(m) * q_dim);
    dump("Kcur", l, k_.data(), size_t(n) * kv_dim);
    cache_.append(l, n, k_.data(), v_.data());
    attention(cache_, l, q_.data(), m, nh, att_.data(), pool_);
    dump("kqv_out", l, att_.data(), size_t(m) * q_dim);
    matmul(w.wo, att_.data(), m, xb2_.data(), pool_);
    dump("attn_out", l, xb2_.data(), size_t(m) * d);
    add_inplace(x, xb2_.data(), int64_t(m) * d);
    dump("ffn_inp", l, x, size_t(m) * d);

    // Feed-forward: down(silu(gate(x)) * up(x)).
    for (int t = 0; t < m; ++t) rmsnorm(x + size_t(t) * d, w.ffn_norm, &xb_[size_t(t) * d], d, c.rms_eps);
    matmul(w.w_gate, xb_.data(), m, hb_.data(), pool_);
    matmul(w.w_up, xb_.data(), m, hb2_.data(), pool_);
    silu_mul_inplace(hb_.data(), hb2_.data(), int64_t(m) * ff);
    dump("ffn_norm", l, xb_.data(), size_t(m) * d);
    matmul(w.w_down, hb_.data(), m, xb2_.data(), pool_);
    dump("ffn_out", l, xb2_.data(), size_t(m) * d);
    add_inplace(x, xb2_.data(), int64_t(m) * d);
    dump("l_out", l, x, size_t(m) * d);
  }
  cache_.commit(n);

  // Logits for the last token, or for all of them (teacher forcing, golden checks).
  const int first = all_logits ? 0 : n - 1;
  for (int t = first; t < n; ++t) rmsnorm(&x_[size_t(t) * d], m_.output_norm(), &xb_[size_t(t - first) * d], d, c.rms_eps);
  dump("result_norm", -1, xb_.data(), size_t(n - first) * d);
  matmul(m_.output(), xb_.data(), n - first, logits, pool_);
}

}  // namespace kvtax
