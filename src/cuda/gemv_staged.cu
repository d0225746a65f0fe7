// GEMV (Q8_0, Q4_0, Q4_K, F16, BF16) with its weights staged through shared memory by sm_90's bulk copy engine.
//
// Why: a GEMV moves each weight byte once, so its speed is the bytes it keeps in flight and how fast it consumes
// them. The register-fed kernel of gemv.cu holds one or two rows' loads per warp and waits for them (latency-bound at
// 4096 columns: 0.6 waves, 3.7 warps per scheduler, 63% of stalls on global loads). Here lane 0 of each warp keeps
// kStages copies of ~2.3 KB in flight without a register each, and issues the first one before
// griddepcontrol.wait: the weights never depend on the kernel before, so they stream while it finishes.
//
// A row is cut into units of 64 or 128 slots (gemv_slots.cuh: Q4_K a pair of 32-value sub-blocks, Q4_0 two blocks,
// Q8_0 one block, F16/BF16 8 values), one stage each; lane l takes slots l, l + 32, ... x (quantized types: its int8
// codes) is staged once per block, laid out for conflict-free reads (StagedX).
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <mutex>

#include "cuda/gemv_common.cuh"
#include "cuda/gemv_slots.cuh"
#include "cuda/mma.cuh"
#include "cuda/pdl.cuh"
#include "cuda/runtime.h"

