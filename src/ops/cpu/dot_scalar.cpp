// Portable kernels: the same integer formulation as the SIMD paths (quantized activations, int32
// sums per block), one row x one token at a time.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "core/f16.h"
#include "ggml/blocks.h"
#include "ggml/quants.h"
#include "ops/cpu/matmul_kernels.h"

namespace kvtax::mm {
namespace {

template <class Dot>
void tile(const uint8_t* w, size_t w_stride, int64_t nrows, const uint8_t* act, size_t act_stride, int64_t ntok,
          int64_t cols, float* y, int64_t y_stride, bool accumulate) {
  for (int64_t t = 0; t < ntok; ++t)
    for (int64_t r = 0; r < nrows; ++r) {
      const float v = Dot::dot(w + size_t(r) * w_stride, act + size_t(t) * act_stride, cols);
      y[t * y_stride + r] = accumulate ? y[t * y_stride + r] + v : v;
    }
}

// K-quants: a one-token call sums kPanelCols panels in order, as the prefill blocking does (matmul_kernels.h).
template <class Dot>
void tile_k(const uint8_t* w, size_t w_stride, int64_t nrows, const uint8_t* act, size_t act_stride, int64_t ntok,
            int64_t cols, float* y, int64_t y_stride, bool accumulate) {
  if (ntok != 1) return tile<Dot>(w, w_stride, nrows, act, act_stride, ntok, cols, y, y_stride, accumulate);
  for (int64_t r = 0; r < nrows; ++r) {
    float v = 0;
    for (int64_t c0 = 0; c0 < cols; c0 += kPanelCols) {
      const size_t b0 = size_t(c0 / kQK_K);
      const float part = Dot::dot(w + size_t(r) * w_stride + b0 * Dot::kBlockBytes, act + b0 * sizeof(BlockQ8_K),
                                  std::min(kPanelCols, cols - c0));
      v = c0 == 0 ? part : v + part;
    }
    y[r] = accumulate ? y[r] + v : v;
  }
}

struct DotF32 {
  static float dot(const uint8_t* w, const uint8_t* a, int64_t n) {
    const auto* wf = reinterpret_cast<const float*>(w);
    const auto* af = reinterpret_cast<const float*>(a);
    float s = 0;
    for (int64_t i = 0; i < n; ++i) s += wf[i] * af[i];
    return s;
  }
};

template <float (*Cvt)(uint16_t)>
struct DotHalf {
  static float dot(const uint8_t* w, const uint8_t* a, int64_t n) {
    const auto* wh = reinterpret_cast<const uint16_t*>(w);
    const auto* af = reinterpret_cast<const float*>(a);
    float s = 0;
    for (int64_t i = 0; i < n; ++i) s += Cvt(wh[i]) * af[i];
    return s;
  }
};

struct DotQ8_0 {
  static float dot(const uint8_t* w, const uint8_t* a, int64_t n) {
    const auto* wb = reinterpret_cast<const BlockQ8_0*>(w);
    const auto* ab = reinterpret_cast<const BlockQ8_0*>(a);
    float s = 0;
    for (int64_t i = 0; i < n / kQK; ++i) {
      int sum = 0;
      for (int j = 0; j < kQK; ++j) sum += wb[i].qs[j] * ab[i].qs[j];
      s += f16_to_f32(wb[i].d) * f16_to_f32(ab[i].d) * float(sum);
    }
    return s;
  }
};

struct DotQ4_0 {
  static float dot(const uint8_t* w, const uint8_t* a, int64_t n) {
    const auto* wb = reinterpret_cast<const BlockQ4_0*>(w);
    const auto* ab = reinterpret_cast<const BlockQ8_0*>(a);
    float s = 0;
    for (int64_t i = 0; i < n / kQK; ++i) {
      int sum = 0;
      for (int j = 0; j < kQK / 2; ++j)
        sum += ((wb[i].qs[j] & 0xF) - 8) * ab[i].qs[j] + ((wb[i].qs[j] >> 4) - 8) * ab[i].qs[j + kQK / 2];
      s += f16_to_f32(wb[i].d) * f16_to_f32(ab[i].d) * float(sum);
    }
    return s;
  }
};

// Q4_K / Q5_K: sum_j d*sc_j*dot(q_j, a_j) - dmin*m_j*sum(a_j), sums of a from the Q8_K bsums.
template <bool kFive>
struct DotQ45K {
  using Block = std::conditional_t<kFive, BlockQ5_K, BlockQ4_K>;
  static constexpr size_t kBlockBytes = sizeof(Block);
  static float dot(const uint8_t* w, const uint8_t* a, int64_t n) {
    const auto* wb = reinterpret_cast<const Block*>(w);
    const auto* ab = reinterpret_cast<const BlockQ8_K*>(a);
    float s = 0;
    for (int64_t i = 0; i < n / kQK_K; ++i) {
      int sum_q = 0, sum_m = 0;
      for (int j = 0; j < 8; ++j) {
        uint8_t sc, m;
        k_scale_min(j, wb[i].scales, sc, m);
        const uint8_t* q = wb[i].qs + 32 * (j / 2);
        const int8_t* av = ab[i].qs + 32 * j;
        int dq = 0;
        for (int l = 0; l < 32; ++l) {
          int v = (q[l] >> (4 * (j % 2))) & 0xF;
          if constexpr (kFive) v |= ((wb[i].qh[l] >> j) & 1) << 4;
          dq += v * av[l];
        }
        sum_q += sc * dq;
        sum_m += m * (ab[i].bsums[2 * j] + ab[i].bsums[2 * j + 1]);
      }
      s += ab[i].d * (f16_to_f32(wb[i].d) * float(sum_q) - f16_to_f32(wb[i].dmin) * float(sum_m));
    }
    return s;
  }
};

struct DotQ6K {
  static constexpr size_t kBlockBytes = sizeof(BlockQ6_K);
  static float dot(const uint8_t* w, const uint8_t* a, int64_t n) {
    const auto* wb = reinterpret_cast<const BlockQ6_K*>(w);
    const auto* ab = reinterpret_cast<const BlockQ8_K*>(a);
    float s = 0;
    for (int64_t i = 0; i < n / kQK_K; ++i) {
      int sum = 0;
      for (int h = 0; h < 2; ++h)
        for (int s4 = 0; s4 < 4; ++s4)
          for (int half = 0; half < 2; ++half) {
            int dq = 0;
            for (int l = 16 * half; l < 16 * half + 16; ++l) {
              const int lo = (wb[i].ql[64 * h + l + 32 * (s4 & 1)] >> (4 * (s4 >> 1))) & 0xF;
              const int hi = (wb[i].qh[32 * h + l] >> (2 * s4)) & 3;
              dq += ((lo | (hi << 4)) - 32) * ab[i].qs[128 * h + 32 * s4 + l];
            }
            sum += wb[i].scales[8 * h + 2 * s4 + half] * dq;
          }
      s += ab[i].d * f16_to_f32(wb[i].d) * float(sum);
    }
    return s;
  }
};

void quant_q8_0(const float* x, void* out, int64_t n) { quantize_row(GgmlType::Q8_0, x, out, n); }
void quant_q8_k(const float* x, void* out, int64_t n) { quantize_row(GgmlType::Q8_K, x, out, n); }

}  // namespace

const Kernels& kernels_scalar() {
  static const Kernels k{tile<DotF32>,         tile<DotHalf<f16_to_f32>>, tile<DotHalf<bf16_to_f32>>,
                         tile<DotQ8_0>,        tile<DotQ4_0>,             tile_k<DotQ45K<false>>,
                         tile_k<DotQ45K<true>>, tile_k<DotQ6K>,              quant_q8_0,
                         quant_q8_k};
  return k;
}

}  // namespace kvtax::mm
