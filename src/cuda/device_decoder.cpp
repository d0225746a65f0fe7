#include "cuda/device_decoder.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <utility>

#include "core/error.h"
#include "cuda/pick.h"
#include "cuda/prefill_attention.h"
#include "kv/codecs/layout.h"

namespace kvtax::cuda {

kv::CodecId device_codec(const KvSpec& spec, int head_dim) {
  if (spec.k != spec.v)
    fail("--device cuda: KV spec '{}' has different K and V codecs; the device stores one codec for both",
         spec.str());
  if (spec.policy.window || spec.policy.recent)
    fail("--device cuda: KV spec '{}' has a window or recent tier; the device keeps every token in one codec",
         spec.str());
  const kv::CodecInfo* c = kv::find_codec(spec.k);
  if (!c) fail("--device cuda: unknown KV codec '{}'", spec.k);
  if (!decode_supported(c->id, head_dim))
    fail("--device cuda: no attention kernel for KV codec {} with head_dim {}", c->name, head_dim);
  return c->id;
}

CudaDecoder::CudaDecoder(CudaBackend& b, kv::CodecId codec, int max_context, size_t reserve_bytes)
    : b_(b), codec_(codec) {
  const ModelConfig& c = b.model().config();
  const int L = int(c.n_layers), P = kv_page_tokens();
  if (max_context < 1) fail("--device cuda: context of {} tokens", max_context);
  row_bytes_ = kv::layout::row_bytes(codec, int(c.head_dim));
  page_bytes_ = kv_page_bytes(codec, int(c.n_kv_heads), int(c.head_dim));
  const size_t want_pages = size_t((max_context + P - 1) / P) * L;
  const size_t n_pages = reserve_bytes ? reserve_bytes / page_bytes_ : want_pages;
  capacity_ = int(std::min<size_t>(n_pages / L * P, size_t(1) << 30));
  if (capacity_ < max_context)
    fail("--device cuda: a KV reservation of {:.3f} GiB holds {} tokens in {} ({} KiB pages of {} tokens x {} "
         "layers), fewer than the context of {}",
         double(reserve_bytes) / (1ull << 30), capacity_, kv::codec(codec).name, page_bytes_ >> 10, P, L,
         max_context);
  max_context_ = max_context;
  max_pages_ = capacity_ / P;
  pool_ = std::make_shared<CudaKvPool>(b, codec, size_t(max_pages_) * L);
  init();
}

CudaDecoder::CudaDecoder(CudaBackend& b, std::shared_ptr<CudaKvPool> pool, int max_context)
    : b_(b), codec_(pool->codec()), pool_(std::move(pool)) {
  const ModelConfig& c = b.model().config();
  const int P = kv_page_tokens();
  if (max_context < 1) fail("--device cuda: context of {} tokens", max_context);
  row_bytes_ = kv::layout::row_bytes(codec_, int(c.head_dim));
  page_bytes_ = pool_->page_bytes();
  capacity_ = int(std::min<size_t>(pool_->capacity_tokens(), size_t(1) << 30));
  if (capacity_ < max_context)
    fail("--device cuda: the shared KV pool of {:.3f} GiB holds {} tokens, fewer than the context of {}",
         double(pool_->bytes()) / (1ull << 30), capacity_, max_context);
  max_context_ = max_context;
  // The page table (and the attention grid a graph is captured with) covers this decoder's context only.
  max_pages_ = (max_context + P - 1) / P;
  init();
}

void CudaDecoder::init() {
  const ModelConfig& c = b_.model().config();
  chunk_ = default_chunk();
  const int L = int(c.n_layers);
  table_host_.assign(size_t(max_pages_) * L, 0);
  table_ = Buffer(table_host_.size() * 4);
  table_.upload(table_host_.data(), table_host_.size() * 4);

  const size_t d = c.d_model, qd = size_t(c.n_heads) * c.head_dim, kvd = size_t(c.n_kv_heads) * c.head_dim;
  const size_t ff = c.d_ff, cols = std::max({d, qd, ff});
  auto f32 = [](size_t n) { return Buffer(n * 4); };
  x_ = f32(d); xb_ = f32(d); xb2_ = f32(d);
  qkv_ = f32(qd + 2 * kvd); att_ = f32(qd); gu_ = f32(2 * ff); logits_ = f32(c.n_vocab);
  gemv_scratch_ = Buffer(gemv_scratch_bytes(int64_t(cols)));
  norm_scratch_ = Buffer(gemv_scratch_bytes(int64_t(d)));
  ss_part_ = Buffer((d + 31) / 32 * 8);
  fused_norm_ = d % 32 == 0;
  if (const char* f = std::getenv("KVTAX_FUSED_NORM")) fused_norm_ = fused_norm_ && std::string(f) != "0";
  attn_scratch_ = Buffer(decode_scratch_bytes(view(0, 1), int(c.n_heads)));
  io_ = Buffer(3 * 4 * kMaxBatch);
  io_host_ = HostBuffer(io_.bytes());
  logits_host_ = HostBuffer(logits_.bytes());
  pick_ = Buffer(pick_scratch_bytes() + 4);  // then the index
  pick_.fill(0);
  pick_host_ = HostBuffer(4);
  if (const char* g = std::getenv("KVTAX_CUDA_GRAPH")) use_graph_ = std::string(g) != "0";
  if (const char* w = std::getenv("KVTAX_SWIGLU_CODES")) swiglu_codes_ = std::string(w) != "0";
  if (const char* p = std::getenv("KVTAX_CUDA_PREFILL")) batched_ = std::string(p) != "0";
  for (const Buffer* p :
       {&x_, &xb_, &xb2_, &qkv_, &att_, &gu_, &logits_, &gemv_scratch_, &norm_scratch_, &ss_part_, &attn_scratch_, &io_,
        &pick_})
    scratch_bytes_ += p->bytes();
  check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  b_.account(table_.bytes() + scratch_bytes_, 0);
}

CudaDecoder::~CudaDecoder() {
  if (graph_exec_) cudaGraphExecDestroy(graph_exec_);
  if (graph_) cudaGraphDestroy(graph_);
  if (stream_) cudaStreamDestroy(stream_);
  release_pages(0);
  b_.account(0, table_.bytes() + scratch_bytes_ + prefill_bytes_);
}

void CudaDecoder::reset() {
  n_past_ = 0;
  release_pages(0);
}

void CudaDecoder::truncate(int n) {
  if (n < 0 || n > n_past_) fail("--device cuda: truncate to {} tokens of {}", n, n_past_);
  n_past_ = n;
  release_pages((n + kv_page_tokens() - 1) / kv_page_tokens());
}

void CudaDecoder::release_pages(int keep) {
  const int L = int(b_.model().config().n_layers);
  // Latest pages first, so a fresh decoder's pool hands pages out again in the same order.
  for (; pages_used_ > keep; --pages_used_)
    for (int l = L - 1; l >= 0; --l) pool_->give(table_host_[size_t(l) * max_pages_ + pages_used_ - 1]);
}

void CudaDecoder::prepare(int max_batch) {
  set_prefill_chunk(std::clamp(max_batch, 1, default_chunk()));
  if (n_past_ != 0) fail("--device cuda: prepare() on a decoder holding {} tokens", n_past_);
  // Two tokens take the batched prefill path (its buffers and GEMM scratch), then one the decode step
  // (its graph); the tokens are dropped again.
  std::vector<float> logits(b_.model().config().n_vocab);
  const int32_t toks[2] = {0, 0};
  const int n = std::min(2, max_context_);
  eval(toks, n, logits.data());
  if (n_past_ < max_context_) eval(toks, 1, logits.data());
  reset();
}

size_t CudaDecoder::kv_bytes_used() const {
  return size_t(pages_used_) * b_.model().config().n_layers * page_bytes_;
}

size_t CudaDecoder::kv_bytes_per_token() const {
  const ModelConfig& c = b_.model().config();
  return 2 * size_t(c.n_layers) * c.n_kv_heads * row_bytes_;
}

void CudaDecoder::ensure_pages(int tokens) {
  const int need = (tokens + kv_page_tokens() - 1) / kv_page_tokens();
  if (need > max_pages_) fail("--device cuda: {} tokens exceed the KV capacity of {}", tokens, max_pages_ * kv_page_tokens());
  if (need <= pages_used_) return;
  const int L = int(b_.model().config().n_layers);
  if (size_t(need - pages_used_) * L > pool_->pages_free())
    fail("--device cuda: the KV pool has {} free pages; {} tokens need {} more", pool_->pages_free(), tokens,
         size_t(need - pages_used_) * L);
  for (; pages_used_ < need; ++pages_used_)
    for (int l = 0; l < L; ++l) table_host_[size_t(l) * max_pages_ + pages_used_] = pool_->take();
  check(cudaMemcpyAsync(table_.get(), table_host_.data(), table_host_.size() * 4, cudaMemcpyHostToDevice, stream_),
        "page table upload");
}

KvView CudaDecoder::view(int layer, int len, const int* len_dev) const {
  const ModelConfig& c = b_.model().config();
  return KvView{codec_, int(c.n_kv_heads), int(c.head_dim), len, row_bytes_, page_bytes_, pool_->data(),
                table_.as<int32_t>() + size_t(layer) * max_pages_, max_pages_ * kv_page_tokens(), len_dev};
}

KvTarget CudaDecoder::target(int layer) const {
  const ModelConfig& c = b_.model().config();
  return KvTarget{codec_, int(c.n_kv_heads), int(c.head_dim), row_bytes_, page_bytes_, pool_->data(),
                  table_.as<int32_t>() + size_t(layer) * max_pages_};
}

template <class Take>
void CudaDecoder::run(const int32_t* tokens, int n, bool all_logits, const Take& take) {
  const ModelConfig& c = b_.model().config();
  if (n < 1 || n > kMaxBatch) fail("eval of {} tokens: must be 1..{}", n, kMaxBatch);
  if (n_past_ + n > max_context_)
    fail("context overflow: {} tokens in the cache + {} new > context size {}", n_past_, n, max_context_);
  for (int t = 0; t < n; ++t)
    if (tokens[t] < 0 || uint32_t(tokens[t]) >= c.n_vocab) fail("token id {} outside the vocabulary", tokens[t]);
  ensure_pages(n_past_ + n);
  int32_t* io = io_host_.as<int32_t>();
  io_n_ = n;
  for (int t = 0; t < n; ++t) {
    io[size_t(t)] = tokens[t];
    io[size_t(n + t)] = n_past_ + t;
    io[size_t(2 * n + t)] = n_past_ + t + 1;
  }
  check(cudaMemcpyAsync(io_.get(), io, size_t(3 * n) * 4, cudaMemcpyHostToDevice, stream_), "token upload");
  const bool batched = n > 1 && batched_ && prefill_supported(codec_, int(c.head_dim));
  if (batched) {
    for (int off = 0; off < n; off += chunk_) {
      const int m = std::min(chunk_, n - off);
      run_chunk(off, m);
      for (int t = all_logits ? 0 : m - 1; t < m; ++t) {
        if (!all_logits && off + m < n) break;  // only the last row of the last chunk
        chunk_logits(t);
        take(off + t);
      }
    }
  } else if (n == 1 && use_graph_ && !graph_failed_) {
    run_graph();
    take(0);
  } else {
    for (int t = 0; t < n; ++t) {
      const bool want = all_logits || t == n - 1;
      launch_token(t, n_past_ + t + 1, want);
      if (want) take(t);
    }
  }
  check(cudaStreamSynchronize(stream_), "decode step");
  n_past_ += n;
}

void CudaDecoder::eval(const int32_t* tokens, int n, float* logits, bool all_logits) {
  if (!logits) fail("eval: no logits buffer");
  const size_t n_vocab = b_.model().config().n_vocab, row_bytes = n_vocab * 4;
  // Row r's logits to the host: every row straight into the caller's buffer, or the one row through page-locked memory.
  run(tokens, n, all_logits, [&](int r) {
    void* out = all_logits ? static_cast<void*>(logits + size_t(r) * n_vocab) : logits_host_.as<void>();
    check(cudaMemcpyAsync(out, logits_.get(), row_bytes, cudaMemcpyDeviceToHost, stream_), "logits");
  });
  if (!all_logits && logits != logits_row()) std::memcpy(logits, logits_host_.as<void>(), row_bytes);
}

int32_t CudaDecoder::eval_pick(const int32_t* tokens, int n, const TokenPick& p) {
  const int n_vocab = int(b_.model().config().n_vocab);
  if (!(p.inv_temperature >= 0) || !(p.u >= 0 && p.u < 1))
    fail("eval_pick: inverse temperature {} or u {} out of range", p.inv_temperature, p.u);
  auto* index = reinterpret_cast<int32_t*>(pick_.as<uint8_t>() + pick_scratch_bytes());
  run(tokens, n, false, [&](int) {
    const float* l = logits_.as<float>();
    check(p.inv_temperature > 0 ? draw(l, n_vocab, p.inv_temperature, p.u, pick_.get(), index, stream_)
                                : argmax(l, n_vocab, pick_.get(), index, stream_),
          "token pick");
    check(cudaMemcpyAsync(pick_host_.get(), index, 4, cudaMemcpyDeviceToHost, stream_), "token pick");
  });
  return *pick_host_.as<int32_t>();
}

void CudaDecoder::run_graph() {
  if (graph_exec_) {
    check(cudaGraphLaunch(graph_exec_, stream_), "graph launch");
    return;
  }
  // This token runs directly, so every one-time upload (codec tables, occupancy) happens outside the
  // capture; then one token's kernels are captured with every per-token value read from io_.
  launch_token(0, n_past_ + 1, true);
  check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "graph capture");
  try {
    launch_token(0, 0, true);
  } catch (...) {
    cudaGraph_t g = nullptr;
    cudaStreamEndCapture(stream_, &g);
    if (g) cudaGraphDestroy(g);
    cudaGetLastError();
    throw;
  }
  check(cudaStreamEndCapture(stream_, &graph_), "graph capture");
  if (cudaGraphInstantiate(&graph_exec_, graph_, 0) != cudaSuccess) {
    cudaGetLastError();
    graph_exec_ = nullptr;
    graph_failed_ = true;  // launch the kernels one by one from now on
  }
}

