#pragma once
// Floats to 16-bit pairs (f16 or bf16, round to nearest even; low half first) and back: the prefill's
// activations, its SwiGLU and the bf16 expansion of quantized weights all store through these.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace kvtax::cuda::detail {

template <bool kBf16>
__device__ __forceinline__ uint32_t pack_pair(float a, float b) {
  if constexpr (kBf16) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return uint32_t(__bfloat16_as_ushort(h.x)) | (uint32_t(__bfloat16_as_ushort(h.y)) << 16);
  } else {
    const __half2 h = __floats2half2_rn(a, b);
    return uint32_t(__half_as_ushort(h.x)) | (uint32_t(__half_as_ushort(h.y)) << 16);
  }
}

template <bool kBf16>
__device__ __forceinline__ float2 unpack_pair(uint32_t v) {
  if constexpr (kBf16) {
    return make_float2(__uint_as_float(v << 16), __uint_as_float(v & 0xffff0000u));
  } else {
    return __half22float2(__halves2half2(__ushort_as_half(uint16_t(v)), __ushort_as_half(uint16_t(v >> 16))));
  }
}

// Eight values as one 16-byte store.
template <bool kBf16>
__device__ __forceinline__ uint4 pack8(const float (&v)[8]) {
  return make_uint4(pack_pair<kBf16>(v[0], v[1]), pack_pair<kBf16>(v[2], v[3]), pack_pair<kBf16>(v[4], v[5]),
                    pack_pair<kBf16>(v[6], v[7]));
}

}  // namespace kvtax::cuda::detail
