// Quantized GEMV (Q8_0, Q4_0, Q4_K) with its weights staged through shared memory by sm_90's bulk copy engine.
//
// Why: a GEMV moves each weight byte once, so its speed is the bytes it keeps in flight and how fast it consumes
// them. The register-fed kernel of gemv.cu holds one or two rows' loads per warp and waits for them (latency-bound at
// 4096 columns: 0.6 waves, 3.7 warps per scheduler, 63% of stalls on global loads). Here lane 0 of each warp keeps
// kStages copies of ~2.3 KB in flight without a register each, and issues the first ones before
// griddepcontrol.wait: the weights never depend on the kernel before, so they stream while it finishes.
//
// A row is cut into units of 64 slots; a slot is a lane's share of a unit (Q4_K: a pair of 32-value sub-blocks;
// Q4_0: two blocks; Q8_0: one block), so a unit is 4096 (Q8_0: 2048) values and one stage. Lanes take slots
// lane and lane + 32. x's int8 codes are staged once per block, their 16-byte chunks transposed so that 32 lanes
// reading the same chunk of consecutive slots touch consecutive addresses (no bank conflicts).
#include <cuda_runtime.h>

#include <algorithm>

#include "cuda/gemv_common.cuh"
#include "cuda/mma.cuh"
#include "cuda/pdl.cuh"
#include "ggml/blocks.h"

namespace kvtax::cuda::detail {

namespace {

// Copies in flight per warp, and warps per block: 32 warps of one row each for a block of 32 rows with the residual
// epilogue (the decode step's wo and down: one block per SM), else 8 warps, 4 blocks per SM. The kernel is bound by
// instruction latency as much as by memory (ncu, session 12: 11.6 cycles per issued instruction at 4 warps per
// scheduler), so warps count more than stages: 2 stages with 8 warps per scheduler beat 4 stages with 4.
constexpr int kStages = 2;
constexpr int warps_of(bool res) { return res ? 32 : 8; }
constexpr int min_blocks(bool res) { return res ? 1 : 4; }  // 64 registers either way
constexpr int kUnitSlots = 64;
constexpr int kStageBytes = 2304;  // the largest unit: 64 slots of 36 bytes (Q4_K, Q4_0)
constexpr int kResRows = 32;       // rows of a block with the residual epilogue (residual_epilogue's 32 lanes)

// One slot's products: x holds the slot's int8 codes (kValues / 4 words), xd / xs its blocks' scales and
// scale * sum of codes.
template <GgmlType T>
struct Slot;

// Small integers to float on the FP32 pipe (exact): a 2^23 (signed: 1.5 * 2^23) magic number takes them into its
// mantissa; the conversion instruction runs at a fraction of the FP32 rate.
__device__ __forceinline__ float byte_to_f32(uint32_t w, uint32_t byte) {  // byte 0..3 of w
  return __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7540u | byte)) - 8388608.0f;
}
__device__ __forceinline__ float small_int_to_f32(int v) {  // |v| < 2^22
  return __int_as_float(0x4B400000 + v) - 12582912.0f;
}
// Unsigned bytes of a times signed bytes of b (the high nibbles kept in place, as 16 x their value).
__device__ __forceinline__ int dp4a_us(uint32_t a, int b, int c) {
  int d;
  asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

template <>
struct Slot<GgmlType::Q4_K> {
  static constexpr int kValues = 64, kBytes = sizeof(BlockQ4_K) / 4;  // 4 slots per super-block
  // Slot s is sub-blocks 2j and 2j + 1 (j = s % 4) of super-block s / 4. Their 6-bit scales and mins come as byte
  // pairs of the 12 packed bytes (ggml's get_scale_min_k4, two sub-blocks at once); a lane's j never changes.
  __device__ static float dot(const uint8_t* unit, int s, const int* x, float2 xd, float2 xs) {
    const uint8_t* blk = unit + (s / 4) * sizeof(BlockQ4_K);  // 144 bytes from a 128-aligned stage: 16-aligned
    const uint32_t j = s % 4, sel = (2 * j) | ((2 * j + 1) << 4);
    const uint4 h = *reinterpret_cast<const uint4*>(blk);  // d, dmin, scales[0..11]
    const uint4 q0 = *reinterpret_cast<const uint4*>(blk + 16 + 32 * j);
    const uint4 q1 = *reinterpret_cast<const uint4*>(blk + 32 + 32 * j);
    const uint32_t a = __byte_perm(h.y, h.z, sel);                    // scale bytes 2j, 2j + 1
    const uint32_t b = __byte_perm(h.z, h.w, sel);                    // bytes 2j + 4, 2j + 5
    const uint32_t c = __byte_perm(h.y, h.z, j < 2 ? sel : sel - 0x44);  // bytes 2j - 4, 2j - 3
    const uint32_t sc = j < 2 ? a & 0x3f3f : (b & 0x0f0f) | ((c & 0xc0c0) >> 2);
    const uint32_t m = j < 2 ? b & 0x3f3f : ((b >> 4) & 0x0f0f) | ((a & 0xc0c0) >> 2);
    const uint32_t q[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
    int slo = 0, shi = 0;  // shi: 16 x the high nibbles' dot
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      slo = dp4a_us(q[k] & 0x0f0f0f0fu, x[k], slo);
      shi = dp4a_us(q[k] & 0xf0f0f0f0u, x[8 + k], shi);
    }
    const float d = half_to_f32(h.x & 0xffff), dmin = half_to_f32(h.x >> 16);
    const float pos = xd.x * small_int_to_f32(slo) * byte_to_f32(sc, 0) +
                      xd.y * small_int_to_f32(shi) * (byte_to_f32(sc, 1) * 0.0625f);
    const float neg = byte_to_f32(m, 0) * xs.x + byte_to_f32(m, 1) * xs.y;
    return d * pos - dmin * neg;
  }
};

template <>
struct Slot<GgmlType::Q4_0> {
  static constexpr int kValues = 64, kBytes = 2 * sizeof(BlockQ4_0);
  __device__ static float dot(const uint8_t* unit, int s, const int* x, float2 xd, float2 xs) {
    float r = 0.0f;
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      uint32_t q[4];
      const float d = half_to_f32(load_block_u16_then<4, true>(unit + (2 * s + b) * sizeof(BlockQ4_0), q));
      int acc = 0;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        acc = __dp4a(int(q[k] & 0x0f0f0f0fu), x[8 * b + k], acc);             // values 4k..4k+3
        acc = __dp4a(int((q[k] >> 4) & 0x0f0f0f0fu), x[8 * b + 4 + k], acc);  // values 16+4k..
      }
      // sum (code - 8) * x = xd * acc - 8 * xd * sum(xq)
      r = fmaf(d, fmaf(b ? xd.y : xd.x, float(acc), -8.0f * (b ? xs.y : xs.x)), r);
    }
    return r;
  }
};

