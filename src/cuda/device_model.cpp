#include "cuda/device_model.h"

#include <fmt/format.h>

#include <initializer_list>

#include "core/error.h"
#include "cuda/device_decoder.h"
#include "kv/codecs/layout.h"
#include "ops/cpu/elementwise.h"

namespace kvtax::cuda {
namespace {

std::unique_ptr<DeviceWeight> upload(const Weight& w, const char* what, int layer) {
  if (!w.data) return nullptr;
  if (!gemv_supported(w.type))
    fail("--device cuda: {} of layer {} is {}; the device GEMV takes F32, F16, BF16, Q8_0, Q4_0 and Q4_K", what,
         layer, ggml_type_name(w.type));
  try {
    return std::make_unique<DeviceWeight>(w.type, w.rows, w.cols, w.data);
  } catch (const Error& e) {
    fail("--device cuda: {} of layer {}: {}", what, layer, e.what());
  }
}

bool stackable(std::initializer_list<const Weight*> ws) {
  const Weight& a = **ws.begin();
  for (const Weight* w : ws)
    if (!w->data || w->type != a.type || w->cols != a.cols) return false;
  return gemv_supported(a.type);
}

std::unique_ptr<DeviceWeight> upload_stacked(std::initializer_list<const Weight*> ws, const char* what, int layer) {
  std::vector<DeviceWeight::Part> parts;
  for (const Weight* w : ws) parts.push_back({w->data, w->rows});
  const Weight& a = **ws.begin();
  try {
    return std::make_unique<DeviceWeight>(a.type, a.cols, parts);
  } catch (const Error& e) {
    fail("--device cuda: {} of layer {}: {}", what, layer, e.what());
  }
}

Buffer upload_f32(const float* p, size_t n) {
  if (!p) return {};
  Buffer b(n * 4);
  b.upload(p, n * 4);
  return b;
}

}  // namespace

void register_backend() {
  register_device("cuda", [](const Model& m) -> std::unique_ptr<DeviceBackend> {
    return std::make_unique<CudaBackend>(m);
  });
}

CudaBackend::CudaBackend(const Model& m) : m_(m) {
  if (!available()) fail("--device cuda: no CUDA device is visible (no driver or GPU on this machine)");
  const ModelConfig& c = m.config();
  if (!decode_supported(kv::CodecId::f16, int(c.head_dim)))
    fail("--device cuda: head_dim {} has no attention kernel (supported: 64, 128, 256)", c.head_dim);
  if (!ops::embed_supported(m.token_embd().type))
    fail("--device cuda: token_embd is {}; the device takes F32, F16, BF16, Q8_0, Q4_0 and Q4_K",
         ggml_type_name(m.token_embd().type));
  embd_ = upload(m.token_embd(), "token_embd", -1);
  if (m.output().data != m.token_embd().data) output_ = upload(m.output(), "output", -1);
  weight_bytes_ = embd_->bytes() + (output_ ? output_->bytes() : 0);
  const size_t d = c.d_model, hd = c.head_dim;
  output_norm_ = upload_f32(m.output_norm(), d);
  layers_.resize(c.n_layers);
  for (uint32_t l = 0; l < c.n_layers; ++l) {
    const LayerWeights& w = m.layers()[l];
    Layer& L = layers_[l];
    const int li = int(l);
    L.attn_norm = upload_f32(w.attn_norm, d);
    L.ffn_norm = upload_f32(w.ffn_norm, d);
    L.bq = upload_f32(w.bq, size_t(c.n_heads) * hd);
    L.bk = upload_f32(w.bk, size_t(c.n_kv_heads) * hd);
    L.bv = upload_f32(w.bv, size_t(c.n_kv_heads) * hd);
    L.q_norm = upload_f32(w.q_norm, hd);
    L.k_norm = upload_f32(w.k_norm, hd);
    if (stackable({&w.wq, &w.wk, &w.wv})) {
      L.wqkv = upload_stacked({&w.wq, &w.wk, &w.wv}, "attn_q|k|v", li);
    } else {
      L.wq = upload(w.wq, "attn_q", li);
      L.wk = upload(w.wk, "attn_k", li);
      L.wv = upload(w.wv, "attn_v", li);
    }
    if (stackable({&w.w_gate, &w.w_up})) {
      L.gate_up = upload_stacked({&w.w_gate, &w.w_up}, "ffn_gate|up", li);
    } else {
      L.gate = upload(w.w_gate, "ffn_gate", li);
      L.up = upload(w.w_up, "ffn_up", li);
    }
    L.wo = upload(w.wo, "attn_output", li);
    L.down = upload(w.w_down, "ffn_down", li);
    for (const auto* p : {&L.wqkv, &L.gate_up, &L.wq, &L.wk, &L.wv, &L.wo, &L.gate, &L.up, &L.down})
      if (*p) weight_bytes_ += (*p)->bytes();
  }
  const Rope cpu(c, m.rope_freqs());
  rope_.neox = cpu.kind() == RopeKind::neox;
  rope_.dim = cpu.dim();
  rope_.theta_scale = cpu.theta_scale();
  rope_.freq_scale = cpu.freq_scale();
  rope_.mscale = cpu.mscale();
  rope_factor_ = upload_f32(cpu.factors().data(), cpu.factors().size());
  rope_.factor = rope_factor_.as<float>();
  if (!cpu.ramp().empty()) {
    rope_ramp_ = upload_f32(cpu.ramp().data(), cpu.ramp().size());
    rope_.ramp = rope_ramp_.as<float>();
  }
  used_ = peak_ = weight_bytes_;
}

CudaBackend::~CudaBackend() = default;

std::string CudaBackend::describe() const {
  return fmt::format("{}; weights {:.2f} GiB on the device", device_summary(), double(weight_bytes_) / (1ull << 30));
}

void CudaBackend::account(size_t add, size_t remove) {
  used_ = used_ + add - remove;
  peak_ = std::max(peak_, used_);
}

size_t CudaBackend::capacity_tokens(const KvSpec& spec, size_t bytes) const {
  const ModelConfig& c = m_.config();
  const kv::CodecId codec = device_codec(spec, int(c.head_dim));
  const size_t page = kv_page_bytes(codec, int(c.n_kv_heads), int(c.head_dim));
  return bytes / page / c.n_layers * size_t(kv_page_tokens());
}

size_t CudaBackend::kv_bytes_for(const KvSpec& spec, size_t tokens) const {
  const ModelConfig& c = m_.config();
  const kv::CodecId codec = device_codec(spec, int(c.head_dim));
  const size_t page = kv_page_bytes(codec, int(c.n_kv_heads), int(c.head_dim)), P = size_t(kv_page_tokens());
  return (tokens + P - 1) / P * c.n_layers * page;
}

std::unique_ptr<DeviceDecoder> CudaBackend::decoder(const KvSpec& spec, int max_context, size_t reserve_bytes) {
  return std::make_unique<CudaDecoder>(*this, device_codec(spec, int(m_.config().head_dim)), max_context,
                                       reserve_bytes);
}

std::shared_ptr<DeviceKvPool> CudaBackend::kv_pool(const KvSpec& spec, size_t bytes) {
  const ModelConfig& c = m_.config();
  const kv::CodecId codec = device_codec(spec, int(c.head_dim));
  const size_t page = kv_page_bytes(codec, int(c.n_kv_heads), int(c.head_dim));
  // Whole pages for every layer: a page index of one layer is useless without the others'.
  const size_t pages = bytes / page / c.n_layers * c.n_layers;
  if (pages == 0)
    fail("--device cuda: a KV reservation of {} bytes holds no page ({} KiB per layer, {} layers)", bytes,
         page >> 10, c.n_layers);
  return std::make_shared<CudaKvPool>(*this, codec, pages);
}

std::unique_ptr<DeviceDecoder> CudaBackend::shared_decoder(const KvSpec& spec, int max_context,
                                                           std::shared_ptr<DeviceKvPool> pool) {
  auto p = std::dynamic_pointer_cast<CudaKvPool>(pool);
  if (!p) fail("--device cuda: the KV pool was not made by this backend");
  if (p->codec() != device_codec(spec, int(m_.config().head_dim)))
    fail("--device cuda: KV spec '{}' differs from the pool's codec {}", spec.str(), kv::codec(p->codec()).name);
  return std::make_unique<CudaDecoder>(*this, std::move(p), max_context);
}

}  // namespace kvtax::cuda
