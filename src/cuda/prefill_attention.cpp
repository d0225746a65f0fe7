#include "cuda/prefill_attention.h"

#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "cuda/attention_launch.h"
#include "cuda/codec_tables.h"
#include "cuda/paged_kv_args.h"
#include "cuda/prefill_launch.h"
#include "kv/codecs/formats.h"
#include "kv/codecs/layout.h"

namespace kvtax::cuda {
namespace {

// Warps per block: 16 decode each K/V tile once for 256 rows instead of 128 (half the decode work per row), 8
// let two blocks share an SM. Measured on the H200 at 32k (docs/perf.md, prefill6): 16 is 7-13% faster for
// every decoding codec, 8 is 3% faster for f16, which has no decode. KVTAX_PREFILL_WARPS=8|16 overrides
// (measurements, tests).
int warps_for(kv::CodecId c) {
  if (const char* e = std::getenv("KVTAX_PREFILL_WARPS")) {
    const std::string v(e);
    if (v == "8" || v == "16") return std::stoi(v);
    fail("KVTAX_PREFILL_WARPS={}: expected 8 or 16", v);
  }
  return c == kv::CodecId::f16 ? 8 : 16;
}

// The warpgroup-MMA kernel wherever the device runs it; KVTAX_PREFILL_KERNEL=mma|wgmma chooses (measurements,
// tests; wgmma where the device has none is an error).
bool use_wgmma() {
  if (const char* e = std::getenv("KVTAX_PREFILL_KERNEL")) {
    const std::string v(e);
    if (v == "mma") return false;
    if (v != "wgmma") fail("KVTAX_PREFILL_KERNEL={}: expected mma or wgmma", v);
    if (!detail::prefill_wgmma_available())
      fail("KVTAX_PREFILL_KERNEL=wgmma: this device or build has no wgmma (sm_90a) kernel");
    return true;
  }
  return detail::prefill_wgmma_available();
}

// f32 rows converted by pairs of blocks in the wgmma kernel (prefill_wgmma.cu); KVTAX_PREFILL_SPLIT=0 has each block
// convert alone (measurements, tests).
bool split_tiles() {
  if (const char* e = std::getenv("KVTAX_PREFILL_SPLIT")) {
    const std::string v(e);
    if (v != "0" && v != "1") fail("KVTAX_PREFILL_SPLIT={}: expected 0 or 1", v);
    return v == "1";
  }
  return true;
}

}  // namespace

bool prefill_supported(kv::CodecId codec, int head_dim) {
  return int(codec) < kv::kNumCodecs && (head_dim == 64 || head_dim == 128);
}

namespace {

// out16: null for f32 output into out.
void run_prefill(const KvView& kv, const float* q, int n_tok, int pos0, int n_heads, float* out, uint16_t* out16,
                 bool bf16, cudaStream_t stream, QRope rope) {
  if (!prefill_supported(kv.codec, kv.head_dim))
    fail("CUDA prefill attention: no kernel for codec {} with head_dim {} (supported: 64, 128)",
         int(kv.codec) < kv::kNumCodecs ? kv::codec(kv.codec).name : "?", kv.head_dim);
  if (n_heads <= 0 || n_heads % kv.n_kv_heads != 0)
    fail("CUDA prefill attention: {} query heads is not a multiple of {} KV heads", n_heads, kv.n_kv_heads);
  if (n_tok <= 0 || pos0 < 0 || int64_t(pos0) + n_tok != kv.len || kv.len > kv.max_len)
    fail("CUDA prefill attention: {} tokens at position {} over a KV of {} tokens ({} covered by pages)", n_tok,
         pos0, kv.len, kv.max_len);
  if (int64_t(n_tok) * n_heads > (int64_t(1) << 28))
    fail("CUDA prefill attention: chunk of {} tokens x {} heads is too large", n_tok, n_heads);
  if (reinterpret_cast<uintptr_t>(rope.cs) % 16 != 0)
    fail("CUDA prefill attention: RoPE factors at {} are not 16-byte aligned", static_cast<const void*>(rope.cs));
  detail::PrefillArgs a{};
  static_cast<detail::PagedKvArgs&>(a) = detail::paged_kv_args(kv, n_heads, q, out);
  a.n_tok = n_tok;
  a.pos0 = pos0;
  a.warps = warps_for(kv.codec);
  a.wgmma = use_wgmma();
  a.split = split_tiles();
  a.out16 = out16;
  a.out_bf16 = bf16;
  a.signs = kv::layout::rotated(kv.codec) ? codec_tables().signs.as<float>() : nullptr;
  a.rope = rope.cs;
  a.rope_neox = rope.neox;
  check(detail::launch_prefill(a, stream), "prefill attention launch");
}

}  // namespace

void prefill_attention(const KvView& kv, const float* q, int n_tok, int pos0, int n_heads, float* out,
                       cudaStream_t stream, QRope rope) {
  run_prefill(kv, q, n_tok, pos0, n_heads, out, nullptr, false, stream, rope);
}

void prefill_attention_half(const KvView& kv, const float* q, int n_tok, int pos0, int n_heads, void* out,
                            bool bf16, cudaStream_t stream, QRope rope) {
  run_prefill(kv, q, n_tok, pos0, n_heads, nullptr, static_cast<uint16_t*>(out), bf16, stream, rope);
}

}  // namespace kvtax::cuda
