#pragma once
// The small per-token kernels of a transformer block on the device, each the counterpart of a CPU op in
// ops/cpu/elementwise.h (same order of float operations where it matters for comparing logits).
// Plain data in and cudaError_t out: ops.cu holds the kernels, callers check.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "cuda/gemv_launch.h"
#include "ggml/types.h"

namespace kvtax::cuda::ops {

// Rotary embedding as model/config.h describes it (ops/cpu/elementwise.cpp's Rope).
struct RopeParams {
  bool neox = false;          // halves instead of adjacent pairs
  int dim = 0;                // rotated dims (rope_dim)
  float theta_scale = 1.0f;   // theta_i = pos * theta_scale^i
  float freq_scale = 1.0f;
  float mscale = 1.0f;
  const float* factor = nullptr;  // device [dim/2] per-pair divisors (llama3), 1 without
  const float* ramp = nullptr;    // device [dim/2] YaRN mix, or nullptr
};

bool embed_supported(GgmlType t);  // F32, F16, BF16, Q8_0, Q4_0, Q4_K
// out[i][:] = row ids[i] of the table (d columns, d a multiple of 256 for the quantized types).
cudaError_t embed(GgmlType t, const uint8_t* table, size_t row_bytes, const int32_t* ids, int n, int d, float* out,
                  cudaStream_t s);
// One token's row of the table into x (d columns, a multiple of 32), then the norm by w as a fused decode step leaves
// it for the GEMVs after it (gemv.h's GemvFusion::res): xw = x * w without the 1/rms, xw's int8 codes if q.xq is set,
// and the sum of squares of each 32 values of x in ss_part[d / 32]. The step's first kernel: no one-block norm
// between it and the first GEMV.
cudaError_t embed_norm_part(GgmlType t, const uint8_t* table, size_t row_bytes, const int32_t* id, int d, float* x,
                            const float* w, float* xw, double* ss_part, const detail::QuantX& q, cudaStream_t s);
// rows vectors of n: out = x / rms(x) * w (out may alias x).
cudaError_t rmsnorm(const float* x, const float* w, float* out, int rows, int n, float eps, cudaStream_t s);
// x += y (y may be null), then out = x / rms(x) * w: the residual add and the next norm in one pass (one row
// of n). With q.xq set (n a multiple of 32), also out's int8 codes for the next quantized GEMV (gemv.h's
// x_in_scratch; q from detail::gemv_quant_x).
cudaError_t add_rmsnorm(float* x, const float* y, const float* w, float* out, int n, float eps, cudaStream_t s,
                        const detail::QuantX& q = {});
// x += y (y may be null) over rows (> 1) of n (a multiple of 4), then out = x / rms(x) * w rounded to bf16 or f16
// (as GemmRunner::round would round the f32 norm): the prefill's residual add, norm and the products' 16-bit input
// in one pass.
cudaError_t add_rmsnorm_half(float* x, const float* y, const float* w, void* out, int rows, int n, bool bf16,
                             float eps, cudaStream_t s);
// x += y over n values; x[r][:] += b[:] for rows of n (bias); g = silu(g) * u.
cudaError_t add(float* x, const float* y, int64_t n, cudaStream_t s);
cudaError_t add_rows(float* x, const float* b, int rows, int n, cudaStream_t s);
cudaError_t silu_mul(float* g, const float* u, int64_t n, cudaStream_t s);
// n_tok tokens of q (n_q heads: [n_tok][n_q][head_dim]) and k (n_k heads) at positions pos0 + t; q may be null
// with n_q 0. cs_out, if set: each token's cos and sin (times mscale) of the p.dim / 2 pairs, [n_tok][p.dim / 2], for
// a kernel that rotates q itself (prefill_attention's QRope).
cudaError_t rope_rows(float* q, int n_q, float* k, int n_k, int n_tok, int head_dim, int pos0, const RopeParams& p,
                      cudaStream_t s, float2* cs_out = nullptr);

// One token's q (n_q heads) and k (n_k heads) in one launch, at position *pos_dev.
cudaError_t rope_qk(float* q, int n_q, float* k, int n_k, int head_dim, const int* pos_dev, const RopeParams& p,
                    cudaStream_t s);
// n standard normal values from a counter-based hash of (seed, index) (benchmark KV contents).
cudaError_t fill_normal(float* x, int64_t n, uint64_t seed, cudaStream_t s);

}  // namespace kvtax::cuda::ops
