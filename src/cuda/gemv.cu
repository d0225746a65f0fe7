// Register-fed GEMV kernels: one warp per weight row (quantized: R rows), 4 warps per 128-thread block; each lane
// streams its share of the row (16-byte loads where the block layout is aligned) and the warp sums with shuffles.
// launch_gemv prefers the staged kernel (gemv_staged.cu); these take F32 and the shapes it does not, and everything
// with KVTAX_GEMV_STAGED=0.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdlib>
#include <string>

#include "cuda/gemv_common.cuh"
#include "cuda/gemv_launch.h"
#include "cuda/pdl.cuh"
#include "cuda/quantize_x.cuh"
#include "ggml/blocks.h"

namespace kvtax::cuda::detail {

namespace {

constexpr int kThreads = 128, kRowsPerBlock = kThreads / 32;

// x -> int8 codes per 32 values (quantize_x.cuh); with u, the codes of silu(x) * u (the FFN's down
// projection takes its input straight from gate|up). One warp per block of 32.
__global__ void __launch_bounds__(256) quantize_x(const float* __restrict__ x, const float* __restrict__ u, int cols,
                                                  int8_t* __restrict__ xq, float* __restrict__ xd,
                                                  float* __restrict__ xs) {
  // Every block is resident: the GEMV's blocks may launch now and stream their weights while the kernel before this
  // one finishes (its griddepcontrol.wait still waits for this whole grid). H200, session 12 call 5: -1.2% per decode
  // step against triggering after the wait.
  pdl_trigger();
  pdl_wait();
  const int i = blockIdx.x * 256 + threadIdx.x;
  if (i >= cols) return;  // cols is a multiple of 32: whole warps return together
  const float v = u ? silu_mul(x[i], u[i]) : x[i];
  quantize_x_block32(v, i & ~31, xq, xd, xs);
}

// The 8 int8 codes words of x block b (32-byte aligned).
__device__ __forceinline__ void load_xq(const int8_t* xq, int b, int* w) {
  const int4* p = reinterpret_cast<const int4*>(xq + 32 * b);
  const int4 a = __ldg(p), c = __ldg(p + 1);
  w[0] = a.x; w[1] = a.y; w[2] = a.z; w[3] = a.w; w[4] = c.x; w[5] = c.y; w[6] = c.z; w[7] = c.w;
}

// One dot product of a 16-byte chunk of weights (8 halves or 4 floats) with x[c..].
template <GgmlType T>
__device__ __forceinline__ float chunk_dot(const uint4 w, const float* x, int c, float acc) {
  const float4 x0 = __ldg(reinterpret_cast<const float4*>(x + c));
  if constexpr (T == GgmlType::F32) {
    acc = fmaf(__uint_as_float(w.x), x0.x, acc);
    acc = fmaf(__uint_as_float(w.y), x0.y, acc);
    acc = fmaf(__uint_as_float(w.z), x0.z, acc);
    acc = fmaf(__uint_as_float(w.w), x0.w, acc);
  } else {
    const float4 x1 = __ldg(reinterpret_cast<const float4*>(x + c + 4));
    const float xs[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
    acc = dot_half8<T>(w, xs, acc);
  }
  return acc;
}

// Float weights. PAIRS: output row r is silu(W_r x) * W_(r + rows) x (gate|up stacked, the FFN's SwiGLU in
// the epilogue instead of a kernel of its own); both rows stream through one warp. RES: the residual epilogue,
// blocks of 32 rows (one per warp).
template <GgmlType T, bool PAIRS, bool RES>
__global__ void __launch_bounds__(RES ? 1024 : kThreads) gemv_kernel(GemvArgs a) {
  constexpr int kRows = RES ? 32 : kRowsPerBlock;
  __shared__ float dots[RES ? 32 : 1];
  const int lane = threadIdx.x & 31, r = blockIdx.x * kRows + threadIdx.x / 32;
  if (!RES && r >= a.rows) return;  // RES: rows are whole blocks of 32
  constexpr int kPerLoad = T == GgmlType::F32 ? 4 : 8;  // values per 16-byte load
  constexpr size_t kBytes = T == GgmlType::F32 ? 4 : 2;
  const uint8_t* row = a.w + size_t(r) * a.row_bytes;
  const uint8_t* row2 = PAIRS ? row + size_t(a.rows) * a.row_bytes : row;
  // The first chunks of the row(s) into L2 while the kernel before this one finishes (pdl.cuh).
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const size_t off = size_t(lane + 32 * j) * 16;
    if (off < a.row_bytes) {
      prefetch_l2(row + off);
      if (PAIRS) prefetch_l2(row2 + off);
    }
  }
  pdl_wait();
  const float scale = rms_scale(a);
  float acc = 0.0f, acc2 = 0.0f;
#pragma unroll 4
  for (int c = lane * kPerLoad; c < a.cols; c += 32 * kPerLoad) {
    const uint4 w = __ldg(reinterpret_cast<const uint4*>(row + size_t(c) * kBytes));
    if constexpr (PAIRS) {
      const uint4 w2 = __ldg(reinterpret_cast<const uint4*>(row2 + size_t(c) * kBytes));
      acc2 = chunk_dot<T>(w2, a.x, c, acc2);
    }
    acc = chunk_dot<T>(w, a.x, c, acc);
  }
  acc = warp_sum(acc) * scale;
  if constexpr (PAIRS) {
    acc2 = warp_sum(acc2) * scale;
    if (lane == 0) a.y[r] = silu_mul(acc, acc2);
  } else if constexpr (RES) {
    if (lane == 0) dots[threadIdx.x / 32] = acc;
    __syncthreads();
    residual_epilogue(a, dots);
  } else {
    if (lane == 0) a.y[r] = acc;
  }
}

template <GgmlType T>
cudaError_t launch_float(const GemvArgs& a, cudaStream_t st) {
  if (a.res) return launch_pdl(gemv_kernel<T, false, true>, a.rows / 32, 1024, st, a);
  const int grid = (a.rows + kRowsPerBlock - 1) / kRowsPerBlock;
  return a.silu_pairs ? launch_pdl(gemv_kernel<T, true, false>, grid, kThreads, st, a)
                      : launch_pdl(gemv_kernel<T, false, false>, grid, kThreads, st, a);
}

// Quantized types: R rows per warp, so each lane's int8 x codes (loaded once per block of the row) feed R
// rows' dot products: with one row per warp the x loads were as many bytes as the weights. RES: the residual
// epilogue, blocks of 32 rows (32 / R warps).
// At least 8 blocks per SM: Q4_K with 2 rows per warp took 72 registers, 7 blocks, and its 4096-row GEMVs ran in 0.6
// waves with 3.7 warps per scheduler, latency-bound (ncu, H200, 2026-12-01); at 64 registers it does not spill.
template <GgmlType T, int R, bool RES>
__global__ void __launch_bounds__(RES ? 32 * 32 / R : kThreads, RES ? 1 : 8) gemv_quant_kernel(GemvArgs a) {
  constexpr int kWarpsB = RES ? 32 / R : kRowsPerBlock;
  __shared__ float dots[RES ? 32 : 1];
  const int lane = threadIdx.x & 31, r0 = (blockIdx.x * kWarpsB + threadIdx.x / 32) * R;
  if (!RES && r0 >= a.rows) return;  // RES: rows are whole blocks of 32
  const uint8_t* rows[R];
#pragma unroll
  for (int i = 0; i < R; ++i) rows[i] = a.w + size_t(min(r0 + i, a.rows - 1)) * a.row_bytes;  // tail: re-read
#pragma unroll
  for (int i = 0; i < R; ++i)
    for (size_t off = size_t(lane) * 32; off < min(a.row_bytes, size_t(2048)); off += 32 * 32) prefetch_l2(rows[i] + off);
  pdl_wait();  // x's codes come from the kernel before this one
  const float scale = rms_scale(a);
  float acc[R];
#pragma unroll
  for (int i = 0; i < R; ++i) acc[i] = 0.0f;
  if constexpr (T == GgmlType::Q8_0 || T == GgmlType::Q4_0) {
    const int nb = a.cols / kQK;
#pragma unroll 2
    for (int b = lane; b < nb; b += 32) {
      int x[8];
      load_xq(a.xq, b, x);
      const float xd = __ldg(a.xd + b);
      const float xs = T == GgmlType::Q4_0 ? __ldg(a.xs + b) : 0.0f;
#pragma unroll
      for (int i = 0; i < R; ++i) {
        int s = 0;
        if constexpr (T == GgmlType::Q8_0) {
          uint32_t q[8];
          const float d = half_to_f32(load_block_u16_then<8>(rows[i] + size_t(b) * sizeof(BlockQ8_0), q));
#pragma unroll
          for (int k = 0; k < 8; ++k) s = __dp4a(int(q[k]), x[k], s);
          acc[i] = fmaf(d * xd, float(s), acc[i]);
        } else {
          uint32_t q[4];
          const float d = half_to_f32(load_block_u16_then<4>(rows[i] + size_t(b) * sizeof(BlockQ4_0), q));
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            s = __dp4a(int(q[k] & 0x0f0f0f0fu), x[k], s);             // values 4k..4k+3
            s = __dp4a(int((q[k] >> 4) & 0x0f0f0f0fu), x[4 + k], s);  // values 16+4k..
          }
          // sum (code - 8) * x = xd * s - 8 * xd * sum(xq)
          acc[i] = fmaf(d, fmaf(xd, float(s), -8.0f * xs), acc[i]);
        }
      }
    }
  } else {  // Q4_K. Lane = (super-block, pair of 32-value sub-blocks): 8 super-blocks per warp step.
    const int nsb = a.cols / kQK_K, jp = lane & 3;
    for (int sb = lane >> 2; sb < nsb; sb += 8) {
      const int xb = sb * 8 + 2 * jp;
      int x0[8], x1[8];
      load_xq(a.xq, xb, x0);
      load_xq(a.xq, xb + 1, x1);
      const float xd0 = __ldg(a.xd + xb), xd1 = __ldg(a.xd + xb + 1);
      const float xs0 = __ldg(a.xs + xb), xs1 = __ldg(a.xs + xb + 1);
#pragma unroll
      for (int i = 0; i < R; ++i) {
        const uint8_t* blk = rows[i] + size_t(sb) * sizeof(BlockQ4_K);  // 144 bytes: 16-byte aligned
        const uint4 h = __ldg(reinterpret_cast<const uint4*>(blk));     // d, dmin, scales[0..11]
        const uint4 q0 = __ldg(reinterpret_cast<const uint4*>(blk + 16 + 32 * jp));
        const uint4 q1 = __ldg(reinterpret_cast<const uint4*>(blk + 32 + 32 * jp));
        const uint32_t s0 = h.y, s1 = h.z, s2 = h.w;
        auto byte = [&](int k) -> uint32_t {
          const uint32_t w = k < 4 ? s0 : (k < 8 ? s1 : s2);
          return (w >> (8 * (k & 3))) & 0xff;
        };
        uint8_t sc_lo, m_lo, sc_hi, m_hi;
        k_scale_min_at(2 * jp, byte, sc_lo, m_lo);
        k_scale_min_at(2 * jp + 1, byte, sc_hi, m_hi);
        const uint32_t q[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
        int slo = 0, shi = 0;
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          slo = __dp4a(int(q[k] & 0x0f0f0f0fu), x0[k], slo);
          shi = __dp4a(int((q[k] >> 4) & 0x0f0f0f0fu), x1[k], shi);
        }
        const float d = half_to_f32(h.x & 0xffff), dmin = half_to_f32(h.x >> 16);
        const float pos = float(sc_lo) * xd0 * float(slo) + float(sc_hi) * xd1 * float(shi);
        const float neg = float(m_lo) * xs0 + float(m_hi) * xs1;
        acc[i] += d * pos - dmin * neg;
      }
    }
  }
#pragma unroll
  for (int i = 0; i < R; ++i) {
    const float v = warp_sum(acc[i]) * scale;
    if constexpr (RES) {
      if (lane == 0) dots[(threadIdx.x / 32) * R + i] = v;
    } else {
      if (lane == 0 && r0 + i < a.rows) a.y[r0 + i] = v;
    }
  }
  if constexpr (RES) {
    __syncthreads();
    residual_epilogue(a, dots);
  }
}

template <GgmlType T>
cudaError_t launch_quant(const GemvArgs& a, int rows_per_warp, cudaStream_t st) {
  if (a.res) {
    switch (rows_per_warp) {
      case 1: return launch_pdl(gemv_quant_kernel<T, 1, true>, a.rows / 32, 32 * 32, st, a);
      case 2: return launch_pdl(gemv_quant_kernel<T, 2, true>, a.rows / 32, 32 * 16, st, a);
      default: return launch_pdl(gemv_quant_kernel<T, 4, true>, a.rows / 32, 32 * 8, st, a);
    }
  }
  const int per_block = kRowsPerBlock * rows_per_warp, grid = (a.rows + per_block - 1) / per_block;
  switch (rows_per_warp) {
    case 1: return launch_pdl(gemv_quant_kernel<T, 1, false>, grid, kThreads, st, a);
    case 2: return launch_pdl(gemv_quant_kernel<T, 2, false>, grid, kThreads, st, a);
    default: return launch_pdl(gemv_quant_kernel<T, 4, false>, grid, kThreads, st, a);
  }
}

int g_rows_per_warp = 0;  // 0: by shape
// The staged kernel where it fits (KVTAX_GEMV_STAGED=0: the register-fed one, for A/B).
bool g_staged = [] {
  const char* e = std::getenv("KVTAX_GEMV_STAGED");
  return !e || std::string(e) != "0";
}();

}  // namespace