namespace kvtax::cuda::detail {

namespace {

// Copies in flight per warp, and warps per block: a block of 32 rows with the residual epilogue (the decode step's wo
// and down: one block per SM) takes 32 warps of one row each for float weights, 16 warps of two rows for quantized
// ones, else 8 warps, 4 blocks per SM (wide quantized rows: 16, below). The kernel is bound by instruction latency as
// much as by memory (ncu, session 12: 11.6 cycles per issued instruction at 4 warps per scheduler), so warps count more
// than stages: 2 stages with 8 warps per scheduler beat 4 stages with 4. 16-warp residual blocks, whose smaller shared
// memory lets the next kernel's blocks in beside them, made the Q4_K step 0.01-0.035 ms faster and the BF16 one
// 0.12-0.14 ms slower (H200, session 16, A/B in one call).
// Quantized rows of 8192 columns or more take blocks of 16 warps, 2 per SM: each block stages x (~1.25 bytes a
// column) before its first product, and at 14336 columns four blocks per SM read 72 KB of x per 250 KB of weights.
// 4096x14336, x ready, rounds alternated in one call: Q4_K 74.8-75.4% -> 80.0-80.2% of copy (79.1-80.5 over four
// calls), Q4_0 79.2-79.9 -> 81.5-81.8, Q8_0 86.2 -> 89.1; blocks of 32 warps (128 blocks, one per SM) 74.0-74.5 /
// 74.9-75.0 / 89.3-89.7; at 4096 columns 16 warps lose 1-3 points (H200, session 24).
constexpr int kStages = 2;
// Stages each warp copies before griddepcontrol.wait; the rest go out once x has landed. x comes from L2 right after
// the wait, and its loads queue behind every copy already in flight on the SM (ncu of the split kernel, which does the
// same with q: a third to half of its warps' time at 32k waited on q). One of two: Q4_K step -0.01..-0.05 ms at 32k
// and 128k (fp8 32k 2.145 -> 2.118-2.127), BF16 -0.03..-0.10 (q4r 32k 4.481 -> 4.387-4.390); none before the wait
// is 0.03-0.12 ms slower, and the second copy issued right behind x's loads 0.01-0.07 (H200, session 33, A/B).
constexpr int kEarlyStages = 1;
constexpr int kWideCols = 8192;
constexpr int warps_of(bool res, bool float_w, int cols) {
  return res ? (float_w ? 32 : 16) : !float_w && cols >= kWideCols ? 16 : 8;
}
constexpr int min_blocks(bool res, int warps) { return res ? 1 : 32 / warps; }  // 64 registers either way
constexpr int kStageBytes = 2304;  // the largest unit: 64 slots of 36 bytes (Q4_K, Q4_0)
constexpr int kResRows = 32;       // rows of a block with an epilogue over 32 rows (residual, or SwiGLU codes)
// Blocks of kResRows rows: the residual epilogue, and quantized SwiGLU pairs (their codes, per 32 values).
constexpr bool block32(GgmlType t, bool res, bool pairs) { return res || (pairs && !float_type(t)); }

// A block's shared memory: each warp's stages, their barriers, 32 row results, the norm's 1/rms and (RES) the 32 rows'
// residual and norm weights, then x (float types as floats; quantized ones as int8 codes, then their scales and
// scale * sum of codes).
// misc: [0, 32) the rows' products, [32] 1/rms, [kMiscRes, kMiscRes + 64) the rows' residual then norm weights.
constexpr int kMiscRes = 64, kMiscFloats = kMiscRes + 2 * kResRows;
constexpr int x_offset(int warps, int stages) { return warps * stages * (kStageBytes + 8) + kMiscFloats * 4; }
template <int kWarps, int S>
struct SmemLayout {
  static constexpr int kStagesOff = 0;
  static constexpr int kBarsOff = kWarps * S * kStageBytes;
  static constexpr int kMiscOff = kBarsOff + kWarps * S * 8;
  static constexpr int kXOff = kMiscOff + kMiscFloats * 4;
  static_assert(kXOff == x_offset(kWarps, S));
};
size_t smem_bytes(int warps, GgmlType t, int cols) {
  return size_t(x_offset(warps, kStages)) + (float_type(t) ? 4 * size_t(cols) : size_t(cols) + size_t(cols) / 4);
}

// RES: blocks of 32 rows with the residual epilogue, kResRows / warps rows per warp. Otherwise every block is
// resident (the grid is what fits at once) and warp w of all W takes rows [rows w / W, rows (w + 1) / W):
// contiguous bytes, balanced to a row.
// PAIRS: output row r is silu(W_r x) * W_(r + rows) x, the warp streaming row r, then row r + rows. Quantized
// weights take them in blocks of 32 rows too, and write their int8 codes (a.pair_q) for the down GEMV: the codes of
// 32 values need all 32 in one block, and down then skips a quantizer kernel of its own.
template <GgmlType T, bool RES, bool PAIRS, int kWarps>
__device__ __forceinline__ void gemv_staged(const GemvArgs& a) {
  constexpr int kThreads = 32 * kWarps, S = kStages;
  constexpr bool kCodes = PAIRS && !kFloat<T>, kBlock32 = block32(T, RES, PAIRS);
  using F = Slot<T>;
  using L = SmemLayout<kWarps, S>;
  constexpr int kUnitSlots = F::kUnitSlots, kPerLane = kUnitSlots / 32, kChunks = F::kValues * (kFloat<T> ? 4 : 1) / 16;
  extern __shared__ __align__(128) uint8_t smem[];
  float* misc = reinterpret_cast<float*>(smem + L::kMiscOff);
  int4* x_s = reinterpret_cast<int4*>(smem + L::kXOff);
  float* xd_s = reinterpret_cast<float*>(smem + L::kXOff + a.cols);
  const int slots_row = a.cols / F::kValues, units_row = (slots_row + kUnitSlots - 1) / kUnitSlots;
  const StagedX sx{x_s, xd_s, xd_s + a.cols / 32, slots_row};

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  constexpr bool kBatchX = !kFloat<T> && kWarps == 16;  // quantized blocks of 16 warps: wide rows, residual blocks
  int r_begin, r_end;
  if constexpr (kBlock32) {
    r_begin = blockIdx.x * kResRows + warp * (kResRows / kWarps);
    r_end = r_begin + kResRows / kWarps;
  } else {
    const int64_t gw = int64_t(blockIdx.x) * kWarps + warp, nw = int64_t(gridDim.x) * kWarps;
    r_begin = int(a.rows * gw / nw);
    r_end = int(a.rows * (gw + 1) / nw);
  }
  constexpr int kParts = PAIRS ? 2 : 1;  // weight rows per output row
  const int n = (r_end - r_begin) * kParts * units_row;  // this warp's units, weight row by weight row
  uint8_t* stages = smem + L::kStagesOff + warp * S * kStageBytes;
  const uint32_t bars = smem_addr(smem + L::kBarsOff) + warp * S * 8;
  int issue_row = r_begin, issue_part = 0, issue_u = 0;  // lane 0: the next unit to copy
  auto issue = [&](int i) {                               // unit i into stage i % S
    const int s0 = issue_u * kUnitSlots;
    const uint32_t bytes = uint32_t(min(kUnitSlots, slots_row - s0) * F::kBytes), bar = bars + (i % S) * 8;
    const size_t w_row = size_t(issue_row) + size_t(issue_part) * a.rows;
    mbar_expect_bytes(bar, bytes);
    bulk_copy(smem_addr(stages + (i % S) * kStageBytes), a.w + w_row * a.row_bytes + size_t(s0) * F::kBytes,
              bytes, bar);
    if (++issue_u == units_row) {
      issue_u = 0;
      if (++issue_part == kParts) issue_part = 0, ++issue_row;
    }
  };
  if (lane == 0) {
    for (int s = 0; s < S; ++s) mbar_init(bars + s * 8, 1);
    for (int i = 0; i < min(n, kEarlyStages); ++i) issue(i);
  }
  if constexpr (RES) {
    // The residual was written two kernels back or earlier, by a kernel that finished before the one before this one
    // launched (the step's kernels before wo and down each trigger after their wait, or launch behind one that
    // does); read here, its load leaves the epilogue's path.
    if (warp == kWarps - 1) {
      const int r = blockIdx.x * kResRows + lane;
      misc[kMiscRes + lane] = a.res[r];
      misc[kMiscRes + kResRows + lane] = __ldg(a.norm_w + r);
    }
  }
  pdl_wait();  // x comes from the kernels before this one
  pdl_trigger();  // every block is resident: the next kernel's blocks may take what is left of the SMs
  const int4* x_g = reinterpret_cast<const int4*>(kFloat<T> ? static_cast<const void*>(a.x) : a.xq);
  if constexpr (kBatchX) {
    // x's codes, then its scales and scale * sum of codes (one run in the scratch as in shared memory): all of a
    // thread's loads in flight before its stores, one round trip to L2 where the loop below takes three.
    // 4096x14336, x ready: Q4_K 78.9-79.1 -> 81.1-81.5% of copy, Q4_0 80.6-80.8 -> 82.4-82.8, Q8_0 87.6-87.7 ->
    // 90.2-90.6; in the residual GEMVs too, the Q4_K decode step 0.003-0.016 ms faster (f16 and fp8 KV, 2k and 32k,
    // two rounds each; H200, session 24).
    constexpr int kBatch = 4;
    const int4* s_g = reinterpret_cast<const int4*>(a.xd);
    const int x_chunks = a.cols / 16, chunks = x_chunks + a.cols / 64;
    for (int c0 = threadIdx.x; c0 < chunks; c0 += kBatch * kThreads) {
      int4 v[kBatch];
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        const int c = c0 + k * kThreads;
        if (c < chunks) v[k] = __ldg(c < x_chunks ? x_g + c : s_g + (c - x_chunks));
      }
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        const int c = c0 + k * kThreads;
        if (c < x_chunks) x_s[(c % kChunks) * slots_row + c / kChunks] = v[k];
        else if (c < chunks) reinterpret_cast<int4*>(xd_s)[c - x_chunks] = v[k];
      }
    }
  } else {  // 8-warp blocks (batched, 14336x4096 Q4_K lost a point: session 18) and float x
    for (int c = threadIdx.x; c < a.cols * (kFloat<T> ? 4 : 1) / 16; c += kThreads)
      x_s[(c % kChunks) * slots_row + c / kChunks] = __ldg(x_g + c);
    if constexpr (!kFloat<T>) {
      for (int b = threadIdx.x; b < a.cols / 32; b += kThreads) {
        xd_s[b] = __ldg(a.xd + b);
        if constexpr (T != GgmlType::Q8_0) xd_s[a.cols / 32 + b] = __ldg(a.xs + b);
      }
    }
  }
  if (lane == 0)
    for (int i = kEarlyStages; i < min(n, S); ++i) issue(i);
  if (warp == 0) {
    const float scale = rms_scale(a);  // once per block, not per warp
    if (lane == 0) misc[32] = scale;
  }
  __syncthreads();
  const float scale = misc[32];

