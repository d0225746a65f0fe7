#pragma once
// The whole model on one CUDA device: weights uploaded once (CudaBackend), and per sequence a paged KV
// cache plus activations (CudaDecoder). Each token runs embed -> per layer (RMSNorm, q/k/v GEMV, bias,
// q/k norm, RoPE, KV encode into the pages, flash-decode attention, output GEMV, residual, RMSNorm,
// SwiGLU feed-forward, residual) -> final norm -> logits GEMV; only the logits come back to the host.
// Prefill runs in chunks through the batched path (cuBLAS GEMMs, tensor-core attention: CudaDecoder::run_chunk).
#include <memory>
#include <string>
#include <vector>

#include "cuda/attention.h"
#include "cuda/gemv.h"
#include "cuda/ops.h"
#include "cuda/runtime.h"
#include "engine/device.h"
#include "model/model.h"

namespace kvtax::cuda {

// Registers "cuda" with engine/device.h (main() calls it in CUDA builds).
void register_backend();

class CudaBackend : public DeviceBackend {
 public:
  // Throws kvtax::Error when no device is present, or naming a tensor whose type or shape the device
  // kernels do not take.
  explicit CudaBackend(const Model& m);
  ~CudaBackend() override;

  std::string describe() const override;
  size_t weight_bytes() const override { return weight_bytes_; }
  size_t device_bytes() const override { return used_; }
  size_t peak_device_bytes() const override { return peak_; }
  size_t capacity_tokens(const KvSpec& spec, size_t bytes) const override;
  size_t kv_bytes_for(const KvSpec& spec, size_t tokens) const override;
  std::unique_ptr<DeviceDecoder> decoder(const KvSpec& spec, int max_context, size_t reserve_bytes) override;
  std::shared_ptr<DeviceKvPool> kv_pool(const KvSpec& spec, size_t bytes) override;
  std::unique_ptr<DeviceDecoder> shared_decoder(const KvSpec& spec, int max_context,
                                                std::shared_ptr<DeviceKvPool> pool) override;

  struct Layer {
    Buffer attn_norm, ffn_norm, bq, bk, bv, q_norm, k_norm;
    // q|k|v and gate|up stacked into one matrix each when their types match (one GEMV each); otherwise
    // the separate matrices.
    std::unique_ptr<DeviceWeight> wqkv, gate_up;
    std::unique_ptr<DeviceWeight> wq, wk, wv, wo, gate, up, down;
  };
  const Model& model() const { return m_; }
  const std::vector<Layer>& layers() const { return layers_; }
  const DeviceWeight& embedding() const { return *embd_; }
  const DeviceWeight& output() const { return output_ ? *output_ : *embd_; }
  const float* output_norm() const { return output_norm_.as<float>(); }
  const ops::RopeParams& rope() const { return rope_; }
  // Device bytes a decoder takes and gives back (for device_bytes / peak).
  void account(size_t add, size_t remove);

 private:
  const Model& m_;
  std::vector<Layer> layers_;
  std::unique_ptr<DeviceWeight> embd_, output_;
  Buffer output_norm_, rope_factor_, rope_ramp_;
  ops::RopeParams rope_;
  size_t weight_bytes_ = 0, used_ = 0, peak_ = 0;
};

}  // namespace kvtax::cuda
