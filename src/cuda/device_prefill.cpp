// The CUDA decoder's batched prefill: a prompt in chunks of rows, each layer's products as GEMMs over the chunk and
// its attention by the tensor-core prefill kernel over the paged KV (cuda.md, "Batched prefill").
#include <algorithm>
#include <initializer_list>
#include <memory>
#include <utility>

#include "core/error.h"
#include "cuda/device_decoder.h"
#include "cuda/prefill_attention.h"
#include "cuda/prefill_ops.h"

namespace kvtax::cuda {

size_t CudaDecoder::prefill_row_bytes() const {
  const ModelConfig& c = b_.model().config();
  const size_t d = c.d_model, qd = size_t(c.n_heads) * c.head_dim, kvd = size_t(c.n_kv_heads) * c.head_dim;
  // ensure_prefill_buffers' f32 rows and RoPE factors, and the GEMMs' 16-bit input (GemmRunner::input); the f32
  // paths' buffers (f32_rows) come on top where a model takes them
  return 4 * (d + qd + 2 * kvd + 2 * size_t(c.d_ff)) + 4 * size_t(c.head_dim) + 2 * std::max(d, size_t(c.d_ff));
}

int CudaDecoder::default_chunk() const {
  const DeviceWeight& w = *b_.layers()[0].wo;
  if (w.type() == GgmlType::F16 || w.type() == GgmlType::BF16) return 8192;
  // Quantized weights: the longest chunk whose rows take at most half the free memory.
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) fail("--device cuda: cudaMemGetInfo failed");
  return size_t(kMaxBatch) * prefill_row_bytes() <= free / 2 ? kMaxBatch : 16384;
}

void CudaDecoder::set_prefill_chunk(int rows) {
  if (rows < 1 || rows > kMaxBatch) fail("--device cuda: prefill chunk of {} rows outside 1..{}", rows, kMaxBatch);
  if (rows == chunk_) return;
  chunk_ = rows;
  b_.account(0, prefill_bytes_);
  for (Buffer* p : {&px_, &pxb_, &pq_, &pk_, &pv_, &patt_, &py_, &pg_, &pu_, &pcs_}) *p = Buffer();
  prefill_bytes_ = 0;
}

void CudaDecoder::ensure_prefill_buffers() {
  if (px_.get()) return;
  const ModelConfig& c = b_.model().config();
  const size_t n = size_t(chunk_), d = c.d_model, qd = size_t(c.n_heads) * c.head_dim;
  const size_t kvd = size_t(c.n_kv_heads) * c.head_dim, ff = c.d_ff;
  auto f32 = [n](size_t w) { return Buffer(n * w * 4); };
  px_ = f32(d); pq_ = f32(qd); pk_ = f32(kvd); pv_ = f32(kvd); pg_ = f32(ff); pu_ = f32(ff);
  pcs_ = Buffer(n * c.head_dim / 2 * sizeof(float2));
  if (!gemm_) gemm_ = std::make_unique<GemmRunner>(stream_);
  size_t bytes = 0;
  for (const Buffer* p : {&px_, &pq_, &pk_, &pv_, &pg_, &pu_, &pcs_}) bytes += p->bytes();
  b_.account(bytes, prefill_bytes_);
  prefill_bytes_ = bytes;
}

float* CudaDecoder::f32_rows(Buffer& b, size_t width) {
  if (!b.get()) {
    b = Buffer(size_t(chunk_) * width * 4);
    b_.account(b.bytes(), 0);
    prefill_bytes_ += b.bytes();
  }
  return b.as<float>();
}

namespace {

// The products can share one 16-bit rounding of their input: none is F32 and all take the same 16-bit type.
bool same_input_type(std::initializer_list<const DeviceWeight*> ws) {
  for (const DeviceWeight* w : ws)
    if (w->type() == GgmlType::F32 || GemmRunner::takes_bf16(*w) != GemmRunner::takes_bf16(**ws.begin())) return false;
  return true;
}

}  // namespace