template <>
struct Slot<GgmlType::Q8_0> {
  static constexpr int kValues = 32, kBytes = sizeof(BlockQ8_0);
  __device__ static float dot(const uint8_t* unit, int s, const int* x, float2 xd, float2) {
    uint32_t q[8];
    const float d = half_to_f32(load_block_u16_then<8, true>(unit + s * sizeof(BlockQ8_0), q));
    int acc = 0;
#pragma unroll
    for (int k = 0; k < 8; ++k) acc = __dp4a(int(q[k]), x[k], acc);
    return d * xd.x * float(acc);
  }
};

template <int kWarps>
struct SmemLayout {
  static constexpr int kStagesOff = 0;
  static constexpr int kBarsOff = kWarps * kStages * kStageBytes;
  static constexpr int kMiscOff = kBarsOff + kWarps * kStages * 8;  // 32 row results + the norm's 1/rms
  static constexpr int kXqOff = kMiscOff + 64 * 4;
  static size_t bytes(int cols) { return size_t(kXqOff) + size_t(cols) + 2 * size_t(cols / 32) * 4; }
};

// RES: blocks of 32 rows with the residual epilogue, one row per warp. Otherwise every block is resident (the grid is
// what fits at once) and warp w of all W takes rows [rows w / W, rows (w + 1) / W): contiguous bytes, balanced to a row.
template <GgmlType T, bool RES>
__global__ void __launch_bounds__(32 * warps_of(RES), min_blocks(RES)) gemv_staged_kernel(GemvArgs a) {
  constexpr int kWarps = warps_of(RES), kThreads = 32 * kWarps;
  using F = Slot<T>;
  using L = SmemLayout<kWarps>;
  constexpr int kChunks = F::kValues / 16, kScales = F::kValues / 32;
  extern __shared__ __align__(128) uint8_t smem[];
  float* misc = reinterpret_cast<float*>(smem + L::kMiscOff);
  int8_t* xq_s = reinterpret_cast<int8_t*>(smem + L::kXqOff);
  float* xd_s = reinterpret_cast<float*>(xq_s + a.cols);
  float* xs_s = xd_s + a.cols / 32;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int slots_row = a.cols / F::kValues, units_row = (slots_row + kUnitSlots - 1) / kUnitSlots;
  int r_begin, r_end;
  if constexpr (RES) {
    r_begin = blockIdx.x * kResRows + warp * (kResRows / kWarps);
    r_end = r_begin + kResRows / kWarps;
  } else {
    const int64_t gw = int64_t(blockIdx.x) * kWarps + warp, nw = int64_t(gridDim.x) * kWarps;
    r_begin = int(a.rows * gw / nw);
    r_end = int(a.rows * (gw + 1) / nw);
  }
  const int n = (r_end - r_begin) * units_row;  // this warp's units, row by row
  uint8_t* stages = smem + L::kStagesOff + warp * kStages * kStageBytes;
  const uint32_t bars = smem_addr(smem + L::kBarsOff) + warp * kStages * 8;
  int issue_row = r_begin, issue_u = 0;  // lane 0: the next unit to copy
  auto issue = [&](int i) {              // unit i into stage i % kStages
    const int s0 = issue_u * kUnitSlots;
    const uint32_t bytes = uint32_t(min(kUnitSlots, slots_row - s0) * F::kBytes), bar = bars + (i % kStages) * 8;
    mbar_expect_bytes(bar, bytes);
    bulk_copy(smem_addr(stages + (i % kStages) * kStageBytes),
              a.w + size_t(issue_row) * a.row_bytes + size_t(s0) * F::kBytes, bytes, bar);
    if (++issue_u == units_row) issue_u = 0, ++issue_row;
  };
  if (lane == 0) {
    for (int s = 0; s < kStages; ++s) mbar_init(bars + s * 8, 1);
    for (int i = 0; i < min(n, kStages); ++i) issue(i);
  }
  pdl_wait();  // x's codes (and the residual) come from the kernels before this one
  pdl_trigger();  // every block is resident: the next kernel's blocks may take what is left of the SMs
  const int4* xq4 = reinterpret_cast<const int4*>(a.xq);
  for (int c = threadIdx.x; c < a.cols / 16; c += kThreads)
    reinterpret_cast<int4*>(xq_s)[(c % kChunks) * slots_row + c / kChunks] = __ldg(xq4 + c);
  for (int b = threadIdx.x; b < a.cols / 32; b += kThreads) {
    xd_s[b] = __ldg(a.xd + b);
    if constexpr (T != GgmlType::Q8_0) xs_s[b] = __ldg(a.xs + b);
  }
  if (warp == 0) {
    const float scale = rms_scale(a);  // once per block, not per warp
    if (lane == 0) misc[32] = scale;
  }
  __syncthreads();
  const float scale = misc[32];

  // Slot s of a unit (global slot index g of the row): its x codes and scales, then its products.
  auto slot = [&](const uint8_t* unit, int s, int g) {
    int x[F::kValues / 4];
#pragma unroll
    for (int k = 0; k < kChunks; ++k) {
      const int4 v = reinterpret_cast<const int4*>(xq_s)[k * slots_row + g];
      x[4 * k] = v.x, x[4 * k + 1] = v.y, x[4 * k + 2] = v.z, x[4 * k + 3] = v.w;
    }
    float2 xd, xs{};
    if constexpr (kScales == 2) {
      xd = reinterpret_cast<const float2*>(xd_s)[g];
      if constexpr (T != GgmlType::Q8_0) xs = reinterpret_cast<const float2*>(xs_s)[g];
    } else {
      xd = make_float2(xd_s[g], 0.0f);
    }
    return F::dot(unit, s, x, xd, xs);
  };
  float acc = 0.0f;
  int row = r_begin, u = 0;  // the unit being computed
  for (int i = 0; i < n; ++i) {
    const int s0 = u * kUnitSlots, ns = min(kUnitSlots, slots_row - s0);
    mbar_wait(bars + (i % kStages) * 8, (i / kStages) & 1);
    const uint8_t* unit = stages + (i % kStages) * kStageBytes;
    if (ns == kUnitSlots) {  // both slots without a branch between them: two independent chains to interleave
      const float p0 = slot(unit, lane, s0 + lane), p1 = slot(unit, lane + 32, s0 + lane + 32);
      acc += p0;
      acc += p1;
    } else {
      if (lane < ns) acc += slot(unit, lane, s0 + lane);
      if (lane + 32 < ns) acc += slot(unit, lane + 32, s0 + lane + 32);
    }
    __syncwarp();  // every lane is done with the stage before the copy engine refills it
    if (lane == 0 && i + kStages < n) issue(i + kStages);
    if (++u == units_row) {
      const float v = warp_sum(acc) * scale;
      if (lane == 0) {
        if constexpr (RES) misc[row - blockIdx.x * kResRows] = v;
        else a.y[row] = v;
      }
      acc = 0.0f, u = 0, ++row;
    }
  }
  if constexpr (RES) {
    __syncthreads();
    residual_epilogue(a, misc);
  }
}

