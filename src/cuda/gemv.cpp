#include "cuda/gemv.h"

#include <algorithm>
#include <cstdint>

#include "core/error.h"
#include "cuda/gemv_launch.h"

namespace kvtax::cuda {

bool gemv_supported(GgmlType t) {
  return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16 || t == GgmlType::Q8_0 ||
         t == GgmlType::Q4_0 || t == GgmlType::Q4_K;
}

DeviceWeight::DeviceWeight(GgmlType type, int64_t rows, int64_t cols, const void* host_data)
    : DeviceWeight(type, cols, std::vector<Part>{{host_data, rows}}) {}

DeviceWeight::DeviceWeight(GgmlType type, int64_t cols, const std::vector<Part>& parts) : type_(type), cols_(cols) {
  if (!gemv_supported(type)) fail("CUDA GEMV: weight type {} not supported", ggml_type_name(type));
  rows_ = 0;
  for (const Part& p : parts) {
    if (p.rows <= 0) fail("CUDA GEMV: a part of {} rows", p.rows);
    rows_ += p.rows;
  }
  if (rows_ <= 0 || rows_ > (int64_t(1) << 24)) fail("CUDA GEMV: {} rows out of range 1..2^24", rows_);
  // Whole warps of the x quantizer and whole blocks of the type (Q4_K: 256).
  const int64_t unit = std::max<int64_t>(32, int64_t(ggml_traits(type).block_size));
  if (cols <= 0 || cols % unit != 0 || cols > (int64_t(1) << 20))
    fail("CUDA GEMV: {} columns is not a positive multiple of {} (up to 2^20) for {}", cols, unit,
         ggml_type_name(type));
  row_bytes_ = ggml_row_bytes(type, uint64_t(cols));
  buf_ = Buffer(bytes() + detail::kGemvPad);
  size_t off = 0;
  for (const Part& p : parts) {
    buf_.upload(p.host_data, size_t(p.rows) * row_bytes_, off);
    off += size_t(p.rows) * row_bytes_;
  }
  check(cudaMemset(buf_.as<uint8_t>() + bytes(), 0, detail::kGemvPad), "cudaMemset");
}

void set_gemv_rows_per_warp(int rows) {
  if (rows < 0 || rows > 4 || rows == 3) fail("CUDA GEMV: {} rows per warp (0, 1, 2 or 4)", rows);
  detail::set_gemv_rows_per_warp(rows);
}

void set_gemv_staged(bool on) { detail::set_gemv_staged(on); }

size_t gemv_scratch_bytes(int64_t cols) {
  size_t xd, xs;
  return detail::gemv_scratch_layout(cols, &xd, &xs);
}

bool gemv_quantizes_x(GgmlType t) { return detail::quantizes_x(t); }

namespace {
// The weight's part of a launch; scratch: where x's codes are found or made.
detail::GemvArgs args_of(const DeviceWeight& w, bool pairs, void* scratch) {
  detail::GemvArgs a{};
  a.type = w.type();
  a.w = w.data();
  a.row_bytes = w.row_bytes();
  a.rows = int(pairs ? w.rows() / 2 : w.rows());
  a.cols = int(w.cols());
  const detail::QuantX x = detail::gemv_quant_x(scratch, w.cols());
  a.xq = x.xq, a.xd = x.xd, a.xs = x.xs;
  return a;
}
}  // namespace

bool gemv_pair_codes_supported(const DeviceWeight& w) {
  if (!gemv_quantizes_x(w.type()) || w.rows() % 64 != 0) return false;
  // The checks look at the scratches' alignment only: any 256-aligned address stands in for them.
  void* scratch = reinterpret_cast<void*>(uintptr_t(256));
  detail::GemvArgs a = args_of(w, true, scratch);
  a.silu_pairs = true;
  a.x_ready = true;
  a.pair_q = detail::gemv_quant_x(scratch, a.rows);
  return detail::staged_gemv_taken(a);
}

void gemv(const DeviceWeight& w, const float* x, float* y, void* scratch, cudaStream_t stream,
          const GemvFusion& fuse) {
  const bool q = gemv_quantizes_x(w.type());
  if ((fuse.x_mul || fuse.x_in_scratch) && !q)
    fail("CUDA GEMV: {} weights multiply x as it is (no fused SwiGLU input or prequantized x)", ggml_type_name(w.type()));
  if (fuse.silu_pairs && (w.rows() % 2 != 0 || q != bool(fuse.pair_codes)))
    fail("CUDA GEMV: SwiGLU pairs need an even row count, and codes out for quantized weights only ({} {} rows)",
         ggml_type_name(w.type()), w.rows());
  if (fuse.pair_codes && !fuse.silu_pairs) fail("CUDA GEMV: codes out only for SwiGLU pairs");
  if (fuse.pair_codes && !gemv_pair_codes_supported(w))
    fail("CUDA GEMV: SwiGLU codes out of {} {}x{} weights need the staged kernel and a multiple of 64 rows",
         ggml_type_name(w.type()), w.rows(), w.cols());
  if (fuse.x_mul && fuse.x_in_scratch) fail("CUDA GEMV: x cannot be both in the scratch and multiplied");
  if (fuse.res && (fuse.silu_pairs || w.rows() % 32 != 0 || !fuse.norm_w || !fuse.ss_part))
    fail("CUDA GEMV: the residual epilogue needs rows in blocks of 32, norm weights and partial sums ({} rows)",
         w.rows());
  if (fuse.rms_part && (fuse.rms_n <= 0 || fuse.rms_n % 32 != 0))
    fail("CUDA GEMV: the norm prologue needs a width in blocks of 32 ({})", fuse.rms_n);
  detail::GemvArgs a = args_of(w, fuse.silu_pairs, scratch);
  a.x = x;
  a.y = y;
  a.x_mul = fuse.x_mul;
  a.x_ready = fuse.x_in_scratch;
  a.silu_pairs = fuse.silu_pairs;
  a.res = fuse.res;
  a.norm_w = fuse.norm_w;
  a.norm_x = fuse.norm_x;
  if (fuse.norm_scratch) a.norm_q = detail::gemv_quant_x(fuse.norm_scratch, w.rows());
  a.ss_part = fuse.ss_part;
  a.rms_part = fuse.rms_part;
  a.rms_n = fuse.rms_n;
  a.rms_eps = fuse.rms_eps;
  a.blocks_per_sm = fuse.blocks_per_sm;
  if (fuse.pair_codes) a.pair_q = detail::gemv_quant_x(fuse.pair_codes, a.rows);
  check(detail::launch_gemv(a, stream), "GEMV launch");
}

}  // namespace kvtax::cuda
