#pragma once
// In-place rotation (forward: R = H D / sqrt(D)) or its inverse of nr vectors of D floats in shared memory, by
// the same steps as kv/rotation.cpp: the flash-decode kernels rotate q before the scores and un-rotate the
// merged output of rotated V codecs. Device code only (nvcc).
#include <cuda_runtime.h>

namespace kvtax::cuda::detail {

// Every thread of the block must call it; signs holds D entries (constant, global or shared memory).
template <int D>
__device__ void rotate_shared(float* x, int nr, bool inverse, const float* signs) {
  const int tid = threadIdx.x, nt = blockDim.x;
  if (!inverse) {
    for (int i = tid; i < nr * D; i += nt) x[i] *= signs[i % D];
    __syncthreads();
  }
  for (int len = 1; len < D; len <<= 1) {
    for (int idx = tid; idx < nr * D / 2; idx += nt) {
      const int r = idx / (D / 2), j = idx % (D / 2);
      const int i = (j / len) * 2 * len + (j % len);
      float* v = x + r * D;
      const float a = v[i], b = v[i + len];
      v[i] = a + b;
      v[i + len] = a - b;
    }
    __syncthreads();
  }
  const float n = 1.0f / sqrtf(float(D));
  for (int i = tid; i < nr * D; i += nt) x[i] *= inverse ? n * signs[i % D] : n;
  __syncthreads();
}

}  // namespace kvtax::cuda::detail
