#pragma once
// Weight block formats (ggml's, bit for bit) with scalar reference quantize/dequantize.
// The fast paths live in ops/cpu and are tested against these.
#include <cstddef>
#include <cstdint>

#include "ggml/types.h"

namespace kvtax {

// Dequantize n values (n a multiple of the block size) of any supported weight type to f32.
// Supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, Q2_K, Q3_K, Q8_K.
bool can_dequantize(GgmlType t);
void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n);

// Quantize n f32 values to t (reference, round-to-nearest like ggml's reference quantizers).
// Supported: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, Q8_K.
bool can_quantize(GgmlType t);
void quantize_row(GgmlType t, const float* src, void* dst, int64_t n);

}  // namespace kvtax
