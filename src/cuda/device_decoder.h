#pragma once
// One sequence on the device: a paged KV cache carved from a reservation, activations, and the token
// step (device_model.h describes the order of kernels).
#include <cstdint>
#include <vector>

#include "cuda/device_model.h"
#include "cuda/kv_encode.h"

namespace kvtax::cuda {

// The codec of a KV spec the device path serves (same codec for K and V, no window or recent tier);
// throws kvtax::Error naming what it does not serve.
kv::CodecId device_codec(const KvSpec& spec, int head_dim);

class CudaDecoder : public DeviceDecoder {
 public:
  static constexpr int kMaxBatch = 512;  // tokens per eval(); prefill runs them one at a time

  // reserve_bytes 0: pages for max_context tokens; otherwise that many bytes of pages, which must hold
  // max_context tokens.
  CudaDecoder(CudaBackend& b, kv::CodecId codec, int max_context, size_t reserve_bytes);
  ~CudaDecoder() override;

  void eval(const int32_t* tokens, int n, float* logits, bool all_logits = false) override;
  int n_past() const override { return n_past_; }
  int max_context() const override { return max_context_; }
  int max_batch() const override { return kMaxBatch; }
  const Model& model() const override { return b_.model(); }
  void reset() override;

  size_t kv_bytes_used() const override;
  size_t kv_bytes_reserved() const override { return pool_.bytes(); }
  size_t kv_bytes_per_token() const override;
  size_t capacity_tokens() const override { return capacity_; }
  size_t scratch_bytes() const override { return scratch_bytes_; }

  // Benchmarks: the cache filled to `depth` tokens with random vectors encoded on the device (decode
  // speed does not depend on the stored values), as if that many tokens had been evaluated.
  void fill_random(int depth, uint64_t seed);
  cudaStream_t stream() const { return stream_; }
  // Single-token evals replay one captured CUDA graph of the whole step (default; KVTAX_CUDA_GRAPH=0 turns
  // it off) instead of launching its ~15-20 kernels per layer one by one.
  void use_graph(bool on) { use_graph_ = on; }

 private:
  // Token t of the current eval(): ids/positions/lengths are read from io_ on the device. host_len > 0
  // sizes the attention grid for that length; 0 reads the length at run time (graph capture).
  void launch_token(int t, int host_len, bool logits);
  void run_graph();
  void ensure_pages(int tokens);
  KvView view(int layer, int len, const int* len_dev = nullptr) const;
  KvTarget target(int layer) const;

  CudaBackend& b_;
  kv::CodecId codec_;
  int max_context_ = 0, n_past_ = 0, capacity_ = 0, max_pages_ = 0, pages_used_ = 0;
  size_t row_bytes_ = 0, page_bytes_ = 0, scratch_bytes_ = 0;
  Buffer pool_, table_;            // pages; page table [layer][max_pages_]
  std::vector<int32_t> table_host_, free_;
  Buffer x_, xb_, xb2_, qkv_, att_, gu_, logits_, gemv_scratch_, attn_scratch_;
  Buffer io_;                     // int32 [3][kMaxBatch]: token ids, positions, lengths (position + 1)
  std::vector<int32_t> io_host_;
  cudaStream_t stream_ = nullptr;
  bool use_graph_ = true, graph_failed_ = false;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t graph_exec_ = nullptr;
};

}  // namespace kvtax::cuda
