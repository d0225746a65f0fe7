#pragma once
// Scalar reference encode/decode of every codec (bit layouts and unit decoders: layout.h, shared with
// the CUDA kernels).
// Row layouts (d = head_dim values of one token and head):
//   f32   d x float                                         32 bits/value
//   f16   d x IEEE half                                     16
//   bf16  d x bfloat16                                      16
//   fp8   f32 scale, then d x e4m3 (scale = max|x| / 448)   8 + 32/d   (8.25 at d=128)
//   q8    d/32 f16 scales, then d x int8 (x ~ scale*q)      8.5
//   q4    d/32 f16 scales, then d/2 bytes of 4-bit codes;   4.5
//         byte j of a 32-block holds values j (low nibble) and j+16 (high); x ~ scale*(code-8)
//   tq4   f32 gain, then d/2 bytes: value i in nibble i     4 + 32/d   (4.25 at d=128)
//   tq3   f32 gain, then 3d/8 bytes: 8 values per 3 bytes,  3 + 32/d   (3.25 at d=128)
//         value j of a group in bits 3j..3j+2 (little endian)
// tq codes index a Lloyd-Max codebook for N(0,1); the gain is chosen so the decoded row has the input's
// norm (the usual "norm correction"), i.e. y_i = gain * level[code_i].
#include <array>
#include <cstddef>
#include <cstdint>

#include "kv/codecs/layout.h"

namespace kvtax::kv {

constexpr int kQBlock = layout::kQBlock;  // q8/q4 block

size_t f32_row_bytes(int d);
void f32_encode(const float* x, int d, uint8_t* row);
void f32_decode(const uint8_t* row, int d, float* y);
size_t f16_row_bytes(int d);
void f16_encode(const float* x, int d, uint8_t* row);
void f16_decode(const uint8_t* row, int d, float* y);
size_t bf16_row_bytes(int d);
void bf16_encode(const float* x, int d, uint8_t* row);
void bf16_decode(const uint8_t* row, int d, float* y);

uint8_t f32_to_e4m3(float x);  // round to nearest even, saturates at +-448, NaN -> 0
float e4m3_to_f32(uint8_t b);
size_t fp8_row_bytes(int d);
void fp8_encode(const float* x, int d, uint8_t* row);
void fp8_decode(const uint8_t* row, int d, float* y);

size_t q8_row_bytes(int d);
void q8_encode(const float* x, int d, uint8_t* row);
void q8_decode(const uint8_t* row, int d, float* y);
size_t q4_row_bytes(int d);
void q4_encode(const float* x, int d, uint8_t* row);
void q4_decode(const uint8_t* row, int d, float* y);

// Lloyd-Max levels for N(0,1), ascending (computed at startup from the Gaussian density; tq4's snapped
// to an int8 grid).
const std::array<float, 16>& tq4_levels();       // = tq4_levels_i8() / tq4_grid()
const std::array<int8_t, 16>& tq4_levels_i8();
float tq4_grid();
const std::array<float, 8>& tq3_levels();
size_t tq4_row_bytes(int d);
void tq4_encode(const float* x, int d, uint8_t* row);
void tq4_decode(const uint8_t* row, int d, float* y);
size_t tq3_row_bytes(int d);
void tq3_encode(const float* x, int d, uint8_t* row);
void tq3_decode(const uint8_t* row, int d, float* y);

}  // namespace kvtax::kv
