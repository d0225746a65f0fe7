#pragma once
// Bit layouts of the KV codec rows, shared by the CPU reference decoders (formats.h) and the CUDA
// kernels: the one place that says where each value, scale and gain sits in a row. Plain C++ that nvcc
// also compiles for the device (KVTAX_HD).
//
// Decoding is expressed per "unit" of 8 consecutive values (u covers values 8u..8u+7): unit_decode
// writes 8 unscaled values and returns the factor they are multiplied by (block scale, row scale or
// gain, 1 for plain floats), so kernels can fold that factor into a dot product or a softmax weight.
// Every codec's group divides 8 or is a multiple of it, so a row of d % 8 == 0 is whole units.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/f16.h"
#include "core/hd.h"
#include "kv/codecs/codec.h"

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#endif

namespace kvtax::kv::layout {

constexpr int kUnit = 8;
constexpr int kQBlock = 32;       // q8 / q4 block
constexpr float kFp8Max = 448.0f;  // largest e4m3 ("fn") magnitude

// ---- row sizes and offsets (bytes)
KVTAX_HD constexpr size_t f32_row_bytes(int d) { return size_t(d) * 4; }
KVTAX_HD constexpr size_t half_row_bytes(int d) { return size_t(d) * 2; }
KVTAX_HD constexpr size_t fp8_row_bytes(int d) { return 4 + size_t(d); }  // f32 scale, then codes
// q8 / q4: d/32 f16 block scales first, then the codes.
KVTAX_HD constexpr size_t q_scales_bytes(int d) { return size_t(d / kQBlock) * 2; }
KVTAX_HD constexpr size_t q8_row_bytes(int d) { return q_scales_bytes(d) + size_t(d); }
KVTAX_HD constexpr size_t q4_row_bytes(int d) { return q_scales_bytes(d) + size_t(d) / 2; }
KVTAX_HD constexpr size_t tq4_row_bytes(int d) { return 4 + size_t(d) / 2; }      // f32 gain, then nibbles
KVTAX_HD constexpr size_t tq3_row_bytes(int d) { return 4 + size_t(d) * 3 / 8; }  // f32 gain, 8 codes / 3 B

KVTAX_HD constexpr size_t row_bytes(CodecId c, int d) {
  switch (c) {
    case CodecId::f32: return f32_row_bytes(d);
    case CodecId::f16: case CodecId::bf16: return half_row_bytes(d);
    case CodecId::fp8: return fp8_row_bytes(d);
    case CodecId::q8: return q8_row_bytes(d);
    case CodecId::q4: case CodecId::q4r: return q4_row_bytes(d);
    case CodecId::tq4: return tq4_row_bytes(d);
    case CodecId::tq3: return tq3_row_bytes(d);
    default: return 0;
  }
}

// Rows of vectors rotated by rotation.h (CodecInfo::rotated, known at compile time for the kernels).
KVTAX_HD constexpr bool rotated(CodecId c) { return c == CodecId::q4r || c == CodecId::tq4 || c == CodecId::tq3; }

// ---- element primitives
// e4m3 byte -> float. Placing the 7 magnitude bits at the top of an f32's exponent/mantissa gives
// 2^(e-127) * (1 + m/8) for normals and m * 2^-129 for subnormals; times 2^120 both are the e4m3 value.
// (0x7f/0xff, e4m3's NaN, decode as 480: the encoder saturates at 448 and never writes them.)
KVTAX_HD float e4m3_to_f32(uint8_t b) {
  const uint32_t bits = (uint32_t(b & 0x7f) << 20) | (uint32_t(b & 0x80) << 24);
  float f;
#if defined(__CUDA_ARCH__)
  f = __uint_as_float(bits);
#else
  std::memcpy(&f, &bits, 4);
#endif
  return f * 0x1p120f;
}

KVTAX_HD float half_bits_to_f32(uint16_t h) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(h));
#else
  return f16_to_f32(h);
#endif
}

