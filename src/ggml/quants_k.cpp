// K-quant reference codecs. Dequantizers follow ggml's layouts exactly; the quantizers use a simple
// least-squares scale/min fit (not llama.cpp's search) but emit the same layout.
#include "ggml/quants_k.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/f16.h"

namespace kvtax {

void dequant_q2_k(const BlockQ2_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(b[i].d), dmin = f16_to_f32(b[i].dmin);
    // Value k of half h (128 values each): byte 32h + k%32, bit pair k/32; sub-block = 8h + k/16.
    for (int h = 0; h < 2; ++h)
      for (int k = 0; k < 128; ++k) {
        const uint8_t sc = b[i].scales[8 * h + k / 16];
        const int q = (b[i].qs[32 * h + k % 32] >> (2 * (k / 32))) & 3;
        *y++ = d * float(sc & 0xF) * float(q) - dmin * float(sc >> 4);
      }
  }
}

void dequant_q3_k(const BlockQ3_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(b[i].d);
    int8_t sc[16];
    q3k_scales(b[i].scales, sc);
    for (int h = 0; h < 2; ++h)
      for (int k = 0; k < 128; ++k) {
        const int l = k % 32, shift = k / 32;
        const int low = (b[i].qs[32 * h + l] >> (2 * shift)) & 3;
        const bool high = b[i].hmask[l] & (1u << (4 * h + shift));
        *y++ = d * float(sc[8 * h + k / 16]) * float(low - (high ? 0 : 4));
      }
  }
}

namespace {

// Q4_K and Q5_K share the layout of scales, mins and low nibbles (each 32 bytes of qs hold two
// sub-blocks: low nibbles then high nibbles); `high(block, j, l)` adds a format's extra bits.
template <class Block, class HighBits>
void dequant_k_nibbles(const Block* b, float* y, int64_t nb, HighBits high) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(b[i].d), dmin = f16_to_f32(b[i].dmin);
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      k_scale_min(j, b[i].scales, sc, m);
      const uint8_t* q = b[i].qs + 32 * (j / 2);
      const int shift = 4 * (j % 2);
      for (int l = 0; l < 32; ++l) {
        const int v = ((q[l] >> shift) & 0xF) | high(b[i], j, l);
        *y++ = d * float(sc) * float(v) - dmin * float(m);
      }
    }
  }
}

}  // namespace

void dequant_q4_k(const BlockQ4_K* b, float* y, int64_t nb) {
  dequant_k_nibbles(b, y, nb, [](const BlockQ4_K&, int, int) { return 0; });
}

void dequant_q5_k(const BlockQ5_K* b, float* y, int64_t nb) {
  // Bit j of qh[l] is the fifth bit of value l of sub-block j.
  dequant_k_nibbles(b, y, nb, [](const BlockQ5_K& blk, int j, int l) { return ((blk.qh[l] >> j) & 1) << 4; });
}

void dequant_q6_k(const BlockQ6_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(b[i].d);
    // Per half of 128: value 32*s + l takes ql[64h + l + 32*(s&1)] nibble (s>>1) and qh[32h + l] bits 2s.
    for (int h = 0; h < 2; ++h)
      for (int s = 0; s < 4; ++s)
        for (int l = 0; l < 32; ++l) {
          const int lo = (b[i].ql[64 * h + l + 32 * (s & 1)] >> (4 * (s >> 1))) & 0xF;
          const int hi = (b[i].qh[32 * h + l] >> (2 * s)) & 3;
          const int sc = b[i].scales[8 * h + 2 * s + l / 16];
          *y++ = d * float(sc) * float((lo | (hi << 4)) - 32);
        }
  }
}

void dequant_q8_k(const BlockQ8_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i)
    for (int j = 0; j < kQK_K; ++j) *y++ = b[i].d * float(b[i].qs[j]);
}