void set_gemv_rows_per_warp(int r) { g_rows_per_warp = r; }
void set_gemv_staged(bool on) { g_staged = on; }

bool staged_gemv_taken(const GemvArgs& a) { return g_staged && g_rows_per_warp == 0 && staged_gemv_fits(a); }

cudaError_t launch_gemv(const GemvArgs& a, cudaStream_t st) {
  if (a.silu_pairs && quantizes_x(a.type) && !staged_gemv_taken(a)) return cudaErrorInvalidValue;
  if (quantizes_x(a.type)) {
    if (!a.x_ready) {
      if (cudaError_t e = launch_pdl(quantize_x, (a.cols + 255) / 256, 256, st, a.x, a.x_mul, a.cols, a.xq, a.xd, a.xs);
          e != cudaSuccess)
        return e;
    }
  } else if (a.x_mul || a.x_ready) {
    return cudaErrorInvalidValue;  // float weights multiply x as it is
  }
  if (staged_gemv_taken(a)) return launch_gemv_staged(a, st);
  // Rows per warp for the quantized kernels: more rows reuse x more but leave fewer warps in flight. On the
  // H200 (2026-11-30, bench/gpu part a) 2 rows helped Q4_K on 14336x4096 (44 -> 51% of copy bandwidth) and 1
  // row was best for Q8_0 and Q4_0 (2 and 4 rows lost up to 20%).
  const int rpw = g_rows_per_warp > 0 ? g_rows_per_warp : (a.type == GgmlType::Q4_K ? 2 : 1);
  switch (a.type) {
    case GgmlType::F32: return launch_float<GgmlType::F32>(a, st);
    case GgmlType::F16: return launch_float<GgmlType::F16>(a, st);
    case GgmlType::BF16: return launch_float<GgmlType::BF16>(a, st);
    case GgmlType::Q8_0: return launch_quant<GgmlType::Q8_0>(a, rpw, st);
    case GgmlType::Q4_0: return launch_quant<GgmlType::Q4_0>(a, rpw, st);
    case GgmlType::Q4_K: return launch_quant<GgmlType::Q4_K>(a, rpw, st);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace kvtax::cuda::detail
