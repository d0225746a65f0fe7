// matmul dispatch: validation, activation quantization into a reused buffer, row split over threads,
// cache blocking for prefill; plus the double-precision reference.
#include "ops/cpu/matmul.h"

#include <algorithm>
#include <atomic>
#include <vector>

#include "core/error.h"
#include "ggml/quants.h"
#include "ops/cpu/gemm_float.h"
#include "ops/cpu/matmul_kernels.h"

namespace kvtax {
namespace {

// Prefill blocking. Columns are cut into panels of kPanelCols; within a panel a block of rows
// (<= kRowBlockBytes of weights) stays in L2 while chunks of tokens (<= kTokenChunkBytes of
// activations) pass over it, so every weight byte comes from DRAM once per call and activations are
// re-read from L3 once per row block. Decode (one token) streams whole rows instead (the K-quant kernels
// still sum them panel by panel, as a batch does). Q8_0 / Q4_0 kernels take whole rows and block internally.
using mm::kPanelCols;
constexpr size_t kRowBlockBytes = 192 * 1024;
constexpr size_t kTokenChunkBytes = 128 * 1024;

// n items of `bytes` each that fit `budget`, as a multiple of 4 (the register tile), within [4, cap].
int64_t fit4(size_t budget, size_t bytes, int64_t cap) {
  return std::clamp<int64_t>(int64_t(budget / std::max<size_t>(bytes, 1)) / 4 * 4, 4, std::max<int64_t>(cap, 4));
}
constexpr int64_t kChunksPerThread = 8;
// Below this many weight values a call runs on the calling thread only (dispatch would dominate).
constexpr int64_t kMinParallelWork = 1 << 15;

mm::Act act_kind(GgmlType t) {
  switch (t) {
    case GgmlType::Q8_0: case GgmlType::Q4_0: return mm::Act::q8_0;
    case GgmlType::Q4_K: case GgmlType::Q5_K: case GgmlType::Q6_K: return mm::Act::q8_k;
    default: return mm::Act::f32;
  }
}

mm::TileFn tile_fn(const mm::Kernels& k, GgmlType t) {
  switch (t) {
    case GgmlType::F32: return k.f32;
    case GgmlType::F16: return k.f16;
    case GgmlType::BF16: return k.bf16;
    case GgmlType::Q8_0: return k.q8_0;
    case GgmlType::Q4_0: return k.q4_0;
    case GgmlType::Q4_K: return k.q4_k;
    case GgmlType::Q5_K: return k.q5_k;
    case GgmlType::Q6_K: return k.q6_k;
    default: fail("matmul: weight type {} is not supported", ggml_type_name(t));
  }
}

const mm::Kernels& kernels_for(SimdLevel level) {
  if (level > simd_level())
    fail("matmul: SIMD level {} is above this CPU's / KVTAX_SIMD's {}", simd_name(level), simd_name(simd_level()));
  switch (level) {
    case SimdLevel::avx512: return cpu().avx512_vnni ? mm::kernels_avx512() : mm::kernels_avx2();
    case SimdLevel::avx2: return mm::kernels_avx2();
    default: return mm::kernels_scalar();
  }
}

void check_shape(const Weight& w, const char* what) {
  if (w.rows < 0 || w.cols <= 0) fail("{}: bad weight shape {} x {}", what, w.rows, w.cols);
  const auto& tr = ggml_traits(w.type);
  if (w.cols % tr.block_size != 0)
    fail("{}: {} columns is not a multiple of the {} block size {}", what, w.cols, tr.name, tr.block_size);
  if (!w.data && w.rows > 0) fail("{}: weight data is null", what);
}

// Grow-only scratch for quantized activations, one per calling thread.
uint8_t* act_scratch(size_t bytes) {
  thread_local std::vector<uint8_t> buf;
  if (buf.size() < bytes) buf.resize(bytes);
  return buf.data();
}

}  // namespace

bool matmul_supported(GgmlType t) {
  switch (t) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16: case GgmlType::Q8_0: case GgmlType::Q4_0:
    case GgmlType::Q4_K: case GgmlType::Q5_K: case GgmlType::Q6_K:
      return true;
    default:
      return false;
  }
}