KVTAX_HD float bf16_bits_to_f32(uint16_t h) {
  const uint32_t bits = uint32_t(h) << 16;
  float f;
#if defined(__CUDA_ARCH__)
  f = __uint_as_float(bits);
#else
  std::memcpy(&f, &bits, 4);
#endif
  return f;
}

// kNc: device loads through the read-only data path (global memory only); false for rows staged in shared memory.
template <bool kNc = true>
KVTAX_HD float load_f32(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  if constexpr (!kNc) return *reinterpret_cast<const float*>(p);
  return __ldg(reinterpret_cast<const float*>(p));  // rows are 4-byte aligned on the device
#else
  float f;
  std::memcpy(&f, p, 4);
  return f;
#endif
}
template <bool kNc = true>
KVTAX_HD uint16_t load_u16(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  if constexpr (!kNc) return *reinterpret_cast<const unsigned short*>(p);
  return __ldg(reinterpret_cast<const unsigned short*>(p));
#else
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
#endif
}
// N 32-bit words from a kAlign-byte aligned address (4, 8 or 16): 16- or 8-byte vectors on the device where N
// and the alignment allow, which callers state only where the layout guarantees it. In shared memory, 4-byte loads
// of rows 72 bytes apart (q4) hit one bank twice each, twice the wavefronts of one 8-byte load.
template <int N, int kAlign = 4, bool kNc = true>
KVTAX_HD void load_words(const uint8_t* p, uint32_t* w) {
  static_assert(kAlign == 4 || kAlign == 8 || kAlign == 16);
#if defined(__CUDA_ARCH__)
  if constexpr (kAlign == 16 && N % 4 == 0) {
    for (int i = 0; i < N / 4; ++i) {
      const uint4 v = kNc ? __ldg(reinterpret_cast<const uint4*>(p) + i) : reinterpret_cast<const uint4*>(p)[i];
      w[4 * i] = v.x; w[4 * i + 1] = v.y; w[4 * i + 2] = v.z; w[4 * i + 3] = v.w;
    }
  } else if constexpr (kAlign >= 8 && N % 2 == 0) {
    for (int i = 0; i < N / 2; ++i) {
      const uint2 v = kNc ? __ldg(reinterpret_cast<const uint2*>(p) + i) : reinterpret_cast<const uint2*>(p)[i];
      w[2 * i] = v.x; w[2 * i + 1] = v.y;
    }
  } else {
    for (int i = 0; i < N; ++i)
      w[i] = kNc ? __ldg(reinterpret_cast<const unsigned int*>(p) + i) : reinterpret_cast<const unsigned int*>(p)[i];
  }
#else
  std::memcpy(w, p, 4 * N);
#endif
}

// q4: byte j of a 32-value block holds value j (low nibble) and j + 16 (high nibble); x = s * (code - 8).
// Unit u of the row: block u/4; units 0,1 of a block are the low nibbles of bytes 0-7 / 8-15, units 2,3
// the high nibbles of the same bytes.
KVTAX_HD int q4_unit_byte(int u) { return (u / 4) * 16 + (u % 2) * 8; }
KVTAX_HD int q4_unit_shift(int u) { return (u % 4) >= 2 ? 4 : 0; }
// tq4: value i in nibble i of the codes (low nibble first).
KVTAX_HD int tq4_code(const uint8_t* codes, int i) { return (codes[i / 2] >> (4 * (i & 1))) & 15; }
// tq3: value j (0..7) of a group of 8 takes bits 3j..3j+2 of the group's 3 little-endian bytes.
KVTAX_HD int tq3_code(uint32_t bits24, int j) { return int((bits24 >> (3 * j)) & 7); }

// tq3: the 24 code bits of unit u (values 8u..8u+7) of a row, after its f32 gain. kNc as for load_f32.
template <bool kNc = true>
KVTAX_HD uint32_t tq3_unit_bits(const uint8_t* row, int u) {
  const uint8_t* p = row + 4 + 3 * u;
#if defined(__CUDA_ARCH__)
  if constexpr (kNc) return uint32_t(__ldg(p)) | (uint32_t(__ldg(p + 1)) << 8) | (uint32_t(__ldg(p + 2)) << 16);
#endif
  return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16);
}

