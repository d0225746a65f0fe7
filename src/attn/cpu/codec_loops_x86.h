// x86 SIMD inner loops for every KV codec (256-bit vectors). Included by loops_avx2.cpp and
// loops_avx512.cpp inside their own namespace, so each is compiled with that level's flags (the
// AVX-512 build also gets VNNI for the int8 dots). Float codecs: decode 8/16 values, FMA with q or
// into the output. q8/q4 K: q is quantized to int8 per 32-block and the dot is integer.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "attn/cpu/loops.h"
#include "kv/codecs/formats.h"

namespace {

using kvtax::attn::KLoops;
using kvtax::attn::Prefetch;
using kvtax::attn::VLoops;
using kvtax::attn::MathLoops;
using kvtax::kv::CodecId;

inline float hsum(__m256 v) {
  __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}
inline float ld_f32(const uint8_t* p) { float f; std::memcpy(&f, p, 4); return f; }
inline float ld_f16(const uint8_t* p) { uint16_t h; std::memcpy(&h, p, 2); return _cvtsh_ss(h); }
inline __m256 cvt_i8x8(__m128i x) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(x)); }

// e4m3 bytes -> the f16 with the same bits shifted into place; its value is the e4m3 value / 256
// (also right for e4m3 subnormals, which become f16 subnormals). The 256 goes into the row gain.
inline __m128i e4m3_to_h8(__m128i b16) {
  const __m128i s = _mm_slli_epi16(_mm_and_si128(b16, _mm_set1_epi16(0x80)), 8);
  const __m128i m = _mm_slli_epi16(_mm_and_si128(b16, _mm_set1_epi16(0x7f)), 7);
  return _mm_or_si128(s, m);
}

