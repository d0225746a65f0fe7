#pragma once
// One weight value of a GGUF (ggml) row on the device: the embedding lookup and the per-matrix dequantization
// of the prefill GEMM read weights through it. Device code only (nvcc).
#include <cuda_fp16.h>

#include <cstdint>

#include "ggml/blocks.h"
#include "ggml/types.h"

namespace kvtax::cuda {

__device__ __forceinline__ float h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }

// One value of row `row` at column c (any layout embed_supported names).
template <GgmlType T>
__device__ float dequant_at(const uint8_t* row, int c) {
  if constexpr (T == GgmlType::F32) {
    return reinterpret_cast<const float*>(row)[c];
  } else if constexpr (T == GgmlType::F16) {
    return h2f(reinterpret_cast<const uint16_t*>(row)[c]);
  } else if constexpr (T == GgmlType::BF16) {
    return __uint_as_float(uint32_t(reinterpret_cast<const uint16_t*>(row)[c]) << 16);
  } else if constexpr (T == GgmlType::Q8_0) {
    const uint8_t* b = row + size_t(c / kQK) * sizeof(BlockQ8_0);
    const uint16_t d = uint16_t(b[0] | (b[1] << 8));  // blocks are only 2-byte aligned
    return h2f(d) * float(int8_t(b[2 + c % kQK]));
  } else if constexpr (T == GgmlType::Q4_0) {
    const uint8_t* b = row + size_t(c / kQK) * sizeof(BlockQ4_0);
    const uint16_t d = uint16_t(b[0] | (b[1] << 8));
    const int j = c % kQK;
    const int q = j < 16 ? (b[2 + j] & 15) : (b[2 + j - 16] >> 4);
    return h2f(d) * float(q - 8);
  } else {  // Q4_K: sub-block pairs (2p, 2p+1) share 32 bytes: low nibbles then high nibbles
    const BlockQ4_K* b = reinterpret_cast<const BlockQ4_K*>(row) + c / kQK_K;
    const int i = c % kQK_K, sub = i / 32, l = i % 32;
    uint8_t sc, m;
    k_scale_min_at(sub, [&](int k) { return b->scales[k]; }, sc, m);
    const uint8_t q = b->qs[32 * (sub / 2) + l];
    const int v = sub % 2 ? (q >> 4) : (q & 15);
    return h2f(b->d) * float(sc) * float(v) - h2f(b->dmin) * float(m);
  }
}

}  // namespace kvtax::cuda