// ---- unit decode: y[0..8) = values 8u..8u+7 / returned factor. `levels` is the tq codebook
// (16 levels for tq4, 8 for tq3), unused by the others. kNc as for load_f32 (false: row in shared memory).
template <CodecId C, bool kNc = true>
KVTAX_HD float unit_decode(const uint8_t* row, int d, int u, const float* levels, float* y) {
  if constexpr (C == CodecId::f32) {
    uint32_t w[8];
    load_words<8, 16, kNc>(row + 32 * u, w);
    for (int k = 0; k < 8; ++k) {
#if defined(__CUDA_ARCH__)
      y[k] = __uint_as_float(w[k]);
#else
      std::memcpy(&y[k], &w[k], 4);
#endif
    }
    return 1.0f;
  } else if constexpr (C == CodecId::f16 || C == CodecId::bf16) {
    uint32_t w[4];
    load_words<4, 16, kNc>(row + 16 * u, w);
    for (int k = 0; k < 4; ++k) {
      const uint16_t lo = uint16_t(w[k] & 0xffff), hi = uint16_t(w[k] >> 16);
      if constexpr (C == CodecId::f16) {
        y[2 * k] = half_bits_to_f32(lo);
        y[2 * k + 1] = half_bits_to_f32(hi);
      } else {
        y[2 * k] = bf16_bits_to_f32(lo);
        y[2 * k + 1] = bf16_bits_to_f32(hi);
      }
    }
    return 1.0f;
  } else if constexpr (C == CodecId::fp8) {
    uint32_t w[2];
    load_words<2, 4, kNc>(row + 4 + 8 * u, w);
    for (int k = 0; k < 8; ++k) y[k] = e4m3_to_f32(uint8_t(w[k / 4] >> (8 * (k % 4))));
    return load_f32<kNc>(row);
  } else if constexpr (C == CodecId::q8) {
    uint32_t w[2];
    load_words<2, 4, kNc>(row + q_scales_bytes(d) + 8 * u, w);
    for (int k = 0; k < 8; ++k) y[k] = float(int8_t(uint8_t(w[k / 4] >> (8 * (k % 4)))));
    return half_bits_to_f32(load_u16<kNc>(row + 2 * (u / 4)));
  } else if constexpr (C == CodecId::q4 || C == CodecId::q4r) {
    uint32_t w[2];
    load_words<2, 4, kNc>(row + q_scales_bytes(d) + q4_unit_byte(u), w);
    const int sh = q4_unit_shift(u);
    for (int k = 0; k < 8; ++k) y[k] = float(int((w[k / 4] >> (8 * (k % 4) + sh)) & 15) - 8);
    return half_bits_to_f32(load_u16<kNc>(row + 2 * (u / 4)));
  } else if constexpr (C == CodecId::tq4) {
    uint32_t w[1];
    load_words<1, 4, kNc>(row + 4 + 4 * u, w);
    for (int k = 0; k < 8; ++k) y[k] = levels[(w[0] >> (4 * k)) & 15];
    return load_f32<kNc>(row);
  } else if constexpr (C == CodecId::tq3) {
    const uint32_t bits = tq3_unit_bits<kNc>(row, u);
    for (int k = 0; k < 8; ++k) y[k] = levels[tq3_code(bits, k)];
    return load_f32<kNc>(row);
  } else {
    static_assert(C == CodecId::f32, "unknown codec");
    return 0.0f;
  }
}

// ---- code words: the codes of a row (after codes_offset) read 4 bytes at a time, for kernels that decode
// straight into registers. A word holds runs of 4 consecutive values: fp8 / q8 one run (values 4w..4w+3), q4 two
// (its low nibbles, then its high nibbles 16 values further on in the same 32-value block), tq4 two (values
// 8w..8w+3, then 8w+4..8w+7: its nibbles in order).
KVTAX_HD constexpr size_t codes_offset(CodecId c, int d) {
  switch (c) {
    case CodecId::fp8: case CodecId::tq4: case CodecId::tq3: return 4;
    case CodecId::q8: case CodecId::q4: case CodecId::q4r: return q_scales_bytes(d);
    default: return 0;
  }
}
KVTAX_HD constexpr int word_runs(CodecId c) {
  return c == CodecId::q4 || c == CodecId::q4r || c == CodecId::tq4 ? 2 : 1;
}
// First value of run r of code word w.
KVTAX_HD constexpr int word_value(CodecId c, int w, int r) {
  if (c == CodecId::tq4) return 8 * w + 4 * r;
  return word_runs(c) == 2 ? kQBlock * (w / 4) + 4 * (w % 4) + 16 * r : 4 * w;
}