void matmul_at(SimdLevel level, const Weight& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool) {
  if (!matmul_supported(w.type)) fail("matmul: weight type {} is not supported", ggml_type_name(w.type));
  check_shape(w, "matmul");
  if (n_tokens < 0) fail("matmul: negative token count {}", n_tokens);
  if (n_tokens == 0 || w.rows == 0) return;
  const mm::Kernels& k = kernels_for(level);
  const mm::TileFn tile = tile_fn(k, w.type);
  const size_t w_stride = ggml_row_bytes(w.type, uint64_t(w.cols));

  const mm::Act kind = act_kind(w.type);
  const uint8_t* act = reinterpret_cast<const uint8_t*>(x);
  size_t act_stride = size_t(w.cols) * sizeof(float);
  if (kind != mm::Act::f32) {
    const GgmlType at = kind == mm::Act::q8_0 ? GgmlType::Q8_0 : GgmlType::Q8_K;
    const mm::QuantFn quant = kind == mm::Act::q8_0 ? k.quant_q8_0 : k.quant_q8_k;
    if (w.cols % ggml_traits(at).block_size != 0)
      fail("matmul: {} columns is not a multiple of the {} activation block", w.cols, ggml_type_name(at));
    act_stride = ggml_row_bytes(at, uint64_t(w.cols));
    uint8_t* buf = act_scratch(act_stride * size_t(n_tokens));
    if (n_tokens * w.cols >= kMinParallelWork && n_tokens > 1) {
      pool.parallel_for(n_tokens, [&](int64_t b, int64_t e, int) {
        for (int64_t t = b; t < e; ++t) quant(x + t * w.cols, buf + size_t(t) * act_stride, w.cols);
      });
    } else {
      for (int64_t t = 0; t < n_tokens; ++t) quant(x + t * w.cols, buf + size_t(t) * act_stride, w.cols);
    }
    act = buf;
  }

  const GgmlType act_type = kind == mm::Act::f32 ? GgmlType::F32 : kind == mm::Act::q8_0 ? GgmlType::Q8_0 : GgmlType::Q8_K;
  const bool packed_gemm = level >= SimdLevel::avx2 && mm::gemm_float_applies(w.type, w.rows, w.cols, n_tokens);
  auto run_rows = [&](int64_t r0, int64_t r1) {
    if (packed_gemm) {
      mm::gemm_float_avx2(w.type, w.data, w_stride, r0, r1, w.cols, x, n_tokens, y, w.rows);
      return;
    }
    if (kind == mm::Act::q8_0) {
      // Whole rows for every batch size: these kernels block internally and keep each (row, token)
      // pair's arithmetic independent of the batch (q80_tile_x86.inc).
      tile(w.data + size_t(r0) * w_stride, w_stride, r1 - r0, act, act_stride, n_tokens, w.cols, y + r0, w.rows, false);
      return;
    }
    if (n_tokens == 1) {
      tile(w.data + size_t(r0) * w_stride, w_stride, r1 - r0, act, act_stride, 1, w.cols, y + r0, w.rows, false);
      return;
    }
    for (int64_t c0 = 0; c0 < w.cols; c0 += kPanelCols) {
      const int64_t nc = std::min(kPanelCols, w.cols - c0);
      const size_t w_off = ggml_row_bytes(w.type, uint64_t(c0)), a_off = ggml_row_bytes(act_type, uint64_t(c0));
      const int64_t row_block = fit4(kRowBlockBytes, ggml_row_bytes(w.type, uint64_t(nc)), r1 - r0);
      const int64_t tok_chunk = fit4(kTokenChunkBytes, ggml_row_bytes(act_type, uint64_t(nc)), 256);
      for (int64_t rb = r0; rb < r1; rb += row_block) {
        const int64_t nr = std::min(row_block, r1 - rb);
        for (int64_t t0 = 0; t0 < n_tokens; t0 += tok_chunk) {
          const int64_t nt = std::min(tok_chunk, n_tokens - t0);
          tile(w.data + size_t(rb) * w_stride + w_off, w_stride, nr, act + size_t(t0) * act_stride + a_off,
               act_stride, nt, nc, y + t0 * w.rows + rb, w.rows, c0 > 0);
        }
      }
    }
  };
  if (pool.size() == 1 || w.rows * w.cols * std::min<int64_t>(n_tokens, 8) < kMinParallelWork) {
    run_rows(0, w.rows);
    return;
  }
  // Rows go out in contiguous chunks (on 16-row = 64-byte output boundaries, so threads never share
  // a cache line of y), several per thread and claimed from a counter: a thread that is descheduled
  // or slower (shared machine, mixed cores) leaves its remaining chunks to the others.
  const int64_t units = (w.rows + 15) / 16;
  const int64_t n_chunks = std::min<int64_t>(units, int64_t(pool.size()) * kChunksPerThread);
  std::atomic<int64_t> next{0};
  pool.run([&](int, int) {
    for (int64_t c; (c = next.fetch_add(1, std::memory_order_relaxed)) < n_chunks;) {
      const int64_t r0 = std::min(w.rows, units * c / n_chunks * 16);
      const int64_t r1 = std::min(w.rows, units * (c + 1) / n_chunks * 16);
      if (r0 < r1) run_rows(r0, r1);
    }
  });
}

void matmul(const Weight& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool) {
  matmul_at(simd_level(), w, x, n_tokens, y, pool);
}

void matmul_reference(const Weight& w, const float* x, int64_t n_tokens, float* y) {
  if (!can_dequantize(w.type)) fail("matmul_reference: weight type {} is not supported", ggml_type_name(w.type));
  check_shape(w, "matmul_reference");
  const size_t w_stride = ggml_row_bytes(w.type, uint64_t(w.cols));
  std::vector<float> row(size_t(w.cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    dequantize_row(w.type, w.data + size_t(r) * w_stride, row.data(), w.cols);
    for (int64_t t = 0; t < n_tokens; ++t) {
      double s = 0;
      const float* xt = x + t * w.cols;
      for (int64_t c = 0; c < w.cols; ++c) s += double(row[size_t(c)]) * xt[c];
      y[t * w.rows + r] = float(s);
    }
  }
}

void weight_row(const Weight& w, int64_t row, float* out) {
  if (!can_dequantize(w.type)) fail("weight_row: weight type {} is not supported", ggml_type_name(w.type));
  check_shape(w, "weight_row");
  if (row < 0 || row >= w.rows) fail("weight_row: row {} is out of range [0, {})", row, w.rows);
  dequantize_row(w.type, w.data + size_t(row) * ggml_row_bytes(w.type, uint64_t(w.cols)), out, w.cols);
}

}  // namespace kvtax
