#pragma once
// Boundary between gemv.cpp (checks, errors) and gemv.cu (kernels).
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "ggml/types.h"

namespace kvtax::cuda::detail {

constexpr int kGemvPad = 64;  // bytes after the weights: the Q8_0/Q4_0 loaders read whole aligned words

// Where a kernel other than the GEMV writes x's int8 codes (quantize_x.cuh) for a GEMV of `cols` columns.
struct QuantX {
  int8_t* xq = nullptr;
  float* xd = nullptr;
  float* xs = nullptr;
};

struct GemvArgs {
  GgmlType type;
  const uint8_t* w;
  size_t row_bytes;
  int rows, cols;
  const float* x;
  int8_t* xq;   // [cols] int8 codes of x
  float* xd;    // [cols/32] scales
  float* xs;    // [cols/32] scale * sum of codes
  float* y;
  const float* x_mul = nullptr;  // quantized types: multiply silu(x) * x_mul (the FFN's gate and up)
  bool x_ready = false;          // quantized types: xq/xd/xs already hold x's codes (the fused norm wrote them)
  bool silu_pairs = false;       // y[r] = silu(W_r x) * W_(r + rows) x, r < rows (quantized types: into pair_q)
  // Quantized silu_pairs (GemvFusion::pair_codes): blocks of 32 output rows write their int8 codes here; y unused.
  QuantX pair_q;
  // Residual epilogue (gemv.h, GemvFusion::res): blocks of 32 rows; y unused.
  float* res = nullptr;
  const float* norm_w = nullptr;
  float* norm_x = nullptr;
  QuantX norm_q;
  double* ss_part = nullptr;
  // Norm prologue (GemvFusion::rms_part): y scaled by 1 / sqrt(sum(rms_part[0 .. rms_n / 32)) / rms_n + rms_eps).
  const double* rms_part = nullptr;
  int rms_n = 0;
  float rms_eps = 0;
  int blocks_per_sm = 0;  // GemvFusion::blocks_per_sm
};

inline bool quantizes_x(GgmlType t) { return t == GgmlType::Q8_0 || t == GgmlType::Q4_0 || t == GgmlType::Q4_K; }

inline size_t gemv_scratch_layout(int64_t cols, size_t* xd_off, size_t* xs_off) {
  *xd_off = (size_t(cols) + 255) / 256 * 256;
  *xs_off = *xd_off + size_t(cols / 32) * 4;
  return *xs_off + size_t(cols / 32) * 4;
}

inline QuantX gemv_quant_x(void* scratch, int64_t cols) {
  size_t xd, xs;
  gemv_scratch_layout(cols, &xd, &xs);
  uint8_t* s = static_cast<uint8_t*>(scratch);
  return {reinterpret_cast<int8_t*>(s), reinterpret_cast<float*>(s + xd), reinterpret_cast<float*>(s + xs)};
}

cudaError_t launch_gemv(const GemvArgs& a, cudaStream_t stream);
void set_gemv_rows_per_warp(int r);
void set_gemv_staged(bool on);

// The kernel with weights staged through shared memory (gemv_staged.cu): sm_90, Q8_0 / Q4_0 / Q4_K / F16 / BF16 rows
// of whole 16-byte runs, x (or its codes) fitting beside the stages. launch_gemv takes it where it fits.
bool staged_gemv_fits(const GemvArgs& a);
// Quantized SwiGLU pairs run only in the staged kernel: whether launch_gemv takes `a` there (not switched off).
bool staged_gemv_taken(const GemvArgs& a);
cudaError_t launch_gemv_staged(const GemvArgs& a, cudaStream_t stream);

}  // namespace kvtax::cuda::detail
