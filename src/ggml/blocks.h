#pragma once
// ggml's block layouts, byte for byte (they are what GGUF files hold). Halves are stored as raw
// uint16_t bits; convert with core/f16.h.
#include <cstdint>

#include "core/hd.h"
#include "ggml/types.h"

namespace kvtax {

inline constexpr int kQK = 32;    // values per block of the legacy formats
inline constexpr int kQK_K = 256; // values per K-quant super-block
inline constexpr int kKScaleBytes = 12;

struct BlockQ4_0 { uint16_t d; uint8_t qs[kQK / 2]; };
struct BlockQ4_1 { uint16_t d, m; uint8_t qs[kQK / 2]; };
struct BlockQ5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[kQK / 2]; };
struct BlockQ5_1 { uint16_t d, m; uint8_t qh[4]; uint8_t qs[kQK / 2]; };
struct BlockQ8_0 { uint16_t d; int8_t qs[kQK]; };

// 16 sub-blocks of 16: scales[i] = scale (low nibble) | min (high nibble); q = 2 bits.
struct BlockQ2_K { uint8_t scales[kQK_K / 16]; uint8_t qs[kQK_K / 4]; uint16_t d, dmin; };
// 16 sub-blocks of 16 with 6-bit signed scales (biased by 32); q = 2 low bits + 1 high bit in hmask.
struct BlockQ3_K { uint8_t hmask[kQK_K / 8]; uint8_t qs[kQK_K / 4]; uint8_t scales[kKScaleBytes]; uint16_t d; };
// 8 sub-blocks of 32 with 6-bit scales and mins packed into 12 bytes (see k_scale_min).
struct BlockQ4_K { uint16_t d, dmin; uint8_t scales[kKScaleBytes]; uint8_t qs[kQK_K / 2]; };
struct BlockQ5_K { uint16_t d, dmin; uint8_t scales[kKScaleBytes]; uint8_t qh[kQK_K / 8]; uint8_t qs[kQK_K / 2]; };
// 16 sub-blocks of 16 with int8 scales; q = 4 low bits in ql + 2 high bits in qh, biased by 32.
struct BlockQ6_K { uint8_t ql[kQK_K / 2]; uint8_t qh[kQK_K / 4]; int8_t scales[kQK_K / 16]; uint16_t d; };
// Activation format for K-quant dot products: f32 scale, int8 values, sums of each 16 values.
struct BlockQ8_K { float d; int8_t qs[kQK_K]; int16_t bsums[kQK_K / 16]; };

static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24 && sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110 && sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210 && sizeof(BlockQ8_K) == 292);

// Scale j (0..7) and min j of the 12-byte packed 6-bit table of Q4_K/Q5_K: bytes 0-3 hold scales 0-3
// (low 6 bits), bytes 4-7 mins 0-3; scales/mins 4-7 are a nibble in bytes 8-11 plus the top 2 bits
// of bytes 0-7.
// `byte(i)` returns byte i of the table (the CUDA kernels read it from registers).
template <class Bytes>
KVTAX_HD void k_scale_min_at(int j, const Bytes& byte, uint8_t& sc, uint8_t& m) {
  if (j < 4) {
    sc = uint8_t(byte(j) & 63);
    m = uint8_t(byte(j + 4) & 63);
  } else {
    sc = uint8_t((byte(j + 4) & 0xF) | ((byte(j - 4) >> 6) << 4));
    m = uint8_t((byte(j + 4) >> 4) | ((byte(j) >> 6) << 4));
  }
}
inline void k_scale_min(int j, const uint8_t* q, uint8_t& sc, uint8_t& m) {
  k_scale_min_at(j, [q](int i) { return q[i]; }, sc, m);
}

// The 16 signed scales (-32..31) of a Q3_K block.
inline void q3k_scales(const uint8_t* packed, int8_t out[16]) {
  for (int j = 0; j < 16; ++j) {
    const int low = j < 8 ? (packed[j] & 0xF) : (packed[j - 8] >> 4);
    const int high = (packed[8 + (j % 4)] >> (2 * (j / 4))) & 3;
    out[j] = int8_t((low | (high << 4)) - 32);
  }
}

}  // namespace kvtax
