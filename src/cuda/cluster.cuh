#pragma once
// Thread block clusters (sm_90): a block writes into its peer's shared memory and arrives on its peer's mbarriers.
// Addresses are 32-bit shared-window addresses (smem_addr); map_to() turns one of this block's into the same offset in
// block `rank` of the cluster.
#include <cuda_runtime.h>

#include <cstdint>

namespace kvtax::cuda::detail {

__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
#endif
  return r;
}

// Every thread of every block of the cluster: what each wrote before is visible to all after.
__device__ __forceinline__ void cluster_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
#endif
}

__device__ __forceinline__ uint32_t map_to(uint32_t addr, uint32_t rank) {
  uint32_t r = addr;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(addr), "r"(rank));
#endif
  return r;
}

// `bytes` (a multiple of 16) of this block's shared memory at src into another block's at dst by the copy engine,
// completing on that block's barrier bar (dst and bar from map_to). The caller fences its plain writes of src first.
__device__ __forceinline__ void bulk_copy_to(uint32_t dst, uint32_t src, uint32_t bytes, uint32_t bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
               ::"r"(dst), "r"(src), "r"(bytes), "r"(bar)
               : "memory");
#endif
}

// One arrival on a barrier of another block (addr from map_to). CTA-scope release, as CUTLASS's cluster pipelines
// arrive: what it orders here is that the tensor cores' reads of a stage are over (wgmma_wait) before the peer's copy
// engine refills it. A cluster-scope wait on the other side made ptxas invalidate L1 (CCTL.IVALL) on every poll:
// 21% of the kernel's stall samples (ncu, H100, session 28).
__device__ __forceinline__ void mbar_arrive_remote(uint32_t addr) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(addr) : "memory");
#endif
}

}  // namespace kvtax::cuda::detail
