#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "ops/cpu/gemm_float.h"

namespace kvtax::mm {

namespace {

constexpr int kNR = 16;             // weight rows per panel: two 8-lane vectors
constexpr int kMR = 6;              // tokens per register tile: 12 accumulators + 2 panel vectors + 1 broadcast
constexpr int64_t kKC = 256;        // k-chunk: 6 tokens x 256 floats of activations stay in L1
constexpr int64_t kRowBlock = 256;  // rows packed at once: 256 rows x 256 k x 4 bytes = 256 KiB, L2-resident

thread_local std::vector<float> t_pack;

// kc values of one weight row from column k0, as f32.
void convert(GgmlType t, const uint8_t* row, int64_t k0, int64_t kc, float* out) {
  switch (t) {
    case GgmlType::F32:
      std::memcpy(out, reinterpret_cast<const float*>(row) + k0, size_t(kc) * 4);
      break;
    case GgmlType::F16:
      for (int64_t k = 0; k < kc; k += 8)
        _mm256_storeu_ps(out + k, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * (k0 + k)))));
      break;
    default:  // BF16: the high half of an f32
      for (int64_t k = 0; k < kc; k += 8) {
        const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * (k0 + k))));
        _mm256_storeu_ps(out + k, _mm256_castsi256_ps(_mm256_slli_epi32(h, 16)));
      }
      break;
  }
}

// Transposes the 8x8 block at in[i][j] (row stride ld) into out[j][i] (row stride ldo).
inline void transpose8(const float* in, int64_t ld, float* out, int64_t ldo) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(in + i * ld);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(out + i * ldo, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
    _mm256_storeu_ps(out + (i + 4) * ldo, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
  }
}

// Panels of nr rows (a multiple of 16) for columns [k0, k0 + kc): panel p is [kc][16] floats. Rows are
// converted 8 at a time and written in 8x8 transposed blocks (scalar scatter stores cost as much as the
// tiles' arithmetic).
void pack(GgmlType t, const uint8_t* w, size_t w_stride, int64_t nr, int64_t k0, int64_t kc, float* bp) {
  alignas(32) float tmp[8 * kKC];
  const int64_t kc8 = kc / 8 * 8;
  for (int64_t r0 = 0; r0 < nr; r0 += 8) {
    for (int i = 0; i < 8; ++i) convert(t, w + size_t(r0 + i) * w_stride, k0, kc, tmp + i * kKC);
    float* dst = bp + (r0 / kNR) * kc * kNR + (r0 % kNR);
    for (int64_t k = 0; k < kc8; k += 8) transpose8(tmp + k, kKC, dst + k * kNR, kNR);
    for (int64_t k = kc8; k < kc; ++k)
      for (int i = 0; i < 8; ++i) dst[k * kNR + i] = tmp[i * kKC + k];
  }
}

// c[m][0..16) (+)= sum_k a[m][k] * bp[k][0..16) for M tokens.
template <int M>
void tile(const float* a, int64_t a_stride, const float* bp, int64_t kc, float* c, int64_t c_stride, bool accumulate) {
  __m256 c0[M], c1[M];
#pragma GCC unroll 6
  for (int m = 0; m < M; ++m) {
    c0[m] = accumulate ? _mm256_loadu_ps(c + m * c_stride) : _mm256_setzero_ps();
    c1[m] = accumulate ? _mm256_loadu_ps(c + m * c_stride + 8) : _mm256_setzero_ps();
  }
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_load_ps(bp + k * kNR), b1 = _mm256_load_ps(bp + k * kNR + 8);
#pragma GCC unroll 6
    for (int m = 0; m < M; ++m) {
      const __m256 av = _mm256_broadcast_ss(a + m * a_stride + k);
      c0[m] = _mm256_fmadd_ps(av, b0, c0[m]);
      c1[m] = _mm256_fmadd_ps(av, b1, c1[m]);
    }
  }
#pragma GCC unroll 6
  for (int m = 0; m < M; ++m) {
    _mm256_storeu_ps(c + m * c_stride, c0[m]);
    _mm256_storeu_ps(c + m * c_stride + 8, c1[m]);
  }
}

using TileFn = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t, bool);
constexpr TileFn kTiles[kMR] = {tile<1>, tile<2>, tile<3>, tile<4>, tile<5>, tile<6>};

}  // namespace

bool gemm_float_applies(GgmlType t, int64_t rows, int64_t cols, int64_t n_tokens) {
  const bool float_type = t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16;
  return float_type && rows % kNR == 0 && cols % 8 == 0 && n_tokens >= 8;
}

void gemm_float_avx2(GgmlType t, const uint8_t* w, size_t w_stride, int64_t r0, int64_t r1, int64_t cols,
                     const float* x, int64_t n_tokens, float* y, int64_t y_stride) {
  const size_t pack_floats = size_t(kRowBlock) * kKC;
  if (t_pack.size() < pack_floats + 8) t_pack.resize(pack_floats + 8);
  float* bp = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(t_pack.data()) + 31) & ~uintptr_t(31));
  for (int64_t rb = r0; rb < r1; rb += kRowBlock) {
    const int64_t nr = std::min(kRowBlock, r1 - rb);
    for (int64_t k0 = 0; k0 < cols; k0 += kKC) {
      const int64_t kc = std::min(kKC, cols - k0);
      pack(t, w + size_t(rb) * w_stride, w_stride, nr, k0, kc, bp);
      for (int64_t t0 = 0; t0 < n_tokens; t0 += kMR) {
        const int m = int(std::min<int64_t>(kMR, n_tokens - t0));
        for (int64_t p = 0; p < nr / kNR; ++p)
          kTiles[m - 1](x + t0 * cols + k0, cols, bp + p * kc * kNR, kc, y + t0 * y_stride + rb + p * kNR, y_stride,
                        k0 > 0);
      }
    }
  }
}

}  // namespace kvtax::mm