// Codecs whose unit factor is one per row (fp8's scale, the tq gain): a kernel can fold it into a score or a
// softmax weight instead of applying it to every value.
template <CodecId C>
constexpr bool kRowFactor = C == CodecId::fp8 || C == CodecId::tq4 || C == CodecId::tq3;

#if defined(__CUDACC__)
// ---- unit decode straight to f16 pairs (device code: the tensor-core prefill attention). h[0..4) = values 8u..8u+7,
// exact, to be multiplied by the returned factor. Only codecs whose codes have an exact f16 form:
// f16 itself; q8 / q4 integers (f16 block scale, so the product rounds once, as the float path would); fp8, whose
// halves are the code values times 2^-8 (e4m3's sign, exponent and mantissa moved into f16's places: bias 7 vs
// 15, subnormals onto subnormals, 0x7f decodes as 480 as above) with the factor scale * 2^8.
template <CodecId C>
constexpr bool kHasUnitDecodeHalf =
    C == CodecId::f16 || C == CodecId::fp8 || C == CodecId::q8 || C == CodecId::q4 || C == CodecId::q4r;

__device__ __forceinline__ __half2 bits_as_half2(uint32_t b) { return *reinterpret_cast<const __half2*>(&b); }
// Bytes 0, 1 (pair 0) or 2, 3 (pair 1) of x as an f16 pair less bias: 0x6400 | b is the f16 1024 + b for a byte b
// (q8 codes biased by 128, q4 nibbles, tq4's biased int8 levels), so bias 1024 + the codes' offset gives them exact.
__device__ __forceinline__ __half2 byte_pair_half2(uint32_t x, int pair, __half2 bias) {
  return __hsub2(bits_as_half2(__byte_perm(x, 0x64646464u, pair ? 0x4342 : 0x4140)), bias);
}

// Returns the factor as a float (fp8: scale * 2^8; q8 / q4: the f16 block scale; f16: 1).
template <CodecId C, bool kNc = true>
__device__ __forceinline__ float unit_decode_half(const uint8_t* row, int d, int u, __half2* h) {
  static_assert(kHasUnitDecodeHalf<C>, "no exact f16 form");
  if constexpr (C == CodecId::f16) {
    uint32_t w[4];
    load_words<4, 16, kNc>(row + 16 * u, w);
    for (int k = 0; k < 4; ++k) h[k] = bits_as_half2(w[k]);
    return 1.0f;
  } else if constexpr (C == CodecId::fp8) {
    uint32_t w[2];
    load_words<2, 4, kNc>(row + 4 + 8 * u, w);
    for (int k = 0; k < 4; ++k) {
      const uint32_t x = __byte_perm(w[k / 2], 0, k % 2 ? 0x3424 : 0x1404);  // codes into bytes 1 and 3
      h[k] = bits_as_half2((x & 0x80008000u) | ((x >> 1) & 0x3f803f80u));
    }
    return load_f32<kNc>(row) * 256.0f;
  } else {
    // q8 codes biased by 128, q4 nibbles (code - 8 stored + 8): byte_pair_half2.
    uint32_t w[2];
    float bias;
    const uint8_t* codes = row + q_scales_bytes(d);
    // 8-byte aligned where d is a multiple of 128: rows and their d / 32 two-byte scales are whole 8-byte words.
    auto load = [&](int off) {
      if (d % 128 == 0) load_words<2, 8, kNc>(codes + off, w);
      else load_words<2, 4, kNc>(codes + off, w);
    };
    if constexpr (C == CodecId::q8) {
      load(8 * u);
      w[0] ^= 0x80808080u;
      w[1] ^= 0x80808080u;
      bias = 1152.0f;
    } else {
      load(q4_unit_byte(u));
      w[0] = (w[0] >> q4_unit_shift(u)) & 0x0f0f0f0fu;
      w[1] = (w[1] >> q4_unit_shift(u)) & 0x0f0f0f0fu;
      bias = 1032.0f;
    }
    const __half2 b2 = __float2half2_rn(bias);
    for (int k = 0; k < 4; ++k) h[k] = byte_pair_half2(w[k / 2], k % 2, b2);
    return half_bits_to_f32(load_u16<kNc>(row + 2 * (u / 4)));
  }
}

