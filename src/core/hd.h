#pragma once
// KVTAX_HD marks small inline functions compiled both for the CPU and, by nvcc, for CUDA kernels
// (format helpers that must have one definition on both sides).
#if defined(__CUDACC__)
#define KVTAX_HD __host__ __device__ __forceinline__
#else
#define KVTAX_HD inline
#endif
