#pragma once
// Hopper warpgroup MMA (wgmma, sm_90a only): four warps issue one asynchronous m64nNk16 product whose B operand
// the tensor cores read from shared memory through a matrix descriptor. A comes from registers, in the mma.sync
// m16n8k16 A layout per warp (warp w of the group holds rows 16w..16w+15): read from shared memory as well, it would
// add its bytes to every product's share of that pipe (prefill_wgmma.cu). The f32 accumulators are laid out as
// mma.sync's C fragments, 8 columns per [j][4] group (cuda/mma.cuh). Also here: the named barriers and
// register-budget moves of warp-specialized kernels.
//
// Everything here compiles to nothing outside sm_90a (kHasWgmma false): callers keep another path for those.
#include <cuda_runtime.h>

#include <cstdint>

namespace kvtax::cuda::detail {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KVTAX_WGMMA 1
constexpr bool kHasWgmma = true;
#else
#define KVTAX_WGMMA 0
constexpr bool kHasWgmma = false;
#endif

// Descriptor of an operand stored with the 128-byte swizzle (cuda/prefill_tiles.cuh, Sw128Tile), starting at
// shared address `addr` (the atom it starts in is 1024-byte aligned). lbo / sbo in bytes: for a K-major operand
// sbo is the step between groups of 8 rows (lbo unused); for an MN-major one lbo steps between 64-element column
// blocks and sbo between groups of 8 rows along K.
__device__ __forceinline__ uint64_t sw128_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return uint64_t((addr & 0x3ffff) >> 4) | uint64_t(lbo >> 4) << 16 | uint64_t(sbo >> 4) << 32 | uint64_t(1) << 62;
}

// Orders this thread's register writes (accumulators, A fragments) before the wgmma that reads them.
__device__ __forceinline__ void wgmma_fence() {
#if KVTAX_WGMMA
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#if KVTAX_WGMMA
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
// Waits until at most N committed groups of this warpgroup are in flight.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
#if KVTAX_WGMMA
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
// Shared-memory writes of the generic proxy (st.shared, cp.async) visible to the async proxy wgmma reads with.
__device__ __forceinline__ void fence_proxy_async() {
#if KVTAX_WGMMA
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// Warpgroup-wide register budget change (sm_90a): producers give registers back, consumers take them.
template <int kRegs>
__device__ __forceinline__ void regs_dec() {
#if KVTAX_WGMMA
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#endif
}
template <int kRegs>
__device__ __forceinline__ void regs_inc() {
#if KVTAX_WGMMA
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#endif
}

// Named barrier `id` (1..15) over `count` threads: bar_sync waits for the others, bar_arrive only counts itself.
template <int kCount>
__device__ __forceinline__ void bar_sync(int id) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "n"(kCount) : "memory");
}
template <int kCount>
__device__ __forceinline__ void bar_arrive(int id) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "n"(kCount) : "memory");
}

// Pins accumulator registers at this point of the program: the compiler may not move their reads above a
// wgmma_wait (it does not see that the asynchronous product writes them until then).
template <int J>
__device__ __forceinline__ void fence_acc(float (&d)[J][4]) {
#pragma unroll
  for (int j = 0; j < J; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[j][e])::"memory");
}

#define KVTAX_ACC4(d, j) "+f"(d[j][0]), "+f"(d[j][1]), "+f"(d[j][2]), "+f"(d[j][3])
#define KVTAX_ACC16(d, j) KVTAX_ACC4(d, j), KVTAX_ACC4(d, j + 1), KVTAX_ACC4(d, j + 2), KVTAX_ACC4(d, j + 3)

// d (+)= a b, m64 x N x k16, f16 inputs, f32 accumulators; accumulate = false overwrites d. kTransB: B is
// MN-major (N contiguous) instead of K-major.
template <int N, bool kTransB>
__device__ __forceinline__ void wgmma_f16(float (&d)[N / 8][4], const uint32_t (&a)[4], uint64_t b_desc,
                                          bool accumulate) {
#if KVTAX_WGMMA
  if constexpr (N == 64) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, "
        "%23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
        : KVTAX_ACC16(d, 0), KVTAX_ACC16(d, 4)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(int(accumulate)), "n"(int(kTransB)));
  } else {
    static_assert(N == 128, "m64n64k16 and m64n128k16 only");
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, "
        "%23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, "
        "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "{%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
        : KVTAX_ACC16(d, 0), KVTAX_ACC16(d, 4), KVTAX_ACC16(d, 8), KVTAX_ACC16(d, 12)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(int(accumulate)), "n"(int(kTransB)));
  }
#endif
}

#undef KVTAX_ACC16
#undef KVTAX_ACC4

}  // namespace kvtax::cuda::detail