// tq4 code words through a table in registers. Its levels are int8 multiples of one step (tq4_levels_i8 /
// tq4_grid, the largest +127): the table holds those integers biased by 128, entry i at byte i % 4 of lut[i / 4],
// and the step, levels[15] / 127, joins the row's gain as the values' factor.
__device__ __forceinline__ float tq4_byte_lut(const float* levels, uint32_t (&lut)[4]) {
  const float to_int = 127.0f / levels[15];
  for (int j = 0; j < 4; ++j) {
    uint32_t t = 0;
    for (int b = 0; b < 4; ++b) t |= uint32_t(int(rintf(levels[4 * j + b] * to_int)) + 128) << (8 * b);
    lut[j] = t;
  }
  return levels[15] / 127.0f;
}
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {  // bit 3 of a selector: sign fill
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}
// The 8 codes of a word (value k in nibble k) -> h[k / 2] = the int8 levels of values k, k + 1 as f16 (exact; the
// factor: step x gain). A byte permute looks up 4 codes among 8 entries; codes 8-15 take the table's second half,
// chosen per byte by a mask that the permute's sign fill makes from each code's bit 3; the biased bytes become f16
// as q8's do (1024 + byte, less 1152). 8 integer instructions and 2 f16 subtractions per 4 codes, no memory access.
__device__ __forceinline__ void tq4_word_decode_half(uint32_t w, const uint32_t (&lut)[4], __half2* h) {
  const __half2 b2 = __float2half2_rn(1152.0f);
  for (int half = 0; half < 2; ++half) {
    const uint32_t x = half ? w >> 16 : w, sel = x & 0x7777u;
    const uint32_t m = prmt(x << 4, x, 0xd9c8u);  // byte k: 0xff where code k >= 8
    const uint32_t b = (prmt(lut[0], lut[1], sel) & ~m) | (prmt(lut[2], lut[3], sel) & m);
    h[2 * half] = byte_pair_half2(b, 0, b2);
    h[2 * half + 1] = byte_pair_half2(b, 1, b2);
  }
}

// tq3 units through a table in registers: the 8 levels rounded to f16, their low bytes in lut[0..2) and high bytes
// in lut[2..4), entry i at byte i % 4 of word i / 4.
__device__ __forceinline__ void tq3_half_lut(const float* levels, uint32_t (&lut)[4]) {
  for (int j = 0; j < 2; ++j) {
    uint32_t lo = 0, hi = 0;
    for (int b = 0; b < 4; ++b) {
      const uint32_t h = __half_as_ushort(__float2half_rn(levels[4 * j + b]));
      lo |= (h & 0xffu) << (8 * b);
      hi |= (h >> 8) << (8 * b);
    }
    lut[j] = lo;
    lut[2 + j] = hi;
  }
}
// Unit u of a tq3 row -> h[k] = the f16 levels of values 8u + 2k, 8u + 2k + 1, unscaled; returns the gain. Each 3-bit
// code moves into a nibble (the byte permute's selector), and two permutes look up 4 codes' low and high bytes.
template <bool kNc = true>
__device__ __forceinline__ float tq3_unit_decode_half(const uint8_t* row, int u, const uint32_t (&lut)[4],
                                                      uint32_t (&h)[4]) {
  const uint32_t bits = tq3_unit_bits<kNc>(row, u);
  for (int half = 0; half < 2; ++half) {
    const uint32_t x = half ? bits >> 12 : bits;  // codes at bits 3k; each step below moves one more up by k
    uint32_t s = (x & 0x7u) | ((x << 1) & ~0x7u);
    s = (s & 0x7fu) | ((x << 2) & ~0x7fu);
    s = ((s & 0x7ffu) | ((x << 3) & ~0x7ffu)) & 0x7777u;
    const uint32_t lo = prmt(lut[0], lut[1], s), hi = prmt(lut[2], lut[3], s);
    h[2 * half] = prmt(lo, hi, 0x5140u);
    h[2 * half + 1] = prmt(lo, hi, 0x7362u);
  }
  return load_f32<kNc>(row);
}