// ---- decoders: load8(row, i) / load16(row, i, v0, v1) in stored units, gain(row) per row,
// ---- nscales(d) block scales per row (1 = per-row gain) and scale(row, si) for V weights.
struct DecF32 {
  int d;
  explicit DecF32(int d_) : d(d_) {}
  __m256 load8(const uint8_t* r, int i) const { return _mm256_loadu_ps(reinterpret_cast<const float*>(r) + i); }
  void load16(const uint8_t* r, int i, __m256& a, __m256& b) const { a = load8(r, i); b = load8(r, i + 8); }
  float gain(const uint8_t*) const { return 1.0f; }
  static constexpr bool kBlockScales = false;
  int nscales() const { return 1; }
  float scale(const uint8_t*, int) const { return 1.0f; }
  __m128 scale4(const uint8_t*, int) const { return _mm_set1_ps(1.0f); }
};
struct DecF16 : DecF32 {
  using DecF32::DecF32;
  __m256 load8(const uint8_t* r, int i) const {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r + 2 * i)));
  }
  void load16(const uint8_t* r, int i, __m256& a, __m256& b) const { a = load8(r, i); b = load8(r, i + 8); }
};
struct DecBF16 : DecF32 {
  using DecF32::DecF32;
  __m256 load8(const uint8_t* r, int i) const {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r + 2 * i)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
  void load16(const uint8_t* r, int i, __m256& a, __m256& b) const { a = load8(r, i); b = load8(r, i + 8); }
};
struct DecFP8 : DecF32 {
  using DecF32::DecF32;
  __m256 load8(const uint8_t* r, int i) const {
    const __m128i b = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(r + 4 + i)));
    return _mm256_cvtph_ps(e4m3_to_h8(b));
  }
  void load16(const uint8_t* r, int i, __m256& a, __m256& b) const {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r + 4 + i));
    a = _mm256_cvtph_ps(e4m3_to_h8(_mm_cvtepu8_epi16(x)));
    b = _mm256_cvtph_ps(e4m3_to_h8(_mm_cvtepu8_epi16(_mm_srli_si128(x, 8))));
  }
  float gain(const uint8_t* r) const { return ld_f32(r) * 256.0f; }
  float scale(const uint8_t* r, int) const { return gain(r); }
};
struct DecQ8 : DecF32 {
  using DecF32::DecF32;
  void load16(const uint8_t* r, int i, __m256& a, __m256& b) const {
    const uint8_t* c = r + 2 * (d / 32) + i;
    a = cvt_i8x8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(c)));
    b = cvt_i8x8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(c + 8)));
  }
  static constexpr bool kBlockScales = true;
  int nscales() const { return d / 32; }
  float scale(const uint8_t* r, int si) const { return ld_f16(r + 2 * si); }
  __m128 scale4(const uint8_t* r, int si) const {
    return _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(r + 2 * si)));
  }
};
struct DecQ4 : DecQ8 {
  using DecQ8::DecQ8;
  void load16(const uint8_t* r, int i, __m256& a, __m256& b) const {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r + 2 * (d / 32) + (i / 32) * 16));
    const __m128i nib = (i & 16) ? _mm_srli_epi16(x, 4) : x;
    const __m128i c = _mm_sub_epi8(_mm_and_si128(nib, _mm_set1_epi8(15)), _mm_set1_epi8(8));
    a = cvt_i8x8(c);
    b = cvt_i8x8(_mm_srli_si128(c, 8));
  }
};
// tq4 codes -> int8 levels with one byte shuffle; the row gain / grid goes into the weight.
struct DecTQ4 : DecF32 {
  __m128i lut;
  float inv_grid;
  explicit DecTQ4(int d_) : DecF32(d_) {
    lut = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kvtax::kv::tq4_levels_i8().data()));
    inv_grid = 1.0f / kvtax::kv::tq4_grid();
  }
  void load16(const uint8_t* r, int i, __m256& a, __m256& b) const {
    const __m128i x = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(r + 4 + i / 2));
    const __m128i m = _mm_set1_epi8(15);
    const __m128i idx = _mm_unpacklo_epi8(_mm_and_si128(x, m), _mm_and_si128(_mm_srli_epi16(x, 4), m));
    const __m128i v = _mm_shuffle_epi8(lut, idx);
    a = cvt_i8x8(v);
    b = cvt_i8x8(_mm_srli_si128(v, 8));
  }
  float gain(const uint8_t* r) const { return ld_f32(r) * inv_grid; }
  float scale(const uint8_t* r, int) const { return gain(r); }
};
struct DecTQ3 : DecF32 {
  __m256 cb;
  __m256i shifts = _mm256_setr_epi32(0, 3, 6, 9, 12, 15, 18, 21);
  explicit DecTQ3(int d_) : DecF32(d_) { cb = _mm256_loadu_ps(kvtax::kv::tq3_levels().data()); }
  __m256 load8(const uint8_t* r, int i) const {
    // 8 codes in 3 bytes; read 4 bytes ending at the group's last byte so nothing past the row is read.
    const int g = i / 8, back = g > 0 ? 1 : 0;
    uint32_t u;
    std::memcpy(&u, r + 4 + 3 * g - back, 4);
    u >>= 8 * back;
    const __m256i idx = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(int(u)), shifts), _mm256_set1_epi32(7));
    return _mm256_permutevar8x32_ps(cb, idx);
  }
  void load16(const uint8_t* r, int i, __m256& a, __m256& b) const { a = load8(r, i); b = load8(r, i + 8); }
  float gain(const uint8_t* r) const { return ld_f32(r); }
  float scale(const uint8_t* r, int) const { return ld_f32(r); }
};


// Issues the caller's prefetch range a few cache lines per loop step, spread over `steps` steps. The
// pointer stops at the range's last line (re-prefetching it is harmless), so a step is a prefetch and a
// conditional move, not a bounds-checked loop.
struct Streamer {
  const char* p;
  const char* last;
  int per;
  Streamer(const Prefetch& pf, int steps) : p(reinterpret_cast<const char*>(pf.p)) {
    const size_t lines = (pf.bytes + 63) / 64;
    last = lines ? p + 64 * (lines - 1) : p;
    per = steps > 0 && lines ? int((lines + size_t(steps) - 1) / size_t(steps)) : 0;
  }
  void step() {
    for (int j = 0; j < per; ++j) one();
  }
  void one() {
    _mm_prefetch(p, _MM_HINT_T0);
    p = p < last ? p + 64 : p;
  }
  bool active() const { return per > 0 && p < last; }
};

