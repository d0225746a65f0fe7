#pragma once
// Boundary between attention.cpp (checks, errors) and attention.cu (kernels): plain data, no fmt.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "cuda/gemv_launch.h"
#include "kv/codecs/codec.h"

namespace kvtax::cuda::detail {

constexpr int kDecodeThreads = 128;
constexpr int kMaxGroupRows = 8;  // query heads of one GQA group handled by one block of the scalar kernel
constexpr int kMmaGroupRows = 16;  // ... of the tensor-core kernel (the M rows of mma.sync m16n8k16)
constexpr int kChunkAlign = 16;    // context chunks start at multiples of this (the tensor-core kernel's tile)
// The decode merge stages up to merge_batch chunks' partials (head_dim + 2 floats each) per memory round trip; its
// block's shared memory, which the split kernel's rings leave room for where they can (attention_mma.cu). 72 below
// head_dim 256: q4 and q4r split 8 KV heads into 66 chunks on 132 SMs (4 blocks per SM), one round trip.
constexpr int merge_batch(int d) { return d >= 256 ? 32 : 72; }
constexpr int merge_smem_bytes(int d) { return merge_batch(d) * (d + 3) * 4 + d * 4 + 2 * (d / 32) * 4; }
// Its staged rows (dynamic shared memory) for n chunks.
constexpr int merge_stage_bytes(int d, int n) {
  return (n < merge_batch(d) ? n : merge_batch(d)) * (d + 2) * 4;
}

// Codecs the tensor-core kernel decodes (attention_mma.cu). f32 stays on the scalar f32 kernel, whose result is exact
// to f32 rounding.
constexpr bool mma_codec(kv::CodecId c) { return c != kv::CodecId::f32; }
constexpr int group_rows(kv::CodecId c) { return mma_codec(c) ? kMmaGroupRows : kMaxGroupRows; }
// KV pages: kPageTokens tokens of one layer, K rows [kv_head][kPageTokens][row_bytes] then V rows.
constexpr int kPageShift = 8, kPageTokens = 1 << kPageShift;

// One layer's paged K/V and the q / out rows, as the decode and the prefill kernels both read them.
struct PagedKvArgs {
  kv::CodecId codec;
  int head_dim, n_kv_heads, n_rep;
  size_t row_bytes, head_stride, page_bytes, v_offset;  // head_stride: within a page
  const uint8_t* pool;
  const int32_t* pages;  // device: page index of tokens [i * kPageTokens, (i+1) * kPageTokens)
  const float* q;
  float* out;
  const float* levels;  // device tq codebook (n_levels entries) or nullptr
  int n_levels;
};

struct DecodeArgs : PagedKvArgs {
  int len, chunk, n_splits;
  const int* len_dev;  // device length, read at run time (then len and chunk are unused)
  float* part;  // [n_heads][n_splits][head_dim + 2]
  const float* signs;  // device rotation signs (rotated codecs; tensor-core kernel)
  QuantX codes;        // set: the merge also writes out's int8 codes for the quantized GEMV that reads out
  bool q_rotated;      // rotated codecs: q is rotated already (encode_kv_rope's rotate_q)
};

// cudaErrorInvalidValue for a codec / head_dim without a kernel.
cudaError_t launch_decode(const DecodeArgs& a, cudaStream_t stream);
// The tensor-core split kernel alone (attention_mma.cu): partials into a.part, no merge.
cudaError_t launch_decode_mma(const DecodeArgs& a, cudaStream_t stream);
cudaError_t decode_mma_blocks_per_sm(kv::CodecId codec, int head_dim, int n_rep, int* blocks);
// Blocks of the split kernel for (codec, head_dim, n_rep) that fit on one SM at once.
cudaError_t decode_blocks_per_sm(kv::CodecId codec, int head_dim, int n_rep, int* blocks);

}  // namespace kvtax::cuda::detail
