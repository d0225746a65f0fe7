// KV encode: one warp per (token, KV head, K or V) row. The row is staged in shared memory, rotated
// there for the rotated codecs (the CPU's butterfly order, so the same floats), encoded by the steps of
// the CPU encoder in kv/codecs/*.cpp, and written out as whole 4-byte words.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda/attention_launch.h"
#include "cuda/block_scan.cuh"
#include "cuda/kv_encode.h"
#include "cuda/kv_encode_launch.h"
#include "cuda/mma.cuh"
#include "cuda/pdl.cuh"
#include "cuda/rope.cuh"
#include "cuda/rotate_regs.cuh"
#include "kv/codecs/layout.h"

namespace kvtax::cuda::detail {

namespace {

using kv::CodecId;
constexpr int kWarps = 4, kMaxD = 256, kMaxRow = kMaxD * 4 + 16;

// The 32 lanes' sums added as tq.cpp's warp_order_sum does: a butterfly, each pair's sum the same on both lanes.
__device__ __forceinline__ double warp_sum_ordered(double v) {
  for (int o = 16; o > 0; o >>= 1) v = __dadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ uint16_t f2h(float f) { return __half_as_ushort(__float2half_rn(f)); }

__device__ uint16_t f2bf(float f) {  // core/f16.h's f32_to_bf16
  uint32_t x = __float_as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40);
  x += 0x7fff + ((x >> 16) & 1);
  return uint16_t(x >> 16);
}

__device__ uint8_t f2e4m3(float x) {  // kv/codecs/fp8.cpp's f32_to_e4m3
  if (!(x == x)) return 0;
  const uint8_t sign = signbit(x) ? 0x80 : 0;
  const float a = fminf(fabsf(x), 448.0f);
  if (a < 0.015625f) return uint8_t(sign | int(rintf(__fmul_rn(a, 512.0f))));
  int e;
  const float f = frexpf(a, &e);
  int m = int(rintf(__fmul_rn(__fsub_rn(__fmul_rn(f, 2.0f), 1.0f), 8.0f)));
  int be = e - 1 + 7;
  if (m == 8) { m = 0; ++be; }
  if (be > 15 || (be == 15 && m > 6)) { be = 15; m = 6; }
  return uint8_t(sign | (be << 3) | m);
}

__device__ __forceinline__ bool finite(float v) { return isfinite(v); }

// rotation.cpp's rotate() of x (D floats: a row in shared memory, or the warp's q row in global memory) in registers,
// D / 32 values per lane (rotate_regs.cuh: the same steps in the same order). The butterflies through shared memory,
// a warp barrier per step, made the rotated codecs' prefill encode 2.5x fp8's (H200, 2026-12-01).
template <int D>
__device__ __forceinline__ void rotate_row(float* x, const float* signs, int lane) {
  constexpr int kPer = D / 32;
  float v[kPer];
#pragma unroll
  for (int k = 0; k < kPer; ++k) v[k] = x[kPer * lane + k];
  rotate_warp<D>(v, signs, lane, 1.0f / sqrtf(float(D)));
#pragma unroll
  for (int k = 0; k < kPer; ++k) x[kPer * lane + k] = v[k];
  __syncwarp();
}

// x (d floats in shared memory) -> row bytes in shared memory. All 32 lanes call it. The codec and, for the head
// widths of the models served (D > 0), the width are compile-time: a kernel that switched on both at run time spent
// ~930 instructions per row on the switch, index arithmetic and loops of unknown length (ncu, H200, 2026-12-01).
template <CodecId C, int D>
__device__ void encode_row(int d_rt, float* x, uint8_t* row, uint8_t* codes, const EncodeTables& t) {
  constexpr CodecId c = C;
  const int d = D > 0 ? D : d_rt;
  const int lane = threadIdx.x & 31;
  constexpr bool rotated = kv::layout::rotated(c);
  if constexpr (rotated && D > 0) {
    rotate_row<D>(x, t.signs, lane);
  } else if (rotated) {  // rotation.cpp's rotate()
    for (int i = lane; i < d; i += 32) x[i] = __fmul_rn(x[i], t.signs[i]);
    __syncwarp();
    for (int len = 1; len < d; len <<= 1) {
      for (int j = lane; j < d / 2; j += 32) {
        const int i = (j / len) * 2 * len + (j % len);
        const float a = x[i], b = x[i + len];
        x[i] = __fadd_rn(a, b);
        x[i + len] = __fsub_rn(a, b);
      }
      __syncwarp();
    }
    const float n = 1.0f / sqrtf(float(d));
    for (int i = lane; i < d; i += 32) x[i] = __fmul_rn(x[i], n);
    __syncwarp();
  }
  switch (c) {
    case CodecId::f32:
      for (int i = lane; i < d; i += 32) reinterpret_cast<float*>(row)[i] = x[i];
      break;
    case CodecId::f16:
      for (int i = lane; i < d; i += 32) reinterpret_cast<uint16_t*>(row)[i] = f2h(x[i]);
      break;
    case CodecId::bf16:
      for (int i = lane; i < d; i += 32) reinterpret_cast<uint16_t*>(row)[i] = f2bf(x[i]);
      break;
    case CodecId::fp8: {
      float amax = 0.0f;
      for (int i = lane; i < d; i += 32)
        if (finite(x[i])) amax = fmaxf(amax, fabsf(x[i]));
      amax = warp_max(amax);
      const float scale = amax / 448.0f, inv = scale > 0 ? 1.0f / scale : 0.0f;
      if (lane == 0) *reinterpret_cast<float*>(row) = scale;
      for (int i = lane; i < d; i += 32) row[4 + i] = f2e4m3(__fmul_rn(x[i], inv));
      break;
    }
    case CodecId::q8: {  // lane l of a 32-value block: value l; blocks one after another
      int8_t* q = reinterpret_cast<int8_t*>(row + 2 * (d / 32));
      for (int b = 0; b < d / 32; ++b) {
        const float v = x[32 * b + lane];
        const float amax = warp_max(finite(v) ? fabsf(v) : 0.0f);
        const uint16_t h = f2h(fminf(amax / 127.0f, 65504.0f));
        if (lane == 0) reinterpret_cast<uint16_t*>(row)[b] = h;
        const float s = __half2float(__ushort_as_half(h)), inv = s > 0 ? 1.0f / s : 0.0f;
        float r = __fmul_rn(v, inv);
        r = r == r ? fminf(fmaxf(r, -127.0f), 127.0f) : 0.0f;
        q[32 * b + lane] = int8_t(rintf(r));
      }
      break;
    }
    case CodecId::q4:
    case CodecId::q4r: {
      uint8_t* q = row + 2 * (d / 32);
      for (int b = 0; b < d / 32; ++b) {
        const float v = x[32 * b + lane];
        // The value of largest magnitude, the first one on ties (the CPU keeps the first strict maximum).
        float am = finite(v) ? fabsf(v) : 0.0f;
        int idx = lane;
        for (int o = 16; o > 0; o >>= 1) {
          const float am2 = __shfl_xor_sync(0xffffffffu, am, o);
          const int idx2 = __shfl_xor_sync(0xffffffffu, idx, o);
          if (am2 > am || (am2 == am && idx2 < idx)) { am = am2; idx = idx2; }
        }
        const float vmax = am > 0.0f ? x[32 * b + idx] : 0.0f;
        const float s0 = fminf(fmaxf(vmax / -8.0f, -65504.0f), 65504.0f);
        const uint16_t h = f2h(s0);
        if (lane == 0) reinterpret_cast<uint16_t*>(row)[b] = h;
        const float s = __half2float(__ushort_as_half(h)), inv = s != 0 ? 1.0f / s : 0.0f;
        float r = __fmul_rn(v, inv);
        r = r == r ? fminf(fmaxf(r, -8.0f), 7.0f) : 0.0f;
        codes[32 * b + lane] = uint8_t(int(rintf(r)) + 8);
        __syncwarp();
        if (lane < 16) q[16 * b + lane] = uint8_t(codes[32 * b + lane] | (codes[32 * b + lane + 16] << 4));
        __syncwarp();
      }
      break;
    }
    case CodecId::tq4:
    case CodecId::tq3: {  // kv/codecs/tq.cpp's encode_codes, its sums in the same order (warp_order_sum)
      const int K = c == CodecId::tq4 ? 16 : 8;
      // The thresholds in registers (past the last one: +inf, never crossed) and level k in lane k: a code is 15
      // compares and a level one shuffle, where loads from the tables made every value a chain of them.
      float thr[15];
#pragma unroll
      for (int k = 0; k < 15; ++k) thr[k] = k + 1 < K ? t.thresholds[k] : INFINITY;
      const float lane_level = t.levels[lane % K];
      double n2 = 0;
      for (int i = lane; i < d; i += 32)
        if (finite(x[i])) n2 = __dadd_rn(n2, __dmul_rn(double(x[i]), double(x[i])));
      n2 = warp_sum_ordered(n2);
      const bool zero = !(n2 > 0) || !isfinite(n2);
      const float to_unit = zero ? 0.0f : float(sqrt(double(d)) / sqrt(n2));
      double c2 = 0;
      for (int i = lane; i < d; i += 32) {
        int code = K / 2;
        if (!zero) {
          const float u = finite(x[i]) ? __fmul_rn(x[i], to_unit) : 0.0f;
          code = 0;
#pragma unroll
          for (int k = 0; k < 15; ++k) code += u > thr[k];
        }
        codes[i] = uint8_t(code);
        const double l = __shfl_sync(0xffffffffu, lane_level, code);
        c2 = __dadd_rn(c2, __dmul_rn(l, l));
      }
      c2 = warp_sum_ordered(c2);
      __syncwarp();
      if (lane == 0) *reinterpret_cast<float*>(row) = zero ? 0.0f : float(sqrt(n2) / sqrt(c2));
      if (c == CodecId::tq4) {
        for (int i = 2 * lane; i < d; i += 64) row[4 + i / 2] = uint8_t(codes[i] | (codes[i + 1] << 4));
      } else {
        for (int g = lane; g < d / 8; g += 32) {
          uint32_t bits = 0;
          for (int j = 0; j < 8; ++j) bits |= uint32_t(codes[8 * g + j]) << (3 * j);
          row[4 + 3 * g] = uint8_t(bits);
          row[5 + 3 * g] = uint8_t(bits >> 8);
          row[6 + 3 * g] = uint8_t(bits >> 16);
        }
      }
      break;
    }
    default:
      break;
  }
  __syncwarp();
}

template <CodecId C, int D>
__global__ void __launch_bounds__(kWarps * 32) encode_kernel(EncodeArgs a) {
  __shared__ float xs[kWarps][kMaxD];
  __shared__ __align__(16) uint8_t rows[kWarps][kMaxRow];
  __shared__ uint8_t codes[kWarps][kMaxD];
  pdl_trigger();  // every block is resident: the attention may launch and prefetch its first tiles
  // Before the wait, what no kernel before this one writes (positions and page tables come from the host before the
  // step's first kernel; the RoPE tables are constant): the row, its destination and this lane's rotary angles. Found
  // after the wait, they put a chain of dependent loads and the angles' arithmetic between the GEMV's end and the
  // attention's start (trace, H200, session 19: the encode added 4.6-8.1 us to each layer).
  const int w = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int per_tok = a.n_kv * (a.v ? 2 : 1);
  const int r = blockIdx.x * kWarps + w;
  const bool kv_row = r < a.n_tok * per_tok;
  const int qr = r - a.n_tok * per_tok;  // past the K/V rows: q heads to rotate, if any
  if (!kv_row && (!a.rope || qr >= a.n_tok * a.n_q)) return;  // whole warps
  const int t = kv_row ? r / per_tok : qr / a.n_q;
  const int rem = r % per_tok, is_v = kv_row && rem >= a.n_kv ? 1 : 0, h = rem % a.n_kv;
  const int pos = a.pos_dev ? a.pos_dev[t] : a.pos0 + t;
  constexpr int kPairs = kMaxD / 2 / 32;  // rotary pairs per lane at most
  float2 cs[kPairs];
  const bool rotate = a.rope && (!kv_row || !is_v);
  if (rotate) {
#pragma unroll
    for (int j = 0; j < kPairs; ++j)
      if (lane + 32 * j < a.rp.dim / 2) cs[j] = rope_cos_sin(lane + 32 * j, pos, a.rp);
  }
  uint8_t* dst = nullptr;
  if (kv_row) {
    if (a.pages) {
      dst = a.pool + size_t(a.pages[pos >> kPageShift]) * a.page_bytes + (is_v ? a.v_offset : 0) +
            size_t(h) * a.head_stride + size_t(pos & (kPageTokens - 1)) * a.row_bytes;
    } else {
      dst = a.rows + size_t(t) * a.row_bytes;
    }
  }
  pdl_wait();  // k, v and q come from the kernels before this one
  if (!kv_row) {
    float* qv = a.q + size_t(qr) * a.d;
#pragma unroll
    for (int j = 0; j < kPairs; ++j)
      if (lane + 32 * j < a.rp.dim / 2) rope_rotate(qv, lane + 32 * j, cs[j], a.rp);
    if constexpr (D > 0) {
      if (a.rotate_q) {
        __syncwarp();  // the row's rotary pairs are written
        rotate_row<D>(qv, a.t.signs, lane);
      }
    }
    return;
  }
  const float* src = (is_v ? a.v : a.k) + (size_t(t) * a.n_kv + h) * a.d;
  for (int i = lane; i < a.d; i += 32) xs[w][i] = src[i];
  __syncwarp();
  if (rotate) {
#pragma unroll
    for (int j = 0; j < kPairs; ++j)
      if (lane + 32 * j < a.rp.dim / 2) rope_rotate(xs[w], lane + 32 * j, cs[j], a.rp);
    __syncwarp();
  }
  encode_row<C, D>(a.d, xs[w], rows[w], codes[w], a.t);
  const uint32_t* s = reinterpret_cast<const uint32_t*>(rows[w]);
  for (int i = lane; i < int(a.row_bytes / 4); i += 32) reinterpret_cast<uint32_t*>(dst)[i] = s[i];
}

}  // namespace

cudaError_t launch_encode(const EncodeArgs& a, cudaStream_t s) {
  if (a.d > kMaxD || a.d % 32 != 0 || a.row_bytes > kMaxRow || a.row_bytes % 4 != 0) return cudaErrorInvalidValue;
  if (a.rope && (a.rp.dim < 2 || a.rp.dim > a.d || !a.q || a.n_q < 1 || !a.v)) return cudaErrorInvalidValue;
  if (a.rotate_q && (!a.rope || !q_rotation_fuses(a.codec, a.d))) return cudaErrorInvalidValue;
  const int n_rows = a.n_tok * (a.n_kv * (a.v ? 2 : 1) + (a.rope ? a.n_q : 0));
  if (n_rows == 0) return cudaSuccess;
  auto go = [&]<CodecId C, int D>() {
    return launch_pdl(encode_kernel<C, D>, (n_rows + kWarps - 1) / kWarps, kWarps * 32, s, a);
  };
  if (a.d == 64 || a.d == 128 || a.d == 256) return dispatch(AllCodecs{}, Dims<64, 128, 256>{}, a.codec, a.d, go);
  return dispatch(AllCodecs{}, Dims<0>{}, a.codec, 0, go);  // other widths: d at run time
}

}  // namespace kvtax::cuda::detail