// ---- float K path
size_t f_prep_bytes(int d) { return size_t(d) * 4; }
void f_prep(const float* q, int d, uint8_t* dst) { std::memcpy(dst, q, size_t(d) * 4); }

// Lane j of the result is the horizontal sum of a[j].
inline __m256 hsum8(const __m256* a) {
  const __m256 h01 = _mm256_hadd_ps(a[0], a[1]), h23 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 h45 = _mm256_hadd_ps(a[4], a[5]), h67 = _mm256_hadd_ps(a[6], a[7]);
  const __m256 x = _mm256_hadd_ps(h01, h23), y = _mm256_hadd_ps(h45, h67);
  return _mm256_add_ps(_mm256_permute2f128_ps(x, y, 0x20), _mm256_permute2f128_ps(x, y, 0x31));
}

// Tokens handled together so that (tokens x rows) = 8 independent accumulator chains: FMA latency is
// hidden and each q slice loaded once serves several K rows.
template <int R> constexpr int kTokensPerStep = 8 / R;

template <class Dec, int R>
void dot_f(const uint8_t* k, size_t stride, int n, int d, const uint8_t* const* q, float* const* s,
           const Prefetch& pf) {
  const Dec dec(d);
  const float* qf[R];
  #pragma GCC unroll 8
  for (int r = 0; r < R; ++r) qf[r] = reinterpret_cast<const float*>(q[r]);
  constexpr int TT = kTokensPerStep<R>;
  Streamer pre(pf, n / TT);
  int t = 0;
  if constexpr (TT * R == 8) {
    for (; t + TT <= n; t += TT) {
      const uint8_t* row = k + t * stride;
      pre.step();
      __m256 a[8];
      #pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) a[j] = _mm256_setzero_ps();
      for (int i = 0; i < d; i += 8) {
        __m256 qv[R];
        #pragma GCC unroll 8
        for (int r = 0; r < R; ++r) qv[r] = _mm256_loadu_ps(qf[r] + i);
        #pragma GCC unroll 8
        for (int tt = 0; tt < TT; ++tt) {
          const __m256 kv = dec.load8(row + tt * stride, i);
          #pragma GCC unroll 8
          for (int r = 0; r < R; ++r) a[tt * R + r] = _mm256_fmadd_ps(kv, qv[r], a[tt * R + r]);
        }
      }
      alignas(32) float res[8];
      _mm256_store_ps(res, hsum8(a));
      #pragma GCC unroll 8
      for (int tt = 0; tt < TT; ++tt) {
        const float g = dec.gain(row + tt * stride);
        #pragma GCC unroll 8
        for (int r = 0; r < R; ++r) s[r][t + tt] = res[tt * R + r] * g;
      }
    }
  }
  for (; t < n; ++t) {
    const uint8_t* row = k + t * stride;
    __m256 a[R];
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r) a[r] = _mm256_setzero_ps();
    for (int i = 0; i < d; i += 8) {
      const __m256 kv = dec.load8(row, i);
      #pragma GCC unroll 8
      for (int r = 0; r < R; ++r) a[r] = _mm256_fmadd_ps(kv, _mm256_loadu_ps(qf[r] + i), a[r]);
    }
    const float g = dec.gain(row);
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r) s[r][t] = hsum(a[r]) * g;
  }
}