namespace {

// Fits x ~ s*q - m with q in 0..nmax and m >= 0 (the min is stored as a non-negative offset).
// Alternates rounding q and a least-squares refit of (s, m); keeps the lowest squared error.
void fit_scale_min(const float* x, int n, int nmax, float& s_out, float& m_out) {
  float lo = x[0], hi = x[0];
  for (int i = 1; i < n; ++i) lo = std::min(lo, x[i]), hi = std::max(hi, x[i]);
  lo = std::min(lo, 0.0f);
  if (hi <= lo) { s_out = 0; m_out = -lo; return; }
  float s = (hi - lo) / float(nmax), m = -lo;
  float best_err = INFINITY, best_s = s, best_m = m;
  for (int it = 0; it < 4; ++it) {
    double sq = 0, sqq = 0, sx = 0, sqx = 0, err = 0;
    for (int i = 0; i < n; ++i) {
      const int q = std::clamp(int(std::lround((x[i] + m) / s)), 0, nmax);
      const float e = s * float(q) - m - x[i];
      err += double(e) * e;
      sq += q, sqq += double(q) * q, sx += x[i], sqx += double(q) * x[i];
    }
    if (err < best_err) best_err = float(err), best_s = s, best_m = m;
    // Solve min sum (s q - m - x)^2 for s, m.
    const double det = n * sqq - sq * sq;
    if (det <= 0) break;
    const double ns = (n * sqx - sq * sx) / det;
    const double nm = (sq * sqx - sqq * sx) / det;
    if (!(ns > 0) || nm < 0) break;
    s = float(ns), m = float(nm);
  }
  s_out = best_s, m_out = best_m;
}

// Shared by Q4_K / Q5_K: per 32-value sub-block scales/mins -> 6-bit codes under f16 super scales.
// Writes d, dmin, the packed 12-byte table and the final integer levels q[256].
void quant_k_scales(const float* x, int nmax, uint16_t& d_out, uint16_t& dmin_out, uint8_t packed[12],
                    uint8_t q[kQK_K]) {
  float s[8], m[8], smax = 0, mmax = 0;
  for (int j = 0; j < 8; ++j) {
    fit_scale_min(x + 32 * j, 32, nmax, s[j], m[j]);
    smax = std::max(smax, s[j]), mmax = std::max(mmax, m[j]);
  }
  d_out = f32_to_f16(smax / 63.0f);
  dmin_out = f32_to_f16(mmax / 63.0f);
  const float d = f16_to_f32(d_out), dmin = f16_to_f32(dmin_out);
  uint8_t sc[8], mc[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = d > 0 ? uint8_t(std::clamp(int(std::lround(s[j] / d)), 0, 63)) : 0;
    mc[j] = dmin > 0 ? uint8_t(std::clamp(int(std::lround(m[j] / dmin)), 0, 63)) : 0;
  }
  std::memset(packed, 0, 12);
  for (int j = 0; j < 4; ++j) {
    packed[j] = uint8_t(sc[j] | ((sc[j + 4] >> 4) << 6));
    packed[j + 4] = uint8_t(mc[j] | ((mc[j + 4] >> 4) << 6));
    packed[j + 8] = uint8_t((sc[j + 4] & 0xF) | ((mc[j + 4] & 0xF) << 4));
  }
  for (int j = 0; j < 8; ++j) {
    const float step = d * float(sc[j]), off = dmin * float(mc[j]);
    for (int l = 0; l < 32; ++l) {
      const float v = step > 0 ? (x[32 * j + l] + off) / step : 0.0f;
      q[32 * j + l] = uint8_t(std::clamp(int(std::lround(v)), 0, nmax));
    }
  }
}

}  // namespace

void quant_q4_k(const float* x, BlockQ4_K* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    uint8_t q[kQK_K];
    quant_k_scales(x, 15, b[i].d, b[i].dmin, b[i].scales, q);
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 32; ++l) b[i].qs[32 * j + l] = uint8_t(q[64 * j + l] | (q[64 * j + 32 + l] << 4));
  }
}

void quant_q5_k(const float* x, BlockQ5_K* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    uint8_t q[kQK_K];
    quant_k_scales(x, 31, b[i].d, b[i].dmin, b[i].scales, q);
    std::memset(b[i].qh, 0, sizeof b[i].qh);
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 32; ++l) {
        const uint8_t a = q[64 * j + l], c = q[64 * j + 32 + l];
        b[i].qs[32 * j + l] = uint8_t((a & 0xF) | ((c & 0xF) << 4));
        b[i].qh[l] |= uint8_t(((a >> 4) << (2 * j)) | ((c >> 4) << (2 * j + 1)));
      }
  }
}

void quant_q6_k(const float* x, BlockQ6_K* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    // Per 16 values: signed scale mapping the largest-magnitude value to -32 (range -32..31).
    float s[16], smax = 0;
    for (int j = 0; j < 16; ++j) {
      float amax = 0, vmax = 0;
      for (int l = 0; l < 16; ++l)
        if (std::fabs(x[16 * j + l]) > amax) amax = std::fabs(x[16 * j + l]), vmax = x[16 * j + l];
      s[j] = vmax / -32.0f;
      smax = std::max(smax, std::fabs(s[j]));
    }
    b[i].d = f32_to_f16(smax / 127.0f);
    const float d = f16_to_f32(b[i].d);
    int q[kQK_K];
    for (int j = 0; j < 16; ++j) {
      b[i].scales[j] = d > 0 ? int8_t(std::clamp(int(std::lround(s[j] / d)), -127, 127)) : 0;
      const float step = d * float(b[i].scales[j]);
      for (int l = 0; l < 16; ++l)
        q[16 * j + l] = step != 0 ? std::clamp(int(std::lround(x[16 * j + l] / step)), -32, 31) + 32 : 32;
    }
    std::memset(b[i].qh, 0, sizeof b[i].qh);
    for (int h = 0; h < 2; ++h)
      for (int s4 = 0; s4 < 4; ++s4)
        for (int l = 0; l < 32; ++l) {
          const int v = q[128 * h + 32 * s4 + l];
          uint8_t& lo = b[i].ql[64 * h + l + 32 * (s4 & 1)];
          if (s4 < 2) lo = uint8_t(v & 0xF);
          else lo = uint8_t(lo | ((v & 0xF) << 4));
          b[i].qh[32 * h + l] |= uint8_t((v >> 4) << (2 * s4));
        }
  }
}

void quant_q8_k(const float* x, BlockQ8_K* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    float amax = 0, vmax = 0;
    for (int j = 0; j < kQK_K; ++j)
      if (std::fabs(x[j]) > amax) amax = std::fabs(x[j]), vmax = x[j];
    if (amax == 0) {
      std::memset(&b[i], 0, sizeof b[i]);
      continue;
    }
    const float iscale = -127.0f / vmax;  // and ties to even below: llama.cpp's activation rounding, to the bit
    for (int j = 0; j < kQK_K; ++j) b[i].qs[j] = int8_t(std::min(127, int(std::nearbyint(iscale * x[j]))));
    for (int j = 0; j < 16; ++j) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += b[i].qs[16 * j + l];
      b[i].bsums[j] = int16_t(sum);
    }
    b[i].d = 1.0f / iscale;
  }
}

}  // namespace kvtax
