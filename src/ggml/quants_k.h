#pragma once
// K-quant reference codecs (nb = number of 256-value super-blocks). Public entry: ggml/quants.h.
#include <cstdint>

#include "ggml/blocks.h"

namespace kvtax {

void dequant_q2_k(const BlockQ2_K* b, float* y, int64_t nb);
void dequant_q3_k(const BlockQ3_K* b, float* y, int64_t nb);
void dequant_q4_k(const BlockQ4_K* b, float* y, int64_t nb);
void dequant_q5_k(const BlockQ5_K* b, float* y, int64_t nb);
void dequant_q6_k(const BlockQ6_K* b, float* y, int64_t nb);
void dequant_q8_k(const BlockQ8_K* b, float* y, int64_t nb);

void quant_q4_k(const float* x, BlockQ4_K* b, int64_t nb);
void quant_q5_k(const float* x, BlockQ5_K* b, int64_t nb);
void quant_q6_k(const float* x, BlockQ6_K* b, int64_t nb);
void quant_q8_k(const float* x, BlockQ8_K* b, int64_t nb);

}  // namespace kvtax