// ---- int8 K path (q8, tq4)
size_t i8_prep_bytes(int d) { return size_t(d / 32) * 4 + size_t(d); }
void i8_prep(const float* q, int d, uint8_t* dst);
// tq4: q quantized like q8's, then each block reordered to [even values, odd values] to match the codes.
void tq4_prep(const float* q, int d, uint8_t* dst) {
  i8_prep(q, d, dst);
  int8_t* qi = reinterpret_cast<int8_t*>(dst + 4 * (d / 32));
  for (int b = 0; b < d / 32; ++b) {
    int8_t t[32];
    for (int j = 0; j < 16; ++j) {
      t[j] = qi[32 * b + 2 * j];
      t[16 + j] = qi[32 * b + 2 * j + 1];
    }
    std::memcpy(qi + 32 * b, t, 32);
  }
}
void i8_prep(const float* q, int d, uint8_t* dst) {
  const int nb = d / 32;
  int8_t* qi = reinterpret_cast<int8_t*>(dst + 4 * nb);
  for (int b = 0; b < nb; ++b) {
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(q[32 * b + i]));
    const float s = amax / 127.0f, inv = amax > 0 ? 127.0f / amax : 0.0f;
    std::memcpy(dst + 4 * b, &s, 4);
    for (int i = 0; i < 32; ++i) qi[32 * b + i] = int8_t(std::nearbyint(std::clamp(q[32 * b + i] * inv, -127.0f, 127.0f)));
  }
}

inline __m256i dot_i8(__m256i ax, __m256i sy) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), ax, sy);
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sy), _mm256_set1_epi16(1));
#endif
}

enum class IntK { q8, tq4 };  // q4 / q4r: codec_loops_q4_x86.h

// 32 int8 values of block b, in the order the prepared q uses (see tq4_prep).
template <IntK KIND>
inline __m256i load_codes(const uint8_t* codes, int b, __m256i lut) {
  if constexpr (KIND == IntK::tq4) {
    // byte j holds values 2j (low nibble) and 2j+1 (high): low nibbles = even values, high = odd.
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + 16 * b));
    const __m128i m = _mm_set1_epi8(15);
    const __m256i idx = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(x, 4), m), _mm_and_si128(x, m));
    return _mm256_shuffle_epi8(lut, idx);
  } else {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 32 * b));
  }
}