void CudaDecoder::replay_graph(int n) {
  // The graph reads its token's position from io_ as a single-token eval packs it.
  if (!graph_exec_ || io_n_ != 1)
    fail("--device cuda: no decode step graph to replay (run a single-token eval just before)");
  for (int i = 0; i < n; ++i) check(cudaGraphLaunch(graph_exec_, stream_), "graph launch");
  check(cudaStreamSynchronize(stream_), "graph replay");
}

void CudaDecoder::launch_token(int t, int host_len, bool logits) {
  const ModelConfig& c = b_.model().config();
  const int d = int(c.d_model), hd = int(c.head_dim), nh = int(c.n_heads), nkv = int(c.n_kv_heads);
  const int L = int(c.n_layers), ff = int(c.d_ff);
  const float eps = c.rms_eps;
  cudaStream_t s = stream_;
  // x: the residual stream; xb: its norm, the next matmul's input; q|k|v and gate|up side by side, so the
  // stacked weights fill them with one GEMV each.
  float *x = x_.as<float>(), *xb = xb_.as<float>(), *xb2 = xb2_.as<float>(), *att = att_.as<float>();
  float *q = qkv_.as<float>(), *k = q + size_t(nh) * hd, *v = k + size_t(nkv) * hd;
  float *gate = gu_.as<float>(), *up = gate + ff;
  void* gs = gemv_scratch_.get();
  void* ns = norm_scratch_.get();
  double* ss = ss_part_.as<double>();
  const int32_t* id = io_.as<int32_t>() + t;
  const int* pos = io_.as<int32_t>() + io_n_ + t;
  const int* len = io_.as<int32_t>() + 2 * io_n_ + t;

  // The residual add and the norm before the GEMVs that read xb; when one of them quantizes x, the norm also
  // writes x's int8 codes into the norm scratch, and those GEMVs skip their own pass over x. Fused (fused_norm_),
  // the GEMV before the norm does this in its blocks (GemvFusion::res), without the 1/rms, which the GEMVs
  // after it apply (GemvFusion::rms_part): no one-block kernel between two GEMVs.
  using Next = std::array<const DeviceWeight*, 4>;
  auto codes_for = [](const Next& next) {
    bool codes = false;
    for (const DeviceWeight* w : next) codes |= w && gemv_quantizes_x(w->type());
    return codes;
  };
  auto add_norm = [&](const float* y, const float* norm, const Next& next) {
    check(ops::add_rmsnorm(x, y, norm, xb, d, eps, s, codes_for(next) ? detail::gemv_quant_x(ns, d) : detail::QuantX{}),
          "residual + norm");
  };
  bool scaled = false;  // xb still lacks its norm's 1/rms (the GEMVs reading it apply it)
  // A block's last GEMV (wo, down): its product goes into the residual stream, then the norm by `norm` (none: no
  // logits wanted after the last layer) makes xb for the GEMVs in `next`; `fuse`: both inside the GEMV's blocks.
  auto end_block = [&](const DeviceWeight& w, const float* in, GemvFusion f, const float* norm, const Next& next,
                       bool fuse) {
    if (fuse) {
      f.res = x, f.norm_w = norm, f.norm_x = xb, f.ss_part = ss;
      f.norm_scratch = codes_for(next) ? ns : nullptr;
      gemv(w, in, nullptr, gs, s, f);
    } else {
      gemv(w, in, xb2, gs, s, f);
      if (norm) add_norm(xb2, norm, next);
    }
    scaled = fuse;
  };
  auto read_xb = [&](GemvFusion f) {
    if (scaled) f.rms_part = ss, f.rms_n = d, f.rms_eps = eps;
    return f;
  };
  auto attn_in = [](const CudaBackend::Layer& w) { return Next{w.wqkv.get(), w.wq.get(), w.wk.get(), w.wv.get()}; };
  auto ffn_in = [](const CudaBackend::Layer& w) { return Next{w.gate_up.get(), w.gate.get(), w.up.get()}; };
  // beside: a quantized GEMV after a residual one (qkv after down) at three blocks per SM, so that all of its blocks
  // fit beside the residual GEMV's and stream their first units before their wait (perf.md: session 20, -0.02 ms per
  // step at 32k; session 22, three blocks of two stages against two of three, -0.02..-0.03 ms; gate|up after wo,
  // larger, lost 0.1 ms this way).
  auto gemv_xb = [&](const DeviceWeight& w, float* out, bool beside = false) {
    GemvFusion f{nullptr, gemv_quantizes_x(w.type())};
    if (fused_norm_ && beside && gemv_quantizes_x(w.type())) f.blocks_per_sm = 3;
    gemv(w, xb, out, ns, s, read_xb(f));
  };

  const DeviceWeight& E = b_.embedding();
  const auto& layers = b_.layers();
  if (fused_norm_) {  // layer 0's norm in the embedding kernel, as the GEMV epilogues fuse every later one
    const bool codes = codes_for(attn_in(layers[0]));
    check(ops::embed_norm_part(E.type(), E.data(), E.row_bytes(), id, d, x, layers[0].attn_norm.as<float>(), xb, ss,
                               codes ? detail::gemv_quant_x(ns, d) : detail::QuantX{}, s),
          "embedding + norm");
    scaled = true;
  } else {
    check(ops::embed(E.type(), E.data(), E.row_bytes(), id, 1, d, x, s), "embed");
    add_norm(nullptr, layers[0].attn_norm.as<float>(), attn_in(layers[0]));
  }
  for (int l = 0; l < L; ++l) {
    const CudaBackend::Layer& w = layers[size_t(l)];
    if (w.wqkv) {
      gemv_xb(*w.wqkv, q, true);
    } else {
      gemv_xb(*w.wq, q);
      gemv_xb(*w.wk, k);
      gemv_xb(*w.wv, v);
    }
    if (w.bq.get()) {
      check(ops::add(q, w.bq.as<float>(), int64_t(nh) * hd, s), "bias");
      check(ops::add(k, w.bk.as<float>(), int64_t(nkv) * hd, s), "bias");
      check(ops::add(v, w.bv.as<float>(), int64_t(nkv) * hd, s), "bias");
    }
    if (w.q_norm.get()) {
      check(ops::rmsnorm(q, w.q_norm.as<float>(), q, nh, hd, eps, s), "q norm");
      check(ops::rmsnorm(k, w.k_norm.as<float>(), k, nkv, hd, eps, s), "k norm");
    }
    // RoPE on q and k, k and v into the cache; q also rotated there for a rotated codec, which saves the attention's
    // blocks a pass of their own over it before their first tile.
    const bool q_rot = q_rotation_fuses(codec_, hd);
    encode_kv_rope(target(l), q, nh, k, v, 1, 0, b_.rope(), s, pos, q_rot);
    // A quantized wo takes att's int8 codes from the attention's merge, not from a pass of its own.
    const bool wo_codes = gemv_quantizes_x(w.wo->type());
    decode_attention(host_len > 0 ? view(l, host_len) : view(l, 1, len), q, nh, att, attn_scratch_.get(), s,
                     wo_codes ? gs : nullptr, q_rot);
    end_block(*w.wo, att, GemvFusion{nullptr, wo_codes}, w.ffn_norm.as<float>(), ffn_in(w), fused_norm_);
    // SwiGLU: float gate|up weights compute silu(gate) * up in their GEMV's epilogue; quantized gate|up weights
    // write its codes for a quantized down; else quantized down weights take it in their pass over x; otherwise a
    // kernel of its own.
    const bool down_q = gemv_quantizes_x(w.down->type());
    // down ends the layer: the next layer's norm follows, or after the last layer the output norm, fused where the
    // step fuses; with no logits wanted, only the residual add.
    auto down = [&](const float* in, GemvFusion f) {
      if (l + 1 < L) {
        const CudaBackend::Layer& n = layers[size_t(l + 1)];
        end_block(*w.down, in, f, n.attn_norm.as<float>(), attn_in(n), fused_norm_);
      } else {
        end_block(*w.down, in, f, logits ? b_.output_norm() : nullptr, Next{&b_.output()}, fused_norm_ && logits);
      }
    };
    if (w.gate_up && !gemv_quantizes_x(w.gate_up->type())) {
      gemv(*w.gate_up, xb, gate, gs, s, read_xb(GemvFusion{nullptr, false, true}));
      down(gate, {});
    } else if (w.gate_up && down_q && swiglu_codes_ && gemv_pair_codes_supported(*w.gate_up)) {
      // gate|up reads xb's codes from the norm scratch and writes silu(gate) * up's into gs, where down finds them:
      // no quantizer kernel between the two. H100, Q4_K weights: -0.03..-0.06 ms a step with fp8 and q4r KV at 32k
      // and 128k, f16 KV unchanged (session 39, A/B in one call).
      GemvFusion f{nullptr, true, true};
      f.pair_codes = gs;
      gemv(*w.gate_up, xb, nullptr, ns, s, read_xb(f));
      down(nullptr, GemvFusion{nullptr, true});
    } else {
      if (w.gate_up) {
        gemv_xb(*w.gate_up, gate);
      } else {
        gemv_xb(*w.gate, gate);
        gemv_xb(*w.up, up);
      }
      if (down_q) {
        down(gate, GemvFusion{up});
      } else {
        check(ops::silu_mul(gate, up, ff, s), "silu");
        down(gate, {});
      }
    }
  }
  if (logits) gemv_xb(b_.output(), logits_.as<float>());
}

void CudaDecoder::fill_random(int depth, uint64_t seed) {
  const ModelConfig& c = b_.model().config();
  if (depth < 0 || depth > max_context_) fail("fill_random: depth {} outside the context of {}", depth, max_context_);
  reset();
  ensure_pages(depth);
  const int chunk = 4096, kvd = int(c.n_kv_heads * c.head_dim);
  Buffer kr(size_t(chunk) * kvd * 4), vr(size_t(chunk) * kvd * 4);
  for (int l = 0; l < int(c.n_layers); ++l)
    for (int p = 0; p < depth; p += chunk) {
      const int n = std::min(chunk, depth - p);
      check(ops::fill_normal(kr.as<float>(), int64_t(n) * kvd, seed + uint64_t(l) * 7919 + uint64_t(p), stream_),
            "fill");
      check(ops::fill_normal(vr.as<float>(), int64_t(n) * kvd, ~seed + uint64_t(l) * 7919 + uint64_t(p), stream_),
            "fill");
      encode_kv(target(l), kr.as<float>(), vr.as<float>(), n, p, stream_);
    }
  check(cudaStreamSynchronize(stream_), "fill_random");
  n_past_ = depth;
}

}  // namespace kvtax::cuda