  float acc = 0.0f, first = 0.0f;  // first: a pair's gate product
  int row = r_begin, part = 0, u = 0;  // the unit being computed
  for (int i = 0; i < n; ++i) {
    const int s0 = u * kUnitSlots, ns = min(kUnitSlots, slots_row - s0);
    mbar_wait(bars + (i % S) * 8, (i / S) & 1);
    const uint8_t* unit = stages + (i % S) * kStageBytes;
    if (ns == kUnitSlots) {  // a lane's slots without branches between them: independent chains to interleave
      float p[kPerLane];
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) p[j] = F::dot(unit, lane + 32 * j, sx, s0 + lane + 32 * j);
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) acc += p[j];
    } else {
#pragma unroll
      for (int j = 0; j < kPerLane; ++j)
        if (lane + 32 * j < ns) acc += F::dot(unit, lane + 32 * j, sx, s0 + lane + 32 * j);
    }
    __syncwarp();  // every lane is done with the stage before the copy engine refills it
    if (lane == 0 && i + S < n) issue(i + S);
    if (++u < units_row) continue;
    u = 0;
    const float v = warp_sum(acc) * scale;
    acc = 0.0f;
    if (PAIRS && part == 0) {
      first = v, part = 1;
      continue;
    }
    if (lane == 0) {
      const float out = PAIRS ? silu_mul(first, v) : v;
      if constexpr (kBlock32) misc[row - blockIdx.x * kResRows] = out;
      else a.y[row] = out;
    }
    part = 0, ++row;
  }
  if constexpr (RES) {
    __syncthreads();
    residual_epilogue(a, misc, misc + kMiscRes);
  } else if constexpr (kCodes) {
    __syncthreads();
    if (warp == 0) quantize_x_block32(misc[lane], blockIdx.x * kResRows, a.pair_q.xq, a.pair_q.xd, a.pair_q.xs);
  }
}

