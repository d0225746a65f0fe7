#pragma once
// Boundary between kv_encode.cpp (checks, tables) and kv_encode.cu (kernels).
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "cuda/ops.h"
#include "kv/codecs/codec.h"

namespace kvtax::cuda::detail {

struct EncodeTables {   // device pointers
  const float* signs;   // rotation diagonal, >= head_dim entries
  const float* levels;  // tq4: 16 levels, tq3: 8 (nullptr otherwise)
  const float* thresholds;  // midpoints between neighbouring levels
};

struct EncodeArgs {
  kv::CodecId codec;
  int d, n_kv, n_tok, pos0;
  const int* pos_dev;  // device positions per token (else pos0 + t)
  size_t row_bytes;
  const float* k;  // [n_tok][n_kv][d]
  const float* v;  // nullptr: rows mode (k only, n_tok rows, n_kv == 1)
  // Paged destination (encode_kv) ...
  uint8_t* pool;
  const int32_t* pages;
  size_t page_bytes, head_stride, v_offset;
  // ... or contiguous rows (encode_rows) when pages is nullptr.
  uint8_t* rows;
  EncodeTables t;
  // RoPE fused in (the decode step): k rotated in shared memory before it is encoded, and q ([n_tok][n_q][d])
  // rotated in place by warps past the K/V rows, all at the tokens' positions.
  bool rope = false;
  float* q = nullptr;
  int n_q = 0;
  ops::RopeParams rp;
  // Rotated codecs: q is also rotated as K is (after RoPE), so the attention reads it as it is (DecodeArgs::q_rotated).
  bool rotate_q = false;
};

cudaError_t launch_encode(const EncodeArgs& a, cudaStream_t s);

}  // namespace kvtax::cuda::detail
