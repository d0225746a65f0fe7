#pragma once
// Internal: per-ISA kernel tables used by matmul.cpp.
#include <cstddef>
#include <cstdint>

namespace kvtax::mm {

// Which activation encoding a weight type's kernel consumes.
enum class Act { f32, q8_0, q8_k };

// Prefill blocking cuts columns into panels of kPanelCols (a multiple of every block size); a row's
// result is the panel sums added in order. For the K-quants a one-token call over more columns sums the
// same panels the same way, so decode gives the bits a batch gives (Q8_0/Q4_0 kernels never use panels).
inline constexpr int64_t kPanelCols = 1024;

// Computes y[t*y_stride + r] (= or += when accumulate) for r < nrows, t < ntok over `cols` columns.
// w: first row of the tile, rows w_stride bytes apart. act: first token's activations (encoded per
// Act), tokens act_stride bytes apart. Column panels of a wider matrix are offset pointers.
using TileFn = void (*)(const uint8_t* w, size_t w_stride, int64_t nrows, const uint8_t* act, size_t act_stride,
                        int64_t ntok, int64_t cols, float* y, int64_t y_stride, bool accumulate);
// Encodes n floats (a multiple of 32 / 256) as Q8_0 / Q8_K blocks.
using QuantFn = void (*)(const float* x, void* out, int64_t n);

struct Kernels {
  TileFn f32, f16, bf16, q8_0, q4_0, q4_k, q5_k, q6_k;
  QuantFn quant_q8_0, quant_q8_k;
};

const Kernels& kernels_scalar();
const Kernels& kernels_avx2();
const Kernels& kernels_avx512();  // requires AVX-512 F/BW/VL/DQ + VNNI

}  // namespace kvtax::mm