// tq4 / tq3 codes by pairs, for a decode through a table of f16 level pairs (entry i: levels[i % n] then
// levels[i / n], n = kPairLevels): idx[k] = the pair index of values 8u+2k and 8u+2k+1 (tq4: their code byte;
// tq3: their six code bits). Returns the row's gain.
template <CodecId C>
constexpr int kPairLevels = C == CodecId::tq4 ? 16 : C == CodecId::tq3 ? 8 : 0;

template <CodecId C, bool kNc = true>
__device__ __forceinline__ float unit_pair_codes(const uint8_t* row, int u, uint32_t (&idx)[4]) {
  static_assert(kPairLevels<C> > 0, "tq4 and tq3 only");
  if constexpr (C == CodecId::tq4) {
    uint32_t w[1];
    load_words<1, 4, kNc>(row + 4 + 4 * u, w);
    for (int k = 0; k < 4; ++k) idx[k] = (w[0] >> (8 * k)) & 0xffu;
  } else {
    const uint32_t bits = tq3_unit_bits<kNc>(row, u);
    for (int k = 0; k < 4; ++k) idx[k] = (bits >> (6 * k)) & 63u;
  }
  return load_f32<kNc>(row);
}

// Code word -> the exact values of its runs as f16 pairs (h[0..2 word_runs)), before the factor: fp8 the e4m3
// values themselves (factor: the row scale; e4m3's NaN codes, which the encoder never writes, give NaN here where
// unit_decode gives 480), q8 the int8 codes, q4 the codes - 8 (factor: the block's f16 scale).
template <CodecId C>
__device__ __forceinline__ void word_decode_half(uint32_t w, __half2* h) {
  if constexpr (C == CodecId::fp8) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    uint32_t lo, hi;
    asm("{\n.reg .b16 a, b;\nmov.b32 {a, b}, %2;\ncvt.rn.f16x2.e4m3x2 %0, a;\ncvt.rn.f16x2.e4m3x2 %1, b;\n}\n"
        : "=r"(lo), "=r"(hi)
        : "r"(w));
    h[0] = bits_as_half2(lo);
    h[1] = bits_as_half2(hi);
#else
    const __half2 k256 = __float2half2_rn(256.0f);  // the bit move gives value * 2^-8 (see unit_decode_half)
    for (int k = 0; k < 2; ++k) {
      const uint32_t x = __byte_perm(w, 0, k ? 0x3424 : 0x1404);
      h[k] = __hmul2(bits_as_half2((x & 0x80008000u) | ((x >> 1) & 0x3f803f80u)), k256);
    }
#endif
  } else if constexpr (C == CodecId::q8) {
    const uint32_t x = w ^ 0x80808080u;
    const __half2 b2 = __float2half2_rn(1152.0f);
    h[0] = byte_pair_half2(x, 0, b2);
    h[1] = byte_pair_half2(x, 1, b2);
  } else {
    static_assert(C == CodecId::q4 || C == CodecId::q4r, "no code-word decode for this codec");
    const __half2 b2 = __float2half2_rn(1032.0f);
    for (int r = 0; r < 2; ++r) {
      const uint32_t x = (w >> (4 * r)) & 0x0f0f0f0fu;
      h[2 * r] = byte_pair_half2(x, 0, b2);
      h[2 * r + 1] = byte_pair_half2(x, 1, b2);
    }
  }
}
#endif

}  // namespace kvtax::kv::layout