template <GgmlType T, bool RES, bool PAIRS, int kWarps>
__global__ void __launch_bounds__(32 * kWarps, min_blocks(RES, kWarps)) gemv_staged_kernel(GemvArgs a) {
  gemv_staged<T, RES, PAIRS, kWarps>(a);
}
// Float residual blocks (32 warps) at 64 registers take an SM's whole register file, so a decode merge block (128
// threads of 32 registers, resident beside the split kernel's) holds back wo's block on its SM until it exits. At 56
// (no spills) one fits beside: BF16 weights, fp8 KV at 128k 6.128-6.135 -> 6.093-6.095 ms, the other rows within
// noise; quantized residual blocks at 54 (from 70) were 4% slower (H200, session 33).
constexpr int kResFloatRegs = 56;
template <GgmlType T, bool RES, bool PAIRS, int kWarps>
__global__ void __maxnreg__(kResFloatRegs) gemv_staged_capped(GemvArgs a) {
  gemv_staged<T, RES, PAIRS, kWarps>(a);
}
template <GgmlType T, bool RES, bool PAIRS, int kWarps>
constexpr auto gemv_kernel() {
  if constexpr (RES && kFloat<T>) return gemv_staged_capped<T, RES, PAIRS, kWarps>;
  else return gemv_staged_kernel<T, RES, PAIRS, kWarps>;
}

