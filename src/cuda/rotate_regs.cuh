#pragma once
// The rotated codecs' rotation (kv/rotation.cpp: R = H diag(signs) / sqrt(D)) of vectors held in registers, with the
// steps of kv/rotation.cpp in its order: a row spread over a warp (the KV encode's rows, q in the decode and prefill
// kernels, the decode merge's output) and the inverse over an MMA's C fragments (the prefill's output before it is
// stored). Device code only (nvcc).
#include <cuda_runtime.h>

namespace kvtax::cuda::detail {

// The fast Walsh-Hadamard steps of kv/rotation.cpp, in its order, on D values spread over a warp, kPer consecutive
// ones per lane (lane l holds values kPer l ..): butterflies within a lane first, then across lanes by shuffles.
template <int D>
__device__ __forceinline__ void hadamard_warp(float (&v)[D / 32], int lane) {
  constexpr int kPer = D / 32;
#pragma unroll
  for (int len = 1; len < kPer; len <<= 1)
#pragma unroll
    for (int k = 0; k < kPer; ++k)
      if (!(k & len)) {
        const float x = v[k], y = v[k + len];
        v[k] = x + y;
        v[k + len] = x - y;
      }
#pragma unroll
  for (int m = 1; m < 32; m <<= 1) {
    const bool upper = lane & m;
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      const float other = __shfl_xor_sync(0xffffffffu, v[k], m);
      v[k] = upper ? other - v[k] : v[k] + other;
    }
  }
}

// The rotation R = H diag(signs) / sqrt(D) of v (hadamard_warp's layout; signs in global memory), with the steps of
// kv/rotation.cpp, so the results are those of a rotation done any other way in that order, bit for bit. n is the
// final factor: the KV encoder and the decode kernels pass kv/rotation.cpp's 1 / sqrt(D).
template <int D>
__device__ __forceinline__ void rotate_warp(float (&v)[D / 32], const float* signs, int lane,
                                            float n = rsqrtf(float(D))) {
  constexpr int kPer = D / 32;
#pragma unroll
  for (int k = 0; k < kPer; ++k) v[k] *= __ldg(signs + kPer * lane + k);
  hadamard_warp<D>(v, lane);
#pragma unroll
  for (int k = 0; k < kPer; ++k) v[k] *= n;
}

// Its inverse: H, then diag(signs) / sqrt(D) (the decode merge's output of rotated V codecs).
template <int D>
__device__ __forceinline__ void unrotate_warp(float (&v)[D / 32], const float* signs, int lane, float n) {
  constexpr int kPer = D / 32;
  hadamard_warp<D>(v, lane);
#pragma unroll
  for (int k = 0; k < kPer; ++k) v[k] *= n * __ldg(signs + kPer * lane + k);
}

// The inverse rotation (kv/rotation.cpp: H, then diag(signs) / sqrt(D)) of one warp's output rows g and g + 8,
// in C fragments: dims dn*8 + 2c + e (c = lane % 4). The butterflies over bit 0 of a dim are within a lane's pair,
// over bits 1-2 across the quad's lanes, over bits 3.. across dn; each in kv/rotation.cpp's order of steps.
template <int D>
__device__ __forceinline__ void unrotate_rows(float (&o)[D / 8][4], const float* signs, int c) {
#pragma unroll
  for (int len = 1; len < D; len <<= 1) {
    if (len == 1) {
#pragma unroll
      for (int dn = 0; dn < D / 8; ++dn)
#pragma unroll
        for (int e = 0; e < 4; e += 2) {
          const float x = o[dn][e], y = o[dn][e + 1];
          o[dn][e] = x + y;
          o[dn][e + 1] = x - y;
        }
    } else if (len < 8) {
      const int m = len / 2;  // lane bit of the quad
      const bool upper = c & m;
#pragma unroll
      for (int dn = 0; dn < D / 8; ++dn)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float other = __shfl_xor_sync(0xffffffffu, o[dn][e], m);
          o[dn][e] = upper ? other - o[dn][e] : o[dn][e] + other;
        }
    } else {
      const int m = len / 8;
#pragma unroll
      for (int dn = 0; dn < D / 8; ++dn)
        if (!(dn & m))
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float x = o[dn][e], y = o[dn + m][e];
            o[dn][e] = x + y;
            o[dn + m][e] = x - y;
          }
    }
  }
  const float n = rsqrtf(float(D));
#pragma unroll
  for (int dn = 0; dn < D / 8; ++dn)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[dn][e] = o[dn][e] * n * __ldg(signs + dn * 8 + 2 * c + (e & 1));
}

}  // namespace kvtax::cuda::detail
