#pragma once
// Scalar IEEE half and bfloat16 conversions (round to nearest even). SIMD paths use F16C/AVX-512 instead.
#include <bit>
#include <cstdint>

namespace kvtax {

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ff;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));  // inf / nan
  if (exp == 0) {  // zero or subnormal: value = mant * 2^-24
    const float v = float(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

inline uint16_t f32_to_f16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return uint16_t(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));  // inf / nan
  if (ax >= 0x477ff000u) return uint16_t(sign | 0x7c00);  // rounds to >= 65520: overflow to inf
  if (ax < 0x38800000u) {  // result is subnormal or zero: round |f| * 2^24 to an integer
    const float v = std::bit_cast<float>(ax) * 16777216.0f;
    // nearbyint with ties-to-even via the 2^23 trick (v < 1024 here)
    const float r = (v + 8388608.0f) - 8388608.0f;
    return uint16_t(sign | uint16_t(r));
  }
  // normal: rebias exponent, round mantissa to 10 bits with ties to even
  uint32_t m = ax + 0xfff + ((ax >> 13) & 1);
  m -= 0x38000000u;  // (127 - 15) << 23
  return uint16_t(sign | uint16_t(m >> 13));
}

inline float bf16_to_f32(uint16_t h) { return std::bit_cast<float>(uint32_t(h) << 16); }

inline uint16_t f32_to_bf16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40);  // quiet nan
  x += 0x7fff + ((x >> 16) & 1);
  return uint16_t(x >> 16);
}

}  // namespace kvtax