template <GgmlType T, bool RES, bool PAIRS = false, int kWarps = warps_of(RES, kFloat<T>, 0)>
cudaError_t launch_kernel(const GemvArgs& a, cudaStream_t st) {
  constexpr int kThreads = 32 * kWarps;
  const size_t smem = smem_bytes(kWarps, T, a.cols);
  auto* k = gemv_kernel<T, RES, PAIRS, kWarps>();
  // Per instance, once per shared-memory size (host work on every launch otherwise, where the step runs without its
  // graph): the attribute allowing the largest size so far, and the blocks of the resident grid.
  static std::mutex mu;
  static size_t allowed = 0;
  static std::map<size_t, int> resident;  // smem -> blocks that fit on the GPU at once
  int fit = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (smem > allowed) {
      if (cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
          e != cudaSuccess)
        return e;
      allowed = smem;
    }
    if (auto it = resident.find(smem); it != resident.end()) {
      fit = it->second;
    } else {
      int per_sm = 0;
      if (cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, kThreads, smem); e != cudaSuccess)
        return e;
      fit = resident[smem] = per_sm * sm_count();
    }
  }
  if (a.blocks_per_sm > 0) fit = std::min(fit, a.blocks_per_sm * sm_count());
  constexpr bool kBlock32 = block32(T, RES, PAIRS);
  int grid = kBlock32 ? a.rows / kResRows : std::max(1, std::min(fit, (a.rows + kWarps - 1) / kWarps));
  if (!kBlock32 && (T == GgmlType::Q4_0 || T == GgmlType::Q4_K)) {
    // The 4-bit rows cost their warps instructions more than bytes: where whole rows split unevenly over the warps
    // (the largest share 10% or more above the mean), fewer warps with equal shares finish sooner. 14336x4096 with x
    // ready: 3.39 rows a warp, Q4_K 78.9% of copy, Q4_0 82.2-82.5%; 4 rows each on 3584 warps, 84.1-84.8% and
    // 86.8-87.1%. The byte-bound types lose there (Q8_0 93.6 -> 91.3%, F16 99.6 -> 91.2%), and so do small
    // imbalances: the decode step's gate|up (6.79 rows a warp) and qkv (1.94) were 0.01-0.04 ms slower balanced
    // (H200, session 23, docs/perf.md).
    const int warps = grid * kWarps, most = (a.rows + warps - 1) / warps;
    if (double(most) * warps >= 1.1 * a.rows) grid = std::max(1, ((a.rows + most - 1) / most + kWarps - 1) / kWarps);
  }
  return launch_pdl_smem(k, grid, kThreads, smem, st, a);
}

template <GgmlType T>
cudaError_t launch(const GemvArgs& a, cudaStream_t st) {
  if (a.res) return launch_kernel<T, true>(a, st);
  if constexpr (kFloat<T>) {
    if (a.silu_pairs) return launch_kernel<T, false, true>(a, st);
  } else if (warps_of(false, false, a.cols) == 16) {
    return a.silu_pairs ? launch_kernel<T, false, true, 16>(a, st) : launch_kernel<T, false, false, 16>(a, st);
  } else if (a.silu_pairs) {
    return launch_kernel<T, false, true>(a, st);
  }
  return launch_kernel<T, false>(a, st);
}

}  // namespace

bool staged_gemv_fits(const GemvArgs& a) {
  static const int major = [] {
    int dev = 0, m = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&m, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess)
      m = 0;
    return m;
  }();
  if (major < 9) return false;  // no bulk copy engine before sm_90
  if (!staged_type(a.type) || (a.silu_pairs && a.res)) return false;
  if (a.silu_pairs && !float_type(a.type) && (!a.pair_q.xq || a.rows % kResRows != 0))
    return false;  // quantized pairs: codes out, in blocks of 32 rows
  if (a.cols % 256 != 0 || a.row_bytes % 16 != 0 || reinterpret_cast<uintptr_t>(a.w) % 16 != 0)
    return false;  // copies are whole 16-byte runs: rows of whole 8-block (Q4_K: super-block) groups
  if (reinterpret_cast<uintptr_t>(a.x) % 16 != 0 && float_type(a.type))
    return false;  // float x is staged by 16-byte loads
  if (a.res && a.rows % kResRows != 0) return false;
  const int warps = warps_of(a.res, float_type(a.type), a.cols);
  if (!float_type(a.type) && warps == 16 &&
      (a.xs != a.xd + a.cols / 32 || reinterpret_cast<uintptr_t>(a.xd) % 16 != 0))
    return false;  // blocks of 16 warps stage x's scales and sums as one run of 16-byte loads (gemv_scratch_layout's)
  return smem_bytes(warps, a.type, a.cols) <= 227 * 1024;
}

cudaError_t launch_gemv_staged(const GemvArgs& a, cudaStream_t st) {
  switch (a.type) {
    case GgmlType::Q8_0:
      return launch<GgmlType::Q8_0>(a, st);
    case GgmlType::Q4_0:
      return launch<GgmlType::Q4_0>(a, st);
    case GgmlType::Q4_K:
      return launch<GgmlType::Q4_K>(a, st);
    case GgmlType::F16:
      return launch<GgmlType::F16>(a, st);
    case GgmlType::BF16:
      return launch<GgmlType::BF16>(a, st);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace kvtax::cuda::detail