template <GgmlType T, bool RES>
cudaError_t launch_kernel(const GemvArgs& a, cudaStream_t st) {
  constexpr int kWarps = warps_of(RES), kThreads = 32 * kWarps;
  const size_t smem = SmemLayout<kWarps>::bytes(a.cols);
  auto* k = gemv_staged_kernel<T, RES>;
  static size_t smem_set = 0;  // the largest dynamic shared memory this instance was allowed so far
  if (smem > smem_set) {
    if (cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)); e != cudaSuccess)
      return e;
    smem_set = smem;
  }
  int grid = a.rows / kResRows;
  if constexpr (!RES) {
    static int sms = 0;
    if (!sms) {
      int dev = 0;
      if (cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) return e;
      if (cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev); e != cudaSuccess) return e;
    }
    int per_sm = 0;
    if (cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, kThreads, smem); e != cudaSuccess)
      return e;
    grid = std::max(1, std::min(per_sm * sms, (a.rows + kWarps - 1) / kWarps));
  }
  return launch_pdl_smem(k, grid, kThreads, smem, st, a);
}

template <GgmlType T>
cudaError_t launch(const GemvArgs& a, cudaStream_t st) {
  return a.res ? launch_kernel<T, true>(a, st) : launch_kernel<T, false>(a, st);
}

}  // namespace

