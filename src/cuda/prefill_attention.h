#pragma once
// Causal flash attention for a prefill chunk over the paged device KV, on tensor cores. The chunk's K/V rows
// are encoded into the pages first; each block then takes 128 or 256 (position, query head) rows of one GQA group,
// walks the cache in tiles of 64 tokens, decodes each K and V tile from the codec format into shared memory
// as f16 (kv::layout::unit_decode, the decoder the CPU and flash-decode use), and multiplies with
// mma.sync m16n8k16 (f16 operands, f32 accumulation) under an online softmax. No f16 copy of the window and
// no [heads, L, ctx] buffer: what crosses device memory is q, the codec rows and the output.
#include <cuda_runtime_api.h>

#include "cuda/attention.h"

namespace kvtax::cuda {

// head_dim 64 or 128 with any codec (head_dim 256 would spill the accumulators: prefill it token by token).
bool prefill_supported(kv::CodecId codec, int head_dim);

// RoPE for the kernel to apply to q as it stages it, so that q takes no pass of its own through memory: pair i of
// chunk row t turns by cs[t * head_dim / 2 + i] (cos, sin; ops::rope_rows writes them with cs_out; 16-byte
// aligned), over all head_dim values; halves (neox) or adjacent pairs. The same float steps as ops::rope_rows.
struct QRope {
  const float2* cs = nullptr;
  bool neox = false;
};

// q: device [n_tok][n_heads][head_dim] f32 for positions pos0 .. pos0 + n_tok - 1 (after RoPE, unless `rope`
// has the kernel apply it; q is not written). kv.len must be pos0 + n_tok: the chunk's own rows are in the pages.
// out: device [n_tok][n_heads][head_dim]; scale 1/sqrt(head_dim); query i attends to tokens 0 .. pos0 + i. For
// the rotated codecs the kernel rotates q as it stages it and rotates the output back before storing it.
void prefill_attention(const KvView& kv, const float* q, int n_tok, int pos0, int n_heads, float* out,
                       cudaStream_t stream = nullptr, QRope rope = {});

// As prefill_attention, with out written as 16-bit values (bf16, else f16; rounded to nearest even, as
// GemmRunner::round rounds the f32 output) for the next product's input.
void prefill_attention_half(const KvView& kv, const float* q, int n_tok, int pos0, int n_heads, void* out,
                            bool bf16, cudaStream_t stream = nullptr, QRope rope = {});

}  // namespace kvtax::cuda
