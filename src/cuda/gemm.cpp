#include "cuda/gemm.h"

#include <cublas_v2.h>

#include <algorithm>

#include "core/error.h"

namespace kvtax::cuda {
namespace {

void check_blas(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS) fail("cuBLAS {}: {}", what, cublasGetStatusString(st));
}

cublasHandle_t H(void* h) { return static_cast<cublasHandle_t>(h); }

}  // namespace

GemmRunner::GemmRunner(cudaStream_t stream) : stream_(stream) {
  cublasHandle_t h = nullptr;
  check_blas(cublasCreate(&h), "create");
  handle_ = h;
  check_blas(cublasSetStream(h, stream), "set stream");
}

GemmRunner::~GemmRunner() {
  if (handle_) cublasDestroy(H(handle_));
}

void* GemmRunner::act(size_t bytes) {
  if (act_.bytes() < bytes) {
    check(cudaStreamSynchronize(stream_), "prefill GEMM scratch");
    act_ = Buffer(bytes);
  }
  return act_.get();
}

void* GemmRunner::wbuf(size_t bytes) {
  if (wbuf_.bytes() < bytes) {
    check(cudaStreamSynchronize(stream_), "prefill GEMM scratch");
    wbuf_ = Buffer(bytes);
  }
  return wbuf_.get();
}

void GemmRunner::run(const DeviceWeight& w, int64_t row0, int64_t rows, const float* x, int n, float* y,
                     int64_t ldy) {
  if (row0 < 0 || rows <= 0 || row0 + rows > w.rows() || n <= 0 || ldy < rows)
    fail("CUDA GEMM: rows {}..{} of a {}-row matrix into {} columns of {} rows", row0, row0 + rows, w.rows(), ldy, n);
  const int64_t K = w.cols();
  const float one = 1.0f, zero = 0.0f;
  cublasHandle_t h = H(handle_);
  if (w.type() == GgmlType::F32) {
    check_blas(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, int(rows), n, int(K), &one,
                            w.data() + size_t(row0) * w.row_bytes(), CUDA_R_32F, int(K), x, CUDA_R_32F, int(K), &zero,
                            y, CUDA_R_32F, int(ldy), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "GEMM (f32)");
    return;
  }
  run_rounded(w, row0, rows, round(x, n, K, takes_bf16(w)), n, y, ldy, Out::f32);
}

const void* GemmRunner::round(const float* x, int n, int64_t K, bool bf16) {
  void* xa = act(size_t(n) * K * 2);
  check(detail::to_half(x, int64_t(n) * K, bf16, xa, stream_), "activations to 16 bits");
  return xa;
}

void GemmRunner::run_rounded(const DeviceWeight& w, int64_t row0, int64_t rows, const void* xh, int n, void* y,
                             int64_t ldy, Out out) {
  if (row0 < 0 || rows <= 0 || row0 + rows > w.rows() || n <= 0 || ldy < rows || w.type() == GgmlType::F32)
    fail("CUDA GEMM: rows {}..{} of a {}-row {} matrix from 16-bit input into {} columns of {} rows", row0,
         row0 + rows, w.rows(), ggml_type_name(w.type()), ldy, n);
  const int64_t K = w.cols();
  const float one = 1.0f, beta = out == Out::add ? 1.0f : 0.0f;
  const bool out_half = out == Out::half;
  const cudaDataType_t t16 = takes_bf16(w) ? CUDA_R_16BF : CUDA_R_16F;
  const cudaDataType_t ty = out_half ? t16 : CUDA_R_32F;
  const size_t y_elem = out_half ? 2 : 4;
  for (int64_t r = 0; r < rows;) {
    const void* wp;
    int64_t m;
    if (w.type() == GgmlType::F16 || w.type() == GgmlType::BF16) {
      m = rows;
      wp = w.data() + size_t(row0 + r) * w.row_bytes();
    } else {
      m = std::min(kDequantRows, rows - r);
      void* s = wbuf(size_t(std::min(kDequantRows, rows)) * K * 2);
      check(detail::dequant_rows_bf16(w.type(), w.data(), w.row_bytes(), row0 + r, m, int(K), s, stream_),
            "weight dequantization");
      wp = s;
    }
    check_blas(cublasGemmEx(H(handle_), CUBLAS_OP_T, CUBLAS_OP_N, int(m), n, int(K), &one, wp, t16, int(K), xh, t16,
                            int(K), &beta, static_cast<uint8_t*>(y) + size_t(r) * y_elem, ty, int(ldy),
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "GEMM");
    r += m;
  }
}

}  // namespace kvtax::cuda
