#pragma once
// Decode GEMV on the device: y = W x for one token, weights in their GGUF (ggml) block formats.
// F16/BF16 weights multiply f32 x with f32 FMAs; Q8_0, Q4_0 and Q4_K weights multiply x quantized to
// int8 per 32 values (scale max|x|/127) with 4-way int8 dot products, the CPU matmul's scheme.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "cuda/runtime.h"
#include "ggml/types.h"

namespace kvtax::cuda {

bool gemv_supported(GgmlType t);  // F32, F16, BF16, Q8_0, Q4_0, Q4_K

// A rows x cols weight matrix on the device (rows of ggml_row_bytes(type, cols), back to back).
class DeviceWeight {
 public:
  // cols must be a multiple of 32 and of the type's block; host_data holds rows * row_bytes bytes.
  DeviceWeight(GgmlType type, int64_t rows, int64_t cols, const void* host_data);
  // Several matrices of one type and width stacked into one (q|k|v, gate|up): one GEMV instead of several.
  struct Part {
    const void* host_data;
    int64_t rows;
  };
  DeviceWeight(GgmlType type, int64_t cols, const std::vector<Part>& parts);

  GgmlType type() const { return type_; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  size_t row_bytes() const { return row_bytes_; }
  size_t bytes() const { return size_t(rows_) * row_bytes_; }  // what one GEMV reads
  const uint8_t* data() const { return buf_.as<uint8_t>(); }

 private:
  GgmlType type_;
  int64_t rows_, cols_;
  size_t row_bytes_;
  Buffer buf_;
};

// Rows each warp of the register-fed quantized kernels computes (1, 2 or 4; 0: chosen by shape; not 0 also turns the
// staged kernel off). For benchmarks.
void set_gemv_rows_per_warp(int rows);
// The kernel with weights staged through shared memory where it fits (the default; also off with
// KVTAX_GEMV_STAGED=0), or the register-fed ones everywhere. For tests and benchmarks.
void set_gemv_staged(bool on);

// Device scratch for the quantized copy of x.
size_t gemv_scratch_bytes(int64_t cols);
// Q8_0, Q4_0 and Q4_K multiply an int8 copy of x that they make first (unless told it is in the scratch).
bool gemv_quantizes_x(GgmlType t);

// Work fused into a GEMV, so the decode step launches fewer kernels.
struct GemvFusion {
  // Quantized types: x := silu(x) * x_mul (the FFN's SwiGLU) as x is quantized.
  const float* x_mul = nullptr;
  // Quantized types: the scratch already holds x's int8 codes (ops::add_rmsnorm wrote them); x is not read.
  bool x_in_scratch = false;
  // An even number of rows (gate|up stacked): y[r] = silu(W_r x) * W_(r + rows/2) x for r < rows/2 (y has rows/2
  // values). Quantized types write the int8 codes of those values into pair_codes (a GEMV scratch of rows/2 columns,
  // which the down GEMV then reads with x_in_scratch) instead of y: no x pass of down's own. They need rows/2 in
  // blocks of 32 and the staged kernel (gemv_pair_codes_supported).
  bool silu_pairs = false;
  // The residual add and the next RMS norm, spread over the GEMV's blocks (the decode step's wo and down), so no
  // one-block norm kernel sits between two GEMVs: y is not written; res[r] += W_r x; then norm_x[r] = res[r] *
  // norm_w[r] (the norm without its 1/rms, which the GEMVs reading norm_x apply: rms_part), its int8 codes into
  // norm_scratch when set (for a quantized reader), and each block's sum of squares of res (32 rows, in double)
  // into ss_part[block]. Rows must be a multiple of 32; not with silu_pairs. res and norm_w are read before the
  // GEMV waits for the kernel ahead of it (pdl.cuh): that kernel must not write them, nor launch before their
  // writer has finished.
  float* res = nullptr;
  const float* norm_w = nullptr;
  float* norm_x = nullptr;
  void* norm_scratch = nullptr;
  double* ss_part = nullptr;
  // A GEMV reading such an x: y scaled by the norm's 1 / sqrtf(mean + eps), the mean over rms_n values from the
  // rms_n / 32 sums in rms_part (llama.cpp's float steps, as ops::rmsnorm).
  const double* rms_part = nullptr;
  int rms_n = 0;
  float rms_eps = 0;
  // At most this many blocks per SM (0: as many as fit): a GEMV after a residual GEMV whose blocks all fit beside
  // that one's, so that all of them copy their first units before their wait.
  int blocks_per_sm = 0;
  void* pair_codes = nullptr;  // silu_pairs of quantized weights: where their codes go
};

// Whether gemv() takes w with silu_pairs and pair_codes (quantized, staged kernel on, rows/2 in blocks of 32).
bool gemv_pair_codes_supported(const DeviceWeight& w);

// x: device [cols] f32, y: device [rows] f32. scratch: gemv_scratch_bytes(cols), where a quantized GEMV finds or
// makes x's codes.
void gemv(const DeviceWeight& w, const float* x, float* y, void* scratch, cudaStream_t stream = nullptr,
          const GemvFusion& fuse = {});

}  // namespace kvtax::cuda
