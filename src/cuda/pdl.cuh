#pragma once
// Programmatic dependent launch (sm_90): a kernel launched with launch_pdl may start while the kernel before it
// in the stream still runs; it must call pdl_wait() before it reads what that kernel wrote or writes anything
// that kernel reads. Work that needs neither (prefetching weights into L2) goes before the wait. A kernel that
// calls pdl_trigger() lets the next PDL kernel's blocks start early (the one-block norm does: the GEMV after it
// then streams weights while the norm runs). KVTAX_CUDA_PDL=0 launches everything plainly. Every kernel launched
// here takes the largest shared-memory carveout (runtime.h's prefer_max_shared): one L1 / shared split for all lets
// their blocks overlap on an SM.
#include <cuda_runtime.h>

#include <cstdlib>
#include <string>
#include <utility>

#include "cuda/runtime.h"

namespace kvtax::cuda::detail {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

// `bytes` (a multiple of 16, from a 16-byte aligned p) into L2 with one instruction (sm_90's bulk copy engine).
__device__ __forceinline__ void prefetch_l2_bulk(const void* p, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#endif
}

inline bool pdl_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("KVTAX_CUDA_PDL");
    return !e || std::string(e) != "0";
  }();
  return on;
}

// A kernel with `smem` bytes of dynamic shared memory.
template <class... Params, class... Args>
cudaError_t launch_pdl_smem(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                            Args&&... args) {
  if (const cudaError_t e = prefer_max_shared(reinterpret_cast<const void*>(kernel)); e != cudaSuccess) return e;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = pdl_enabled() ? 1 : 0;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

template <class... Params, class... Args>
cudaError_t launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t s, Args&&... args) {
  return launch_pdl_smem(kernel, grid, block, 0, s, std::forward<Args>(args)...);
}

}  // namespace kvtax::cuda::detail