bool staged_gemv_fits(const GemvArgs& a) {
  static const int major = [] {
    int dev = 0, m = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&m, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess)
      m = 0;
    return m;
  }();
  if (major < 9) return false;  // no bulk copy engine before sm_90
  if (a.type != GgmlType::Q8_0 && a.type != GgmlType::Q4_0 && a.type != GgmlType::Q4_K) return false;
  if (a.silu_pairs || a.cols % 256 != 0 || a.row_bytes % 16 != 0 || reinterpret_cast<uintptr_t>(a.w) % 16 != 0)
    return false;  // copies are whole 16-byte runs: rows of whole 8-block (Q4_K: super-block) groups
  if (a.res && a.rows % kResRows != 0) return false;
  const size_t smem = a.res ? SmemLayout<warps_of(true)>::bytes(a.cols) : SmemLayout<warps_of(false)>::bytes(a.cols);
  return smem <= 227 * 1024;
}

cudaError_t launch_gemv_staged(const GemvArgs& a, cudaStream_t st) {
  switch (a.type) {
    case GgmlType::Q8_0:
      return launch<GgmlType::Q8_0>(a, st);
    case GgmlType::Q4_0:
      return launch<GgmlType::Q4_0>(a, st);
    case GgmlType::Q4_K:
      return launch<GgmlType::Q4_K>(a, st);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace kvtax::cuda::detail