template <IntK KIND, int R>
void dot_q(const uint8_t* k, size_t stride, int n, int d, const uint8_t* const* q, float* const* s,
           const Prefetch& pf) {
  const int nb = d / 32;
  const float* qs[R];
  const int8_t* qi[R];
  #pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    qs[r] = reinterpret_cast<const float*>(q[r]);
    qi[r] = reinterpret_cast<const int8_t*>(q[r] + 4 * nb);
  }
  constexpr int TT = kTokensPerStep<R>;
  constexpr bool kTQ = KIND == IntK::tq4;
  const int hdr = kTQ ? 4 : 2 * nb;  // codes start after the scales (q8/q4) or the gain (tq4)
  const __m256i lut = kTQ ? _mm256_broadcastsi128_si256(_mm_loadu_si128(
                                reinterpret_cast<const __m128i*>(kvtax::kv::tq4_levels_i8().data())))
                          : _mm256_setzero_si256();
  const float inv_grid = kTQ ? 1.0f / kvtax::kv::tq4_grid() : 1.0f;
  Streamer pre(pf, n / TT);
  int t = 0;
  if constexpr (TT * R == 8) {
    // Block scale products kd[t][b] * qs[r][b], formed 4 blocks at a time with vector ops and read back
    // as broadcast loads, so the integer dot's FMA is the only float work per block and row.
    constexpr int kChunk = 16;
    alignas(32) float kq[TT * R * kChunk];
    const bool vec_scales = !kTQ && nb % 4 == 0;
    for (; t + TT <= n; t += TT) {
      const uint8_t* row = k + t * stride;
      pre.step();
      __m256 a[8];
      #pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) a[j] = _mm256_setzero_ps();
      for (int b0 = 0; b0 < nb; b0 += kChunk) {
        const int nbc = std::min(kChunk, nb - b0);
        #pragma GCC unroll 8
        for (int tt = 0; tt < TT && !kTQ; ++tt) {  // tq4 has no block scales: its q scales are used as they are
          const uint8_t* rw = row + tt * stride;
          if (vec_scales) {
            for (int b = 0; b < nbc; b += 4) {
              const __m128 kd4 = _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(rw + 2 * (b0 + b))));
              #pragma GCC unroll 8
              for (int r = 0; r < R; ++r)
                _mm_store_ps(kq + (tt * R + r) * kChunk + b, _mm_mul_ps(kd4, _mm_loadu_ps(qs[r] + b0 + b)));
            }
          } else {
            for (int b = 0; b < nbc; ++b) {
              const float kd = ld_f16(rw + 2 * (b0 + b));
              #pragma GCC unroll 8
              for (int r = 0; r < R; ++r) kq[(tt * R + r) * kChunk + b] = kd * qs[r][b0 + b];
            }
          }
        }
        for (int b = 0; b < nbc; ++b) {
          __m256i qv[R];
          #pragma GCC unroll 8
          for (int r = 0; r < R; ++r)
            qv[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qi[r] + 32 * (b0 + b)));
          #pragma GCC unroll 8
          for (int tt = 0; tt < TT; ++tt) {
            const __m256i kq8 = load_codes<KIND>(row + tt * stride + hdr, b0 + b, lut);
            const __m256i ax = _mm256_sign_epi8(kq8, kq8);
            #pragma GCC unroll 8
            for (int r = 0; r < R; ++r) {
              const __m256i sy = _mm256_sign_epi8(qv[r], kq8);
              const float* sc = kTQ ? qs[r] + b0 + b : kq + (tt * R + r) * kChunk + b;
              a[tt * R + r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_i8(ax, sy)), _mm256_broadcast_ss(sc), a[tt * R + r]);
            }
          }
        }
      }
      alignas(32) float res[8];
      _mm256_store_ps(res, hsum8(a));
      #pragma GCC unroll 8
      for (int tt = 0; tt < TT; ++tt) {
        const float g = kTQ ? ld_f32(row + tt * stride) * inv_grid : 1.0f;
        #pragma GCC unroll 8
        for (int r = 0; r < R; ++r) s[r][t + tt] = res[tt * R + r] * g;
      }
    }
  }
  for (; t < n; ++t) {
    const uint8_t* row = k + t * stride;
    __m256 a[R];
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r) a[r] = _mm256_setzero_ps();
    for (int b = 0; b < nb; ++b) {
      const float kd = kTQ ? 1.0f : ld_f16(row + 2 * b);
      const __m256i kq = load_codes<KIND>(row + hdr, b, lut);
      const __m256i ax = _mm256_sign_epi8(kq, kq);
      #pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m256i sy = _mm256_sign_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qi[r] + 32 * b)), kq);
        a[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_i8(ax, sy)), _mm256_set1_ps(kd * qs[r][b]), a[r]);
      }
    }
    const float g = kTQ ? ld_f32(row) * inv_grid : 1.0f;
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r) s[r][t] = hsum(a[r]) * g;
  }
}

// ---- V path: weights p[r][t] * (row or block scale) are formed once per token, then each 16-value
// slice of the output stays in registers while the run of V rows streams past (the run is L1-resident).
// Output slice width (in 16-value halves) and token parity sets per row count, so that R x slices x sets
// = 8 independent accumulator chains.
template <int R> constexpr int kHalves = R <= 2 ? 2 : 1;
template <int R> constexpr int kSets = R == 1 ? 2 : 1;

