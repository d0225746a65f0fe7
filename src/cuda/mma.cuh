#pragma once
// Warp-level tensor-core and async-copy primitives shared by the flash-decode (attention_mma.cu) and
// flash-prefill (prefill_attention.cu) kernels, and the dispatch from a runtime (codec, head_dim) to a kernel
// template instance.
//
// Fragment layout of mma.sync m16n8k16 (PTX ISA), lane = 4 g + c: A regs {row g | row g+8} x {cols 2c,2c+1 | +8};
// B regs: k rows 2c,2c+1 (+8) of column g; C: rows g / g+8, columns 2c, 2c+1.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/half_pack.cuh"
#include "kv/codecs/codec.h"

namespace kvtax::cuda::detail {

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) { return pack_pair<false>(lo, hi); }

// c += a b (f16 operands, or bf16 with kBf16; f32 accumulators). Not volatile: the compiler may interleave
// independent products.
template <bool kBf16 = false>
__device__ __forceinline__ void mma_16816(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
  if constexpr (kBf16) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Two floats as a high and a low bf16 pair, hi + lo: ~16 significant bits (f16 has 11) and f32's range, for operands
// that meet bf16 values in two products.
__device__ __forceinline__ void split_bf16(float a, float b, uint32_t& hi, uint32_t& lo) {
  hi = pack_pair<true>(a, b);
  const float2 h = unpack_pair<true>(hi);
  lo = pack_pair<true>(a - h.x, b - h.y);
}

// d = a b + c, with c from other registers than d (an accumulator chain that starts from constants).
__device__ __forceinline__ void mma_16816(float* d, const uint32_t* a, uint32_t b0, uint32_t b1, const float* c) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }

// Four 8x8 b16 matrices; lane l gives the shared address of row l % 8 of matrix l / 8.
__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t* r) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}
// The same, each matrix transposed on the way (B operands from row-major [k][n] tiles).
__device__ __forceinline__ void ldsm_x4_trans(uint32_t addr, uint32_t* r) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// 16 bytes global -> shared; the first src_bytes are read, the rest of the 16 written as zeros.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int src_bytes = 16) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
// 8 bytes global -> shared through L1 (sources that are 8-byte aligned only: the decode merge's partial rows).
__device__ __forceinline__ void cp_async8(uint32_t dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// sm_90's bulk copy engine, which moves a contiguous run of bytes global -> shared with one instruction and
// signals an mbarrier as the bytes land (the decode kernel's tiles). Hopper only: compute_80 builds take
// cp_async16 instead (kHasBulkCopy).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
constexpr bool kHasBulkCopy = false;
#else
constexpr bool kHasBulkCopy = true;
#endif

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t arrivals) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");  // visible to the copy engine
#endif
}
// One arrival that also tells the barrier to expect `bytes` more from bulk copies before its phase completes.
__device__ __forceinline__ void mbar_expect_bytes(uint32_t bar, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
#endif
}
// One plain arrival (its phase completes when all the counted arrivals, and any expected bytes, are in).
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
#endif
}
// Waits until the barrier's phase with this parity has completed.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n .reg .pred done;\n WAIT:\n"
      " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      " @!done bra WAIT;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
#endif
}
// `bytes` (a multiple of 16; both addresses 16-byte aligned) global -> shared, completing on `bar`. The fence
// orders this thread's (and, after a __syncwarp, its warp's) earlier plain accesses of dst before the copy's writes;
// kFence false where the caller has just fenced (copies issued together).
template <bool kFence = true>
__device__ __forceinline__ void bulk_copy(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (kFence) asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
#endif
}

// 2^x on the special-function unit alone (exp2f adds a range check and two multiplies per call); results under
// 2^-126 flush to zero, which softmax weights that small are in f16 anyway.
__device__ __forceinline__ float exp2_fast(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// The four lanes of a quad (same g) hold one row pair of a C fragment: combine their values of rows g and g+8.
__device__ __forceinline__ void quad_max(float& a, float& b) {
#pragma unroll
  for (int off = 1; off <= 2; off <<= 1) {
    a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, off));
    b = fmaxf(b, __shfl_xor_sync(0xffffffffu, b, off));
  }
}
__device__ __forceinline__ void quad_sum(float& a, float& b) {
#pragma unroll
  for (int off = 1; off <= 2; off <<= 1) {
    a += __shfl_xor_sync(0xffffffffu, a, off);
    b += __shfl_xor_sync(0xffffffffu, b, off);
  }
}

// The online softmax's rescale for one warp's rows g and g + 8: the running maxima (ma, mb) rise to include the
// tile's (mxa, mxb); returns the factors (base 2) by which everything accumulated before must be scaled.
__device__ __forceinline__ float2 raise_max(float& ma, float& mb, float mxa, float mxb) {
  const float na = fmaxf(ma, mxa), nb = fmaxf(mb, mxb);
  const float2 f = make_float2(exp2_fast(ma - na), exp2_fast(mb - nb));
  ma = na;
  mb = nb;
  return f;
}

// Accumulator rows g times ca, rows g + 8 times cb.
template <int N>
__device__ __forceinline__ void scale_rows(float (&o)[N][4], float ca, float cb) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
    o[i][0] *= ca;
    o[i][1] *= ca;
    o[i][2] *= cb;
    o[i][3] *= cb;
  }
}

// Calls f.template operator()<C, D>() for the runtime codec and head_dim when they are among the listed ones
// (each listed pair is one kernel instance); cudaErrorInvalidValue otherwise.
template <kv::CodecId... Cs>
struct Codecs {};
template <int... Ds>
struct Dims {};
using AllCodecs = Codecs<kv::CodecId::f32, kv::CodecId::f16, kv::CodecId::bf16, kv::CodecId::fp8, kv::CodecId::q8,
                         kv::CodecId::q4, kv::CodecId::q4r, kv::CodecId::tq4, kv::CodecId::tq3>;

template <kv::CodecId... Cs, int... Ds, class F>
cudaError_t dispatch(Codecs<Cs...>, Dims<Ds...>, kv::CodecId c, int head_dim, const F& f) {
  cudaError_t r = cudaErrorInvalidValue;
  auto by_dim = [&]<kv::CodecId C>() {
    (void)((head_dim == Ds ? (r = f.template operator()<C, Ds>(), true) : false) || ...);
  };
  (void)((c == Cs ? (by_dim.template operator()<Cs>(), true) : false) || ...);
  return r;
}

}  // namespace kvtax::cuda::detail
