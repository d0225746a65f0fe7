#pragma once
// Prefill GEMM on the device: y = x W^T for a chunk of rows through cuBLAS, f32 accumulation. F16 and BF16
// weights are used in place with x rounded to the same 16-bit type; Q8_0, Q4_0 and Q4_K weights are first
// dequantized to bf16 into a scratch of at most kDequantRows rows (so the scratch is bounded by the widest
// matrix, not by the model); F32 weights multiply f32 x.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "cuda/gemv.h"
#include "cuda/runtime.h"

namespace kvtax::cuda {

class GemmRunner {
 public:
  static constexpr int64_t kDequantRows = 8192;

  explicit GemmRunner(cudaStream_t stream);
  ~GemmRunner();
  GemmRunner(const GemmRunner&) = delete;
  GemmRunner& operator=(const GemmRunner&) = delete;

  // x: device [n][w.cols()] f32. y: device [n] rows of ldy floats; columns 0..rows-1 of each get rows
  // row0 .. row0+rows-1 of W (times x). Scratch grows on first use (device_bytes() reports it).
  void run(const DeviceWeight& w, int64_t row0, int64_t rows, const float* x, int n, float* y, int64_t ldy);
  size_t device_bytes() const { return act_.bytes() + wbuf_.bytes(); }

  // The 16-bit input type of w's products: f16 for F16 weights, bf16 for BF16 and the quantized types
  // (dequantized to bf16). F32 weights take f32 input through run() only.
  static bool takes_bf16(const DeviceWeight& w) { return w.type() != GgmlType::F16; }
  // x: device [n][K] f32, rounded to f16 or bf16 into the runner's activation scratch; the pointer stays
  // valid until the next round() or run(). Several products of one input then round it once.
  const void* round(const float* x, int n, int64_t K, bool bf16);
  // The scratch round() writes, [n][K] 16-bit values, for a caller that writes the input itself
  // (ops::add_rmsnorm_half); the same lifetime as round()'s pointer.
  void* input(int n, int64_t K) { return act(size_t(n) * K * 2); }
  // What run_rounded writes into y: f32 values; values of the input's 16-bit type (the next elementwise step
  // reads half the bytes); or f32 values added to y's own (the residual stream, with no add of its own).
  enum class Out { f32, half, add };
  // As run(), from x already in w's 16-bit input type (xh: [n][w.cols()]). Not for F32 weights.
  void run_rounded(const DeviceWeight& w, int64_t row0, int64_t rows, const void* xh, int n, void* y, int64_t ldy,
                   Out out);

 private:
  void* act(size_t bytes);
  void* wbuf(size_t bytes);

  cudaStream_t stream_;
  void* handle_ = nullptr;  // cublasHandle_t
  Buffer act_, wbuf_;
};

namespace detail {
// f32 -> f16 (bf16 = false) or bf16 values (round to nearest even).
cudaError_t to_half(const float* x, int64_t n, bool bf16, void* out, cudaStream_t s);
// rows [row0, row0 + rows) of a quantized matrix (GGUF rows of row_bytes) -> bf16 [rows][cols].
cudaError_t dequant_rows_bf16(GgmlType t, const uint8_t* w, size_t row_bytes, int64_t row0, int64_t rows, int cols,
                              void* out, cudaStream_t s);
}  // namespace detail

}  // namespace kvtax::cuda