template <class Dec, int R, int NH, int P>
void acc_slices(const Dec& dec, const uint8_t* base, size_t stride, int m, int d, const float* w, int ns, float* const* o,
                Streamer& pre) {
  constexpr int W = 16 * NH;
  // w[(t * R + r) * ns + si]: the weight of row t for output row r and scale block si.
  auto fma_row = [&](__m256 (&acc)[R][2 * NH], int t, int i, int si) __attribute__((always_inline)) {
    const uint8_t* row = base + t * stride;
    __m256 v[2 * NH];
    #pragma GCC unroll 8
    for (int h = 0; h < NH; ++h) dec.load16(row, i + 16 * h, v[2 * h], v[2 * h + 1]);
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 wv = _mm256_broadcast_ss(&w[(t * R + r) * ns + si]);
      #pragma GCC unroll 8
      for (int j = 0; j < 2 * NH; ++j) acc[r][j] = _mm256_fmadd_ps(wv, v[j], acc[r][j]);
    }
  };
  for (int i = 0; i < d; i += W) {
    const int si = ns == 1 ? 0 : i / 32;
    __m256 a[P][R][2 * NH];
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
      #pragma GCC unroll 8
      for (int j = 0; j < 2 * NH; ++j) {
        a[0][r][j] = _mm256_loadu_ps(o[r] + i + 8 * j);
        #pragma GCC unroll 8
        for (int ps = 1; ps < P; ++ps) a[ps][r][j] = _mm256_setzero_ps();
      }
    // Two rows per step (into P independent sets): half the loop overhead per row. One prefetch per
    // step until the range is covered; later slices skip it.
    const bool pf_on = pre.active();
    int t = 0;
    for (; t + 2 <= m; t += 2) {
      if (pf_on) pre.one();
      fma_row(a[0], t, i, si);
      fma_row(a[P - 1], t + 1, i, si);
    }
    if (t < m) fma_row(a[0], t, i, si);
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
      #pragma GCC unroll 8
      for (int j = 0; j < 2 * NH; ++j) {
        __m256 x = a[0][r][j];
        #pragma GCC unroll 8
        for (int ps = 1; ps < P; ++ps) x = _mm256_add_ps(x, a[ps][r][j]);
        _mm256_storeu_ps(o[r] + i + 8 * j, x);
      }
  }
}

// V path: weights p[r][t] * (row or block scale) are formed once per token, then each slice of the
// output stays in registers while the run of V rows streams past (the run is L1-resident).
template <class Dec, int R>
void acc_v(const uint8_t* v, size_t stride, int n, int d, const float* const* p, float* const* o,
           const Prefetch& pf) {
  const Dec dec(d);
  const int ns = dec.nscales();
  constexpr int kWeights = kvtax::attn::kMaxRows * 64 * 32;
  const int run = std::max(1, std::min(64, kWeights / (R * ns)));  // rows per pass, so w fits
  Streamer pre(pf, 1);  // acc_slices issues one line per two rows until the range is covered
  alignas(32) float w[kWeights];
  for (int t0 = 0; t0 < n; t0 += run) {
    const int m = std::min(run, n - t0);
    const uint8_t* base = v + size_t(t0) * stride;
    for (int t = 0; t < m; ++t) {
      const uint8_t* row = base + t * stride;
      float* wt = w + size_t(t) * R * ns;
      if (Dec::kBlockScales && ns % 4 == 0) {  // 4 block scales per vector op
        for (int si = 0; si < ns; si += 4) {
          const __m128 sc = dec.scale4(row, si);
          #pragma GCC unroll 8
          for (int r = 0; r < R; ++r) _mm_storeu_ps(wt + r * ns + si, _mm_mul_ps(sc, _mm_set1_ps(p[r][t0 + t])));
        }
      } else {
        for (int si = 0; si < ns; ++si) {
          const float sc = dec.scale(row, si);
          #pragma GCC unroll 8
          for (int r = 0; r < R; ++r) wt[r * ns + si] = p[r][t0 + t] * sc;
        }
      }
    }
    if (kHalves<R> == 2 && d % 32 == 0)
      acc_slices<Dec, R, kHalves<R>, kSets<R>>(dec, base, stride, m, d, w, ns, o, pre);
    else
      acc_slices<Dec, R, 1, kSets<R>>(dec, base, stride, m, d, w, ns, o, pre);
  }
}

