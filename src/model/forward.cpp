// The token path, top to bottom: embed → for each layer (attention over the KV cache, then the SwiGLU
// feed-forward) → final norm → logits. Everything else (weights, kernels, the cache) lives elsewhere.
#include "model/forward.h"

#include "attn/cpu/attention.h"
#include "core/error.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

namespace kvtax {

ForwardPass::ForwardPass(const Model& m, int max_rows, ThreadPool& pool)
    : m_(m), pool_(pool), max_rows_(max_rows), rope_(m.config(), m.rope_freqs()) {
  if (max_rows < 1) fail("forward pass: max_rows must be >= 1, got {}", max_rows);
  const auto& c = m.config();
  const size_t B = size_t(max_rows);
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

void ForwardPass::dump(const char* name, int layer, const float* p, size_t n) const {
  if (dump_dir_.empty()) return;
  const std::string path = fmt::format("{}/kvtax_{}-{}.f32", dump_dir_, name, layer);
  std::FILE* f = std::fopen(path.c_str(), "ab");  // appended: one eval() chunk after another
  if (!f) fail("KVTAX_DUMP_DIR: cannot write {}", path);
  std::fwrite(p, sizeof(float), n, f);
  std::fclose(f);
}

size_t ForwardPass::scratch_bytes() const {
  size_t n = 0;
  for (const auto* b : {&x_, &xb_, &xb2_, &q_, &k_, &v_, &att_, &hb_, &hb2_}) n += b->size() * sizeof(float);
  return n;
}

void ForwardPass::eval(std::span<const SeqRows> seqs) {
  const ModelConfig& c = m_.config();
  const int d = int(c.d_model), hd = int(c.head_dim), nh = int(c.n_heads), nkv = int(c.n_kv_heads);
  const int q_dim = nh * hd, kv_dim = nkv * hd, ff = int(c.d_ff), n_vocab = int(c.n_vocab);
  const int S = int(seqs.size());
  if (S == 0) fail("forward pass: no sequences");
  int n = 0, n_out = 0;  // rows in, rows whose logits are wanted
  for (int s = 0; s < S; ++s) {
    const SeqRows& q = seqs[size_t(s)];
    if (!q.cache || !q.tokens || !q.logits) fail("forward pass: sequence {} lacks its cache, tokens or logits", s);
    if (q.n < 1 || q.n > max_rows_) fail("eval of {} tokens: must be 1..{}", q.n, max_rows_);
    for (int o = 0; o < s; ++o)
      if (seqs[size_t(o)].cache == q.cache) fail("forward pass: sequences {} and {} share one KV cache", o, s);
    n += q.n;
    n_out += q.all_logits ? q.n : 1;
  }
  if (n > max_rows_) fail("forward pass: {} rows over {} sequences exceed the {} it was sized for", n, S, max_rows_);

  // Rows are the sequences' tokens one after another.
  row_pos_.resize(size_t(n));
  seq_row0_.resize(size_t(S) + 1);
  seq_q0_.resize(size_t(S) + 1);
  for (int s = 0, r = 0; s < S; ++s) {
    const SeqRows& q = seqs[size_t(s)];
    seq_row0_[size_t(s)] = r;
    for (int t = 0; t < q.n; ++t, ++r) {
      if (q.tokens[t] < 0 || uint32_t(q.tokens[t]) >= c.n_vocab) fail("token id {} outside the vocabulary", q.tokens[t]);
      row_pos_[size_t(r)] = q.cache->n_past() + t;
      weight_row(m_.token_embd(), q.tokens[t], &x_[size_t(r) * d]);
    }
  }
  seq_row0_[size_t(S)] = n;
  seq_q0_ = seq_row0_;

  for (int l = 0; l < int(c.n_layers); ++l) {
    const LayerWeights& w = m_.layers()[l];
    // Every row feeds the cache (k, v), but past the last layer's cache append only the rows whose logits
    // are wanted matter: the last layer computes q, attention and the feed-forward for those m rows only.
    const bool last = l + 1 == int(c.n_layers);
    const int m = last ? n_out : n;

    // Attention: k, v projections for every row, per-head norm (qwen3), rotary positions, into the cache.
    for (int r = 0; r < n; ++r) rmsnorm(&x_[size_t(r) * d], w.attn_norm, &xb_[size_t(r) * d], d, c.rms_eps);
    matmul(w.wk, xb_.data(), n, k_.data(), pool_);
    matmul(w.wv, xb_.data(), n, v_.data(), pool_);
    dump("attn_norm", l, xb_.data(), size_t(n) * d);
    dump("Kraw", l, k_.data(), size_t(n) * kv_dim);
    dump("Vcur", l, v_.data(), size_t(n) * kv_dim);
    for (int r = 0; r < n; ++r) {
      float* k = &k_[size_t(r) * kv_dim];
      if (w.bk) {
        add_inplace(k, w.bk, kv_dim);
        add_inplace(&v_[size_t(r) * kv_dim], w.bv, kv_dim);
      }
      if (w.k_norm)
        for (int h = 0; h < nkv; ++h) rmsnorm(k + h * hd, w.k_norm, k + h * hd, hd, c.rms_eps);
      rope_.apply(k, nkv, hd, row_pos_[size_t(r)]);
    }
    dump("Kcur", l, k_.data(), size_t(n) * kv_dim);
    for (int s = 0; s < S; ++s) {
      const size_t r0 = size_t(seq_row0_[size_t(s)]);
      seqs[size_t(s)].cache->append(l, seqs[size_t(s)].n, &k_[r0 * kv_dim], &v_[r0 * kv_dim]);
    }
    if (m < n) {
      // Move the kept rows (residual, normed input, position) to the front, in order; row i comes from a row >= i.
      int i = 0;
      for (int s = 0; s < S; ++s) {
        seq_q0_[size_t(s)] = i;
        const int r1 = seq_row0_[size_t(s) + 1];
        for (int r = seqs[size_t(s)].all_logits ? seq_row0_[size_t(s)] : r1 - 1; r < r1; ++r, ++i) {
          if (r == i) continue;
          std::memcpy(&x_[size_t(i) * d], &x_[size_t(r) * d], sizeof(float) * size_t(d));
          std::memcpy(&xb_[size_t(i) * d], &xb_[size_t(r) * d], sizeof(float) * size_t(d));
          row_pos_[size_t(i)] = row_pos_[size_t(r)];
        }
      }
      seq_q0_[size_t(S)] = i;
    }

    // Queries for the kept rows, then attention per sequence over its own cache.
    matmul(w.wq, xb_.data(), m, q_.data(), pool_);
    dump("Qraw", l, q_.data(), size_t(m) * q_dim);
    for (int r = 0; r < m; ++r) {
      float* q = &q_[size_t(r) * q_dim];
      if (w.bq) add_inplace(q, w.bq, q_dim);
      if (w.q_norm)
        for (int h = 0; h < nh; ++h) rmsnorm(q + h * hd, w.q_norm, q + h * hd, hd, c.rms_eps);
      rope_.apply(q, nh, hd, row_pos_[size_t(r)]);
    }
    dump("Qcur", l, q_.data(), size_t(m) * q_dim);
    for (int s = 0; s < S; ++s) {
      const int q0 = seq_q0_[size_t(s)], nq = seq_q0_[size_t(s) + 1] - q0;
      attention(*seqs[size_t(s)].cache, l, &q_[size_t(q0) * q_dim], nq, nh, &att_[size_t(q0) * q_dim], pool_);
    }
    dump("kqv_out", l, att_.data(), size_t(m) * q_dim);
    matmul(w.wo, att_.data(), m, xb2_.data(), pool_);
    dump("attn_out", l, xb2_.data(), size_t(m) * d);
    add_inplace(x_.data(), xb2_.data(), int64_t(m) * d);
    dump("ffn_inp", l, x_.data(), size_t(m) * d);

    // Feed-forward: down(silu(gate(x)) * up(x)).
    for (int r = 0; r < m; ++r) rmsnorm(&x_[size_t(r) * d], w.ffn_norm, &xb_[size_t(r) * d], d, c.rms_eps);
    matmul(w.w_gate, xb_.data(), m, hb_.data(), pool_);
    matmul(w.w_up, xb_.data(), m, hb2_.data(), pool_);
    silu_mul_inplace(hb_.data(), hb2_.data(), int64_t(m) * ff);
    dump("ffn_norm", l, xb_.data(), size_t(m) * d);
    matmul(w.w_down, hb_.data(), m, xb2_.data(), pool_);
    dump("ffn_out", l, xb2_.data(), size_t(m) * d);
    add_inplace(x_.data(), xb2_.data(), int64_t(m) * d);
    dump("l_out", l, x_.data(), size_t(m) * d);
  }
  for (const SeqRows& q : seqs) q.cache->commit(q.n);

  // Logits of the kept rows: straight into the caller's buffer for one sequence, else through scratch.
  for (int r = 0; r < n_out; ++r) rmsnorm(&x_[size_t(r) * d], m_.output_norm(), &xb_[size_t(r) * d], d, c.rms_eps);
  dump("result_norm", -1, xb_.data(), size_t(n_out) * d);
  if (S == 1) {
    matmul(m_.output(), xb_.data(), n_out, seqs[0].logits, pool_);
    return;
  }
  logits_.resize(size_t(n_out) * size_t(n_vocab));
  matmul(m_.output(), xb_.data(), n_out, logits_.data(), pool_);
  for (int s = 0; s < S; ++s) {
    const int q0 = seq_q0_[size_t(s)], nq = seq_q0_[size_t(s) + 1] - q0;
    std::memcpy(seqs[size_t(s)].logits, &logits_[size_t(q0) * n_vocab], sizeof(float) * size_t(nq) * size_t(n_vocab));
  }
}

Forward::Forward(const Model& m, const KvSpec& kv, int max_context, int max_batch, ThreadPool& pool)
    : pass_(m, max_batch, pool), max_context_(max_context),
      cache_(KvShape{int(m.config().n_layers), int(m.config().n_kv_heads), int(m.config().head_dim)}, kv,
             size_t(max_context), max_batch) {}

void Forward::eval(const int32_t* tokens, int n, float* logits, bool all_logits) {
  if (n < 1 || n > max_batch()) fail("eval of {} tokens: must be 1..{}", n, max_batch());
  if (n_past() + n > max_context_)
    fail("context overflow: {} tokens in the cache + {} new > context size {}", n_past(), n, max_context_);
  const SeqRows s{&cache_, tokens, n, logits, all_logits};
  pass_.eval({&s, 1});
}

}  // namespace kvtax
