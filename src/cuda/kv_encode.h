#pragma once
// KV rows encoded on the device, in the formats of kv/codecs (layout.h), written straight into the
// pages the attention kernel reads. Matches the CPU encoders bit for bit for f32, f16, bf16, fp8, q8, q4
// and q4r (same float steps; the q4r rotation is the CPU's butterfly order); tq4/tq3 sum their norms
// in double in the CPU's order too, so they match as well unless sinf-free float steps differ (tested).
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "cuda/attention.h"
#include "cuda/ops.h"
#include "kv/codecs/codec.h"
#include "kv/codecs/layout.h"

namespace kvtax::cuda {

// Where encode_kv writes: one layer's pages (as KvView describes them), writable.
struct KvTarget {
  kv::CodecId codec;
  int n_kv_heads, head_dim;
  size_t row_bytes, page_bytes;
  uint8_t* pool;
  const int32_t* pages;  // device; must cover positions pos0 .. pos0 + n_tok - 1
};

// k, v: device [n_tok][n_kv_heads][head_dim] f32 (after RoPE, not rotated): encoded (rotated first for
// rotated codecs) into positions pos0 .. pos0 + n_tok - 1, or pos_dev[t] (device, read at run time).
void encode_kv(const KvTarget& dst, const float* k, const float* v, int n_tok, int pos0, cudaStream_t s = nullptr,
               const int* pos_dev = nullptr);

// The same with RoPE fused in (one launch instead of two in the decode step): k is rotated by `rope` as it is
// encoded (k itself is left as it was), and q ([n_tok][n_q][head_dim]) is rotated in place, both at the tokens'
// positions, exactly as ops::rope_qk then encode_kv would. rotate_q (rotated codecs, head_dim 64, 128 or 256): q is
// then also rotated as K is, for decode_attention(..., q_rotated = true).
void encode_kv_rope(const KvTarget& dst, float* q, int n_q, const float* k, const float* v, int n_tok, int pos0,
                    const ops::RopeParams& rope, cudaStream_t s = nullptr, const int* pos_dev = nullptr,
                    bool rotate_q = false);

// Whether encode_kv_rope can rotate q for this codec and head width (the encode kernel's compile-time widths).
constexpr bool q_rotation_fuses(kv::CodecId codec, int head_dim) {
  return kv::layout::rotated(codec) && (head_dim == 64 || head_dim == 128 || head_dim == 256);
}

// Encodes n rows of d values (device, [n][d], not rotated) into contiguous rows (device, [n][row_bytes]):
// the same kernel as encode_kv, for tests against the CPU encoders and for filling a KV to a depth.
void encode_rows(kv::CodecId codec, int d, const float* x, int n, uint8_t* rows, cudaStream_t s = nullptr);

}  // namespace kvtax::cuda