template <class Dec>
constexpr KLoops make_kf() { return {f_prep_bytes, f_prep, {dot_f<Dec, 1>, dot_f<Dec, 2>, dot_f<Dec, 3>, dot_f<Dec, 4>}}; }
template <IntK KIND>
constexpr KLoops make_kq() {
  return {i8_prep_bytes, KIND == IntK::tq4 ? tq4_prep : i8_prep,
          {dot_q<KIND, 1>, dot_q<KIND, 2>, dot_q<KIND, 3>, dot_q<KIND, 4>}};
}
template <class Dec>
void decode_rows(const uint8_t* rows, size_t stride, int n, int d, float* out) {
  const Dec dec(d);
  const int ns = dec.nscales();
  for (int t = 0; t < n; ++t, out += d) {
    const uint8_t* row = rows + size_t(t) * stride;
    for (int i = 0; i < d; i += 16) {
      const __m256 sc = _mm256_set1_ps(dec.scale(row, ns == 1 ? 0 : i / 32));
      __m256 a, b;
      dec.load16(row, i, a, b);
      _mm256_storeu_ps(out + i, _mm256_mul_ps(a, sc));
      _mm256_storeu_ps(out + i + 8, _mm256_mul_ps(b, sc));
    }
  }
}

template <class Dec>
constexpr VLoops make_v() {
  return {{acc_v<Dec, 1>, acc_v<Dec, 2>, acc_v<Dec, 3>, acc_v<Dec, 4>}, decode_rows<Dec>};
}

#include "attn/cpu/codec_loops_q4_x86.h"

constexpr VLoops make_v_q4() {
  return {{acc_v_q4<1>, acc_v_q4<2>, acc_v_q4<3>, acc_v_q4<4>}, decode_rows<DecQ4>};
}

// Order follows kv::CodecId.
const KLoops kK[] = {make_kf<DecF32>(),     make_kf<DecF16>(),     make_kf<DecBF16>(),
                     make_kf<DecFP8>(),     make_kq<IntK::q8>(),   make_k_q4(),
                     make_k_q4(),           make_kq<IntK::tq4>(),  make_kf<DecTQ3>()};
const VLoops kV[] = {make_v<DecF32>(), make_v<DecF16>(), make_v<DecBF16>(), make_v<DecFP8>(), make_v<DecQ8>(),
                     make_v_q4(),      make_v_q4(),      make_v<DecTQ4>(),  make_v<DecTQ3>()};
static_assert(sizeof(kK) / sizeof(kK[0]) == kvtax::kv::kNumCodecs);

// exp(x) for x <= 0 (Cephes-style: 2^n * polynomial, ~1 ulp); x < -87 (and -inf) gives exactly 0.
inline __m256 exp_neg(__m256 x) {
  const __m256 keep = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_GE_OQ);
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
  const __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
  return _mm256_and_ps(_mm256_mul_ps(y, _mm256_castsi256_ps(e)), keep);
}

float exp_sum(float* s, int n, float m) {
  const __m256 mv = _mm256_set1_ps(m);
  __m256 acc = _mm256_setzero_ps();
  int t = 0;
  for (; t + 8 <= n; t += 8) {
    const __m256 e = exp_neg(_mm256_sub_ps(_mm256_loadu_ps(s + t), mv));
    _mm256_storeu_ps(s + t, e);
    acc = _mm256_add_ps(acc, e);
  }
  float sum = hsum(acc);
  for (; t < n; ++t) {
    s[t] = std::exp(s[t] - m);
    sum += s[t];
  }
  return sum;
}
void scale(float* x, int n, float c) {
  const __m256 cv = _mm256_set1_ps(c);
  int i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), cv));
  for (; i < n; ++i) x[i] *= c;
}
const MathLoops kMath{exp_sum, scale};

}  // namespace
