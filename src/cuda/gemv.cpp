#include "cuda/gemv.h"

#include "core/error.h"
#include "cuda/gemv_launch.h"

namespace kvtax::cuda {

bool gemv_supported(GgmlType t) {
  return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16 || t == GgmlType::Q8_0 ||
         t == GgmlType::Q4_0 || t == GgmlType::Q4_K;
}

DeviceWeight::DeviceWeight(GgmlType type, int64_t rows, int64_t cols, const void* host_data)
    : type_(type), rows_(rows), cols_(cols) {
  if (!gemv_supported(type)) fail("CUDA GEMV: weight type {} not supported", ggml_type_name(type));
  if (rows <= 0 || rows > (int64_t(1) << 24)) fail("CUDA GEMV: {} rows out of range 1..2^24", rows);
  if (cols <= 0 || cols % 256 != 0 || cols > (int64_t(1) << 20))
    fail("CUDA GEMV: {} columns is not a positive multiple of 256 (up to 2^20)", cols);
  row_bytes_ = ggml_row_bytes(type, uint64_t(cols));
  buf_ = Buffer(bytes() + detail::kGemvPad);
  buf_.upload(host_data, bytes());
  check(cudaMemset(buf_.as<uint8_t>() + bytes(), 0, detail::kGemvPad), "cudaMemset");
}

size_t gemv_scratch_bytes(int64_t cols) {
  size_t xd, xs;
  return detail::gemv_scratch_layout(cols, &xd, &xs);
}

void gemv(const DeviceWeight& w, const float* x, float* y, void* scratch, cudaStream_t stream) {
  size_t xd, xs;
  detail::gemv_scratch_layout(w.cols(), &xd, &xs);
  uint8_t* s = static_cast<uint8_t*>(scratch);
  detail::GemvArgs a{};
  a.type = w.type();
  a.w = w.data();
  a.row_bytes = w.row_bytes();
  a.rows = int(w.rows());
  a.cols = int(w.cols());
  a.x = x;
  a.xq = reinterpret_cast<int8_t*>(s);
  a.xd = reinterpret_cast<float*>(s + xd);
  a.xs = reinterpret_cast<float*>(s + xs);
  a.y = y;
  check(detail::launch_gemv(a, stream), "GEMV launch");
}

}  // namespace kvtax::cuda
