#pragma once
// Boundary between prefill_attention.cpp (checks, tables) and prefill_attention.cu (kernels).
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "cuda/attention_launch.h"
#include "kv/codecs/codec.h"

namespace kvtax::cuda::detail {

// q, out: [n_tok][n_kv_heads * n_rep][head_dim]; q rotated for rotated codecs.
struct PrefillArgs : PagedKvArgs {
  int n_tok, pos0;
  int warps;  // mma.sync kernel: 8 (128 rows per block, two blocks per SM) or 16 (256 rows, one block; where shared
             // memory allows)
  bool wgmma;  // the warpgroup-MMA kernel (prefill_wgmma.cu) instead, for head_dim 128; only where
              // prefill_wgmma_available()
  bool split;  // wgmma, f32 rows: pairs of blocks share each tile's conversion (prefill_wgmma.cu, kSplit)
  uint16_t* out16;  // set: the output goes here as 16-bit values (bf16 with out_bf16, else f16), not to out
  bool out_bf16;
  const float* signs;  // rotated codecs: the rotation's D signs; q is rotated as it is staged, the output
                       // rotated back before it is stored (kv/rotation.h's steps). Null otherwise.
  const float2* rope;  // set: q is RoPE-turned as it is staged, before any codec rotation: pair i of chunk row t by
                       // rope[t * D / 2 + i] (cos, sin); pairs of halves with rope_neox, else adjacent pairs
  bool rope_neox;
};

cudaError_t launch_prefill(const PrefillArgs& a, cudaStream_t s);
// Whether this device runs the wgmma kernel (an sm_90a build on a Hopper GPU).
bool prefill_wgmma_available();
cudaError_t launch_prefill_wgmma(const PrefillArgs& a, cudaStream_t s);

}  // namespace kvtax::cuda::detail