void CudaDecoder::run_chunk(int off, int n) {
  const ModelConfig& c = b_.model().config();
  const int d = int(c.d_model), hd = int(c.head_dim), nh = int(c.n_heads), nkv = int(c.n_kv_heads);
  const int ff = int(c.d_ff), qd = nh * hd, kvd = nkv * hd, pos0 = n_past_ + off;
  const float eps = c.rms_eps;
  cudaStream_t s = stream_;
  ensure_prefill_buffers();
  const size_t gemm_before = gemm_->device_bytes();
  float *x = px_.as<float>(), *q = pq_.as<float>(), *k = pk_.as<float>(), *v = pv_.as<float>();
  float *g = pg_.as<float>(), *u = pu_.as<float>();
  // The f32 paths' buffers (F32 weights, products of mixed input types, one-row chunks), allocated on first use.
  auto xb = [&] { return f32_rows(pxb_, size_t(d)); };
  auto att = [&] { return f32_rows(patt_, size_t(qd)); };
  auto y = [&] { return f32_rows(py_, size_t(d)); };
  GemmRunner& G = *gemm_;
  const DeviceWeight& E = b_.embedding();
  check(ops::embed(E.type(), E.data(), E.row_bytes(), io_.as<int32_t>() + off, n, d, x, s), "embed");
  const float* residual = nullptr;  // the last block output not yet added into x: the next norm adds it
  // x += residual, then the norm by nw as the next products' input: 16-bit values straight from the norm when
  // `half` (returned), f32 in xb otherwise (nullptr returned).
  auto norm_input = [&](const float* nw, bool half, bool bf16) -> const void* {
    const float* r = std::exchange(residual, nullptr);
    if (half && n > 1 && d % 4 == 0) {
      void* xh = G.input(n, d);
      check(ops::add_rmsnorm_half(x, r, nw, xh, n, d, bf16, eps, s), "rmsnorm");
      return xh;
    }
    if (r) check(ops::add(x, r, int64_t(n) * d, s), "residual");
    check(ops::rmsnorm(x, nw, xb(), n, d, eps, s), "rmsnorm");
    return nullptr;
  };
  for (int l = 0; l < int(c.n_layers); ++l) {
    const CudaBackend::Layer& w = b_.layers()[size_t(l)];
    {  // rows of the stacked matrix (or the three matrices) straight into q, k and v; the input rounded once
      const DeviceWeight* m[3] = {w.wqkv ? w.wqkv.get() : w.wq.get(), w.wqkv ? w.wqkv.get() : w.wk.get(),
                                  w.wqkv ? w.wqkv.get() : w.wv.get()};
      const int64_t r0[3] = {0, w.wqkv ? qd : 0, w.wqkv ? qd + kvd : 0}, nr[3] = {qd, kvd, kvd};
      float* dst[3] = {q, k, v};
      const bool half = same_input_type({m[0], m[1], m[2]});
      if (const void* xh = norm_input(w.attn_norm.as<float>(), half, GemmRunner::takes_bf16(*m[0]))) {
        for (int i = 0; i < 3; ++i) G.run_rounded(*m[i], r0[i], nr[i], xh, n, dst[i], nr[i], GemmRunner::Out::f32);
      } else {
        for (int i = 0; i < 3; ++i) G.run(*m[i], r0[i], nr[i], xb(), n, dst[i], nr[i]);
      }
    }
    if (w.bq.get()) {
      check(ops::add_rows(q, w.bq.as<float>(), n, qd, s), "bias");
      check(ops::add_rows(k, w.bk.as<float>(), n, kvd, s), "bias");
      check(ops::add_rows(v, w.bv.as<float>(), n, kvd, s), "bias");
    }
    if (w.q_norm.get()) {
      check(ops::rmsnorm(q, w.q_norm.as<float>(), q, n * nh, hd, eps, s), "q norm");
      check(ops::rmsnorm(k, w.k_norm.as<float>(), k, n * nkv, hd, eps, s), "k norm");
    }
    // RoPE turns k here and q as the attention stages it (q then crosses memory once, not three times), unless
    // only part of each head rotates.
    QRope qr;
    if (b_.rope().dim == hd) qr = {pcs_.as<float2>(), b_.rope().neox};
    check(ops::rope_rows(qr.cs ? nullptr : q, qr.cs ? 0 : nh, k, nkv, n, hd, pos0, b_.rope(), s, pcs_.as<float2>()),
          "rope");
    encode_kv(target(l), k, v, n, pos0, s);
    const KvView kv = view(l, pos0 + n);
    if (w.wo->type() != GgmlType::F32) {  // att as wo's 16-bit input
      void* ah = G.input(n, qd);
      prefill_attention_half(kv, q, n, pos0, nh, ah, GemmRunner::takes_bf16(*w.wo), s, qr);
      G.run_rounded(*w.wo, 0, d, ah, n, x, d, GemmRunner::Out::add);  // straight into the residual stream
    } else {
      prefill_attention(kv, q, n, pos0, nh, att(), s, qr);
      G.run(*w.wo, 0, d, att(), n, y(), d);
      residual = y();
    }
    const DeviceWeight& gw = w.gate_up ? *w.gate_up : *w.gate;
    const DeviceWeight& uw = w.gate_up ? *w.gate_up : *w.up;
    const bool bf = GemmRunner::takes_bf16(gw);
    if (const void* xh = norm_input(w.ffn_norm.as<float>(), ff % 8 == 0 && same_input_type({&gw, &uw, w.down.get()}),
                                    bf)) {
      // gate|up side by side as 16-bit values in g's bytes ([n][2 ff]), SwiGLU straight into the down
      // product's 16-bit input in u's bytes: the [n, d_ff] intermediates cross memory in 2 bytes, once.
      if (w.gate_up) {
        G.run_rounded(gw, 0, 2 * int64_t(ff), xh, n, g, 2 * int64_t(ff), GemmRunner::Out::half);
      } else {
        G.run_rounded(gw, 0, ff, xh, n, g, 2 * int64_t(ff), GemmRunner::Out::half);
        G.run_rounded(uw, 0, ff, xh, n, reinterpret_cast<uint16_t*>(g) + ff, 2 * int64_t(ff), GemmRunner::Out::half);
      }
      check(detail::silu_mul_half(g, n, ff, bf, u, s), "silu");
      G.run_rounded(*w.down, 0, d, u, n, x, d, GemmRunner::Out::add);
    } else {
      if (w.gate_up) {
        G.run(*w.gate_up, 0, ff, xb(), n, g, ff);
        G.run(*w.gate_up, ff, ff, xb(), n, u, ff);
      } else {
        G.run(*w.gate, 0, ff, xb(), n, g, ff);
        G.run(*w.up, 0, ff, xb(), n, u, ff);
      }
      check(ops::silu_mul(g, u, int64_t(n) * ff, s), "silu");
      G.run(*w.down, 0, d, g, n, y(), d);
      residual = y();
    }
  }
  if (residual) check(ops::add(x, residual, int64_t(n) * d, s), "residual");
  const size_t gemm_after = gemm_->device_bytes();
  if (gemm_after != gemm_before) {
    b_.account(gemm_after - gemm_before, 0);
    prefill_bytes_ += gemm_after - gemm_before;
  }
}

void CudaDecoder::chunk_logits(int t) {
  const ModelConfig& c = b_.model().config();
  const int d = int(c.d_model);
  check(ops::rmsnorm(px_.as<float>() + size_t(t) * d, b_.output_norm(), xb_.as<float>(), 1, d, c.rms_eps, stream_),
        "output norm");
  gemv(b_.output(), xb_.as<float>(), logits_.as<float>(), gemv_scratch_.get(), stream_);
}

}  // namespace kvtax::cuda
