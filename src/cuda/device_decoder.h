#pragma once
// One sequence on the device: a paged KV cache carved from a reservation, activations, and the token
// step (device_model.h describes the order of kernels).
#include <cstdint>
#include <memory>
#include <vector>

#include "cuda/device_model.h"
#include "cuda/gemm.h"
#include "cuda/kv_encode.h"
#include "cuda/kv_pool.h"

namespace kvtax::cuda {

// The codec of a KV spec the device path serves (same codec for K and V, no window or recent tier);
// throws kvtax::Error naming what it does not serve.
kv::CodecId device_codec(const KvSpec& spec, int head_dim);

class CudaDecoder : public DeviceDecoder {
 public:
  // Tokens per eval(). Several tokens go through the layers together (batched prefill: cuBLAS GEMMs and
  // tensor-core attention over the pages) in chunks of prefill_chunk() rows (default_chunk() unless set), which
  // bound the activations.
  static constexpr int kMaxBatch = 32768;
  // Every chunk reads all the weights (quantized ones are also expanded to bf16 for its GEMMs), so longer chunks read
  // them fewer times. 16-bit weights: 8192 rows (H200, session 12: 0.014-0.027 s off 4096's TTFT of a 32k prompt;
  // 16384 no faster). Quantized weights: 32768 rows where their activations (prefill_row_bytes(), 0.18 MB a row at
  // llama3-8b's width) take at most half the free memory, else 16384 (H200, Q4_K weights, f32 KV, TTFT of a 32k
  // prompt: 16384 rows 0.024-0.039 s faster than 4096, session 12; 32768 1.483-1.493 s against 16384's
  // 1.497-1.498, session 29).
  int default_chunk() const;
  size_t prefill_row_bytes() const;

  // reserve_bytes 0: pages for max_context tokens; otherwise that many bytes of pages, which must hold
  // max_context tokens.
  CudaDecoder(CudaBackend& b, kv::CodecId codec, int max_context, size_t reserve_bytes);
  // Pages from a pool other decoders share; eval() fails when the pool runs out (the server admits
  // requests by the pages they can need, so it does not).
  CudaDecoder(CudaBackend& b, std::shared_ptr<CudaKvPool> pool, int max_context);
  ~CudaDecoder() override;

  void eval(const int32_t* tokens, int n, float* logits, bool all_logits = false) override;
  float* logits_row() override { return logits_host_.as<float>(); }
  bool has_pick() const override { return true; }
  int32_t eval_pick(const int32_t* tokens, int n, const TokenPick& pick) override;
  int n_past() const override { return n_past_; }
  int max_context() const override { return max_context_; }
  int max_batch() const override { return kMaxBatch; }
  const Model& model() const override { return b_.model(); }
  void reset() override;

  size_t kv_bytes_used() const override;
  size_t kv_bytes_reserved() const override { return pool_->bytes(); }
  size_t kv_bytes_per_token() const override;
  size_t capacity_tokens() const override { return capacity_; }
  size_t scratch_bytes() const override { return scratch_bytes_ + prefill_bytes_; }
  void truncate(int n) override;
  void prepare(int max_batch) override;

  // Benchmarks: the cache filled to `depth` tokens with random vectors encoded on the device (decode
  // speed does not depend on the stored values), as if that many tokens had been evaluated.
  void fill_random(int depth, uint64_t seed);
  cudaStream_t stream() const { return stream_; }
  // Layer `layer`'s pages as the attention kernels read them, len tokens (benchmarks).
  KvView layer_view(int layer, int len) const { return view(layer, len); }
  KvTarget layer_target(int layer) const { return target(layer); }
  // Single-token evals replay one captured CUDA graph of the whole step (default; KVTAX_CUDA_GRAPH=0 turns
  // it off) instead of launching its ~15-20 kernels per layer one by one.
  void use_graph(bool on) { use_graph_ = on; }
  // Benchmarks: the last step's graph launched n times back to back, then a wait (the step's device time without the
  // host between steps; each launch recomputes the same token at the same position).
  void replay_graph(int n);
  bool has_graph() const { return graph_exec_ != nullptr; }
  // Batched prefill (default where the attention kernel takes the head_dim; KVTAX_CUDA_PREFILL=0 turns it
  // off) or every token through the decode step; rows per chunk (1..kMaxBatch).
  void use_batched_prefill(bool on) { batched_ = on; }
  void set_prefill_chunk(int rows);
  int prefill_chunk() const { return chunk_; }
  // Whether the decode step runs its residual adds and norms inside the wo / down GEMVs (KVTAX_FUSED_NORM).
  bool fused_norm() const { return fused_norm_; }

 private:
  // Token t of the current eval(): ids/positions/lengths are read from io_ on the device. host_len > 0
  // sizes the attention grid for that length; 0 reads the length at run time (graph capture).
  void launch_token(int t, int host_len, bool logits);
  // What eval() and eval_pick() share: the tokens through the model, take(r) queued on the stream when row r's
  // logits are in logits_ (every row with all_logits, else the last), then a wait for the stream. A template, not a
  // std::function: its callers' lambdas would be allocated on every token.
  template <class Take>
  void run(const int32_t* tokens, int n, bool all_logits, const Take& take);
  void run_graph();
  // Rows off .. off+n-1 of the current eval() through every layer at positions n_past_ + off ...
  void run_chunk(int off, int n);
  // Logits of row t of the last prefill chunk into logits_ (output norm + GEMV).
  void chunk_logits(int t);
  void ensure_prefill_buffers();
  float* f32_rows(Buffer& b, size_t width);  // b, allocated for chunk_ rows of width floats if it is not yet
  void init();  // after pool_, capacity_ and max_pages_ are set: page table, activations, stream
  void ensure_pages(int tokens);
  void release_pages(int keep);  // pages beyond the first `keep` of every layer go back to the pool
  KvView view(int layer, int len, const int* len_dev = nullptr) const;
  KvTarget target(int layer) const;

  CudaBackend& b_;
  kv::CodecId codec_;
  int max_context_ = 0, n_past_ = 0, capacity_ = 0, max_pages_ = 0, pages_used_ = 0;
  size_t row_bytes_ = 0, page_bytes_ = 0, scratch_bytes_ = 0;
  std::shared_ptr<CudaKvPool> pool_;
  Buffer table_;                   // page table [layer][max_pages_]
  std::vector<int32_t> table_host_;
  Buffer x_, xb_, xb2_, qkv_, att_, gu_, logits_, gemv_scratch_, attn_scratch_;
  // The normed x's int8 codes (the GEMVs after a norm read them; gemv_scratch_ holds the other inputs' codes, so a
  // GEMV's residual epilogue never overwrites codes its own blocks still read), and its blocks' sums of squares.
  Buffer norm_scratch_, ss_part_;
  bool fused_norm_ = true;  // the residual adds and norms run in the wo / down GEMVs (KVTAX_FUSED_NORM=0: kernels)
  // Quantized gate|up weights write the int8 codes of silu(gate) * up for down (KVTAX_SWIGLU_CODES=0: down's own
  // quantizer kernel makes them from gate and up).
  bool swiglu_codes_ = true;
  Buffer io_;                     // int32 [3][n] of the current eval of n tokens: ids, positions, lengths (position
                                  // + 1); packed, so a decode step uploads 12 bytes (the graph is captured at n 1)
  int io_n_ = 1;
  HostBuffer io_host_;            // io_'s values, page-locked (so is logits_host_: the one-row logits' way out)
  HostBuffer logits_host_;
  Buffer pick_;           // the picks' scratch (pick.h), then the index picked (eval_pick)
  HostBuffer pick_host_;  // the index, page-locked
  cudaStream_t stream_ = nullptr;
  bool use_graph_ = true, graph_failed_ = false, batched_ = true;
  int chunk_ = 4096;  // set by init()
  // Prefill activations for chunk_ rows (allocated on the first batched eval): residual, q, k, v, gate and up; the
  // f32 paths' norm, attention output and projection / down output only on their first use (f32_rows).
  Buffer px_, pxb_, pq_, pk_, pv_, patt_, py_, pg_, pu_;
  Buffer pcs_;  // the chunk's RoPE factors, [chunk][head_dim / 2] float2, for the attention to turn q (QRope)
  size_t prefill_bytes_ = 0;
  std::unique_ptr<GemmRunner> gemm_;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t graph_exec_ = nullptr;
};

}  // namespace kvtax::cuda
