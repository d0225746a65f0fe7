// Tensor-core prefill attention (prefill_attention.h). Block: 8 warps, 128 rows of one GQA group taken
// position-major (row r = position r / n_rep, query head r % n_rep of the group), so the whole block shares
// one causal extent and each decoded K/V tile serves every query head of the group. Warp w owns rows
// 16w..16w+15: its Q fragments stay in registers, S = Q K^T and O += P V go through mma.sync m16n8k16, and
// the S accumulators become the A operand of P V without leaving registers. Scores are in base 2 (q is
// pre-scaled by log2 e / sqrt(d)).
//
// Fragment layout of m16n8k16 (PTX ISA), lane = 4 g + c: A regs {row g | row g+8} x {cols 2c,2c+1 | +8};
// B regs: k rows 2c,2c+1 (+8) of column g; C: rows g / g+8, columns 2c, 2c+1.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda/attention_launch.h"
#include "cuda/prefill_launch.h"
#include "kv/codecs/layout.h"

namespace kvtax::cuda::detail {
namespace {

using kv::CodecId;
namespace layout = kv::layout;

constexpr int kWarps = 8, kThreads = 32 * kWarps, kRows = 16 * kWarps, kTile = 64;
constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return uint32_t(__half_as_ushort(h.x)) | (uint32_t(__half_as_ushort(h.y)) << 16);
}

__device__ __forceinline__ void mma_16816(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm(  // not volatile: the compiler may interleave independent products and their shared-memory loads
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t lds32(const __half* p) { return *reinterpret_cast<const uint32_t*>(p); }

// Decodes tokens k0 .. k0+kTile-1 of KV head h (zeros past kend) into k_s [token][d] and vt_s [d][token].
// A tile never crosses a page (k0 is a multiple of kTile, which divides kPageTokens): one page-table load per
// tile. Every load of the thread is issued before any conversion (no branch: tokens past kend re-read the last
// row and get scale 0), so a tile costs about two round trips to memory instead of one per unit.
template <CodecId C, int D, int KS, int VS>
__device__ __forceinline__ void decode_tile(const PrefillArgs& a, const uint8_t* kh, int k0, int kend,
                                            const float* lv, __half* k_s, __half* vt_s) {
  constexpr int kUnits = D / layout::kUnit, kIters = kTile * kUnits / kThreads;
  static_assert(kPageTokens % kTile == 0 && kTile * kUnits % kThreads == 0);
  const int tid = threadIdx.x;
  const uint8_t* page = kh + size_t(__ldg(a.pages + (k0 >> kPageShift))) * a.page_bytes;
  const uint8_t* base = page + size_t(k0 & (kPageTokens - 1)) * a.row_bytes;
  float yk[kIters][8], yv[kIters][8], sk[kIters], sv[kIters];
#pragma unroll
  for (int i = 0; i < kIters; ++i) {
    const int idx = tid + i * kThreads;
    // K: consecutive threads take consecutive units of one token (coalesced rows).
    const int kk = idx / kUnits, ku = idx % kUnits;
    sk[i] = layout::unit_decode<C>(base + size_t(min(kk, kend - 1 - k0)) * a.row_bytes, D, ku, lv, yk[i]);
    if (k0 + kk >= kend) sk[i] = 0.0f;
    // V: consecutive threads take consecutive tokens of one unit (stores along a row of vt_s).
    const int vk = idx % kTile, vu = idx / kTile;
    sv[i] = layout::unit_decode<C>(base + a.v_offset + size_t(min(vk, kend - 1 - k0)) * a.row_bytes, D, vu, lv, yv[i]);
    if (k0 + vk >= kend) sv[i] = 0.0f;
  }
#pragma unroll
  for (int i = 0; i < kIters; ++i) {
    const int idx = tid + i * kThreads;
    const int kk = idx / kUnits, ku = idx % kUnits, vk = idx % kTile, vu = idx / kTile;
    const float s = sk[i];
    uint4 p;
    p.x = pack_half2(yk[i][0] * s, yk[i][1] * s);
    p.y = pack_half2(yk[i][2] * s, yk[i][3] * s);
    p.z = pack_half2(yk[i][4] * s, yk[i][5] * s);
    p.w = pack_half2(yk[i][6] * s, yk[i][7] * s);
    *reinterpret_cast<uint4*>(k_s + kk * KS + ku * 8) = p;
#pragma unroll
    for (int k = 0; k < 8; ++k) vt_s[(vu * 8 + k) * VS + vk] = __float2half_rn(yv[i][k] * sv[i]);
  }
}

// grid (n_kv_heads, row tiles); the tiles with the most keys start first.
template <CodecId C, int D>
__global__ void __launch_bounds__(kThreads) prefill_kernel(PrefillArgs a) {
  constexpr int KS = D + 8, VS = kTile + 8;  // padded strides (halves): conflict-free fragment loads
  __shared__ __align__(16) __half k_s[kTile * KS];
  __shared__ __align__(16) __half vt_s[D * VS];
  __shared__ float lv[16];

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, c = lane % 4;
  const int h = blockIdx.x, n_heads = a.n_kv_heads * a.n_rep;
  const int n_rows = a.n_tok * a.n_rep;
  const int r_block = (gridDim.y - 1 - blockIdx.y) * kRows, r_warp = r_block + warp * 16;
  // Rows past the chunk compute as copies of its last row and are not stored.
  auto pos_of = [&](int r) { return a.pos0 + min(r, n_rows - 1) / a.n_rep; };
  auto q_of = [&](int r) {
    r = min(r, n_rows - 1);
    return a.q + (size_t(r / a.n_rep) * n_heads + size_t(h) * a.n_rep + r % a.n_rep) * D;
  };
  const int pa = pos_of(r_warp + g), pb = pos_of(r_warp + g + 8);
  const int warp_min = pos_of(r_warp), warp_max = pos_of(r_warp + 15);
  const int kend = pos_of(r_block + kRows - 1) + 1;
  if (tid < 16) lv[tid] = tid < a.n_levels ? a.levels[tid] : 0.0f;

  uint32_t qf[D / 16][4];
  {
    const float qs = rsqrtf(float(D)) * kLog2e;
    const float *qa = q_of(r_warp + g), *qb = q_of(r_warp + g + 8);
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      const int d0 = ks * 16 + 2 * c;
      const float2 x0 = *reinterpret_cast<const float2*>(qa + d0), x1 = *reinterpret_cast<const float2*>(qb + d0);
      const float2 x2 = *reinterpret_cast<const float2*>(qa + d0 + 8);
      const float2 x3 = *reinterpret_cast<const float2*>(qb + d0 + 8);
      qf[ks][0] = pack_half2(x0.x * qs, x0.y * qs);
      qf[ks][1] = pack_half2(x1.x * qs, x1.y * qs);
      qf[ks][2] = pack_half2(x2.x * qs, x2.y * qs);
      qf[ks][3] = pack_half2(x3.x * qs, x3.y * qs);
    }
  }
  float o[D / 8][4];
#pragma unroll
  for (int dn = 0; dn < D / 8; ++dn) o[dn][0] = o[dn][1] = o[dn][2] = o[dn][3] = 0.0f;
  float ma = -INFINITY, mb = -INFINITY, la = 0.0f, lb = 0.0f;

  const uint8_t* kh = a.pool + size_t(h) * a.head_stride;
  for (int k0 = 0; k0 < kend; k0 += kTile) {
    __syncthreads();  // the previous tile is consumed (and lv is written before the first)
    decode_tile<C, D, KS, VS>(a, kh, k0, kend, lv, k_s, vt_s);
    __syncthreads();
    if (k0 > warp_max) continue;  // every key of this tile is in the future of this warp's rows
    // Independent accumulators innermost: consecutive products do not wait on each other (a chain of
    // dependent mma.sync runs at its latency, ~8x under the issue rate: 83 TFLOP/s at 32k on the H200).
    float s[kTile / 8][4];
#pragma unroll
    for (int nt = 0; nt < kTile / 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks)
#pragma unroll
      for (int nt = 0; nt < kTile / 8; ++nt) {
        const __half* kr = k_s + (nt * 8 + g) * KS + 2 * c + ks * 16;
        mma_16816(s[nt], qf[ks], lds32(kr), lds32(kr + 8));
      }
    if (k0 + kTile - 1 > warp_min) {  // causal mask (also covers the zero rows past kend)
#pragma unroll
      for (int nt = 0; nt < kTile / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (k0 + nt * 8 + 2 * c + (e & 1) > (e < 2 ? pa : pb)) s[nt][e] = -INFINITY;
    }
    float mxa = -INFINITY, mxb = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < kTile / 8; ++nt) {
      mxa = fmaxf(mxa, fmaxf(s[nt][0], s[nt][1]));
      mxb = fmaxf(mxb, fmaxf(s[nt][2], s[nt][3]));
    }
#pragma unroll
    for (int off = 1; off <= 2; off <<= 1) {
      mxa = fmaxf(mxa, __shfl_xor_sync(0xffffffffu, mxa, off));
      mxb = fmaxf(mxb, __shfl_xor_sync(0xffffffffu, mxb, off));
    }
    // Key 0 is in the first tile and every row sees it, so the running maxima are finite from there on.
    const float na = fmaxf(ma, mxa), nb = fmaxf(mb, mxb);
    const float ca = exp2f(ma - na), cb = exp2f(mb - nb);
    ma = na;
    mb = nb;
    la *= ca;
    lb *= cb;
#pragma unroll
    for (int dn = 0; dn < D / 8; ++dn) {
      o[dn][0] *= ca;
      o[dn][1] *= ca;
      o[dn][2] *= cb;
      o[dn][3] *= cb;
    }
    uint32_t pf[kTile / 16][4];
#pragma unroll
    for (int nt = 0; nt < kTile / 8; ++nt) {
      const float p0 = exp2f(s[nt][0] - na), p1 = exp2f(s[nt][1] - na);
      const float p2 = exp2f(s[nt][2] - nb), p3 = exp2f(s[nt][3] - nb);
      la += p0 + p1;
      lb += p2 + p3;
      pf[nt / 2][(nt % 2) * 2] = pack_half2(p0, p1);
      pf[nt / 2][(nt % 2) * 2 + 1] = pack_half2(p2, p3);
    }
#pragma unroll
    for (int kk = 0; kk < kTile / 16; ++kk)
#pragma unroll
      for (int dn = 0; dn < D / 8; ++dn) {
        const __half* vr = vt_s + (dn * 8 + g) * VS + 2 * c + kk * 16;
        mma_16816(o[dn], pf[kk], lds32(vr), lds32(vr + 8));
      }
  }
#pragma unroll
  for (int off = 1; off <= 2; off <<= 1) {
    la += __shfl_xor_sync(0xffffffffu, la, off);
    lb += __shfl_xor_sync(0xffffffffu, lb, off);
  }
  const float ia = 1.0f / la, ib = 1.0f / lb;
  const int ra = r_warp + g, rb = ra + 8;
  float* oa = ra < n_rows ? a.out + (q_of(ra) - a.q) : nullptr;
  float* ob = rb < n_rows ? a.out + (q_of(rb) - a.q) : nullptr;
#pragma unroll
  for (int dn = 0; dn < D / 8; ++dn) {
    const int d0 = dn * 8 + 2 * c;
    if (oa) *reinterpret_cast<float2*>(oa + d0) = make_float2(o[dn][0] * ia, o[dn][1] * ia);
    if (ob) *reinterpret_cast<float2*>(ob + d0) = make_float2(o[dn][2] * ib, o[dn][3] * ib);
  }
}

// One warp per row: the butterfly of kv/rotation.cpp in shared memory.
template <int D>
__global__ void __launch_bounds__(256) rotate_rows_kernel(float* x, int64_t rows, const float* signs, bool inverse) {
  __shared__ float buf[8][D];
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t r = int64_t(blockIdx.x) * 8 + w;
  if (r >= rows) return;  // whole warps
  float* v = buf[w];
  float* xr = x + r * D;
  for (int i = lane; i < D; i += 32) v[i] = inverse ? xr[i] : xr[i] * signs[i];
  __syncwarp();
  for (int len = 1; len < D; len <<= 1) {
    for (int j = lane; j < D / 2; j += 32) {
      const int i = (j / len) * 2 * len + (j % len);
      const float p = v[i], q = v[i + len];
      v[i] = p + q;
      v[i + len] = p - q;
    }
    __syncwarp();
  }
  const float n = rsqrtf(float(D));
  for (int i = lane; i < D; i += 32) xr[i] = inverse ? v[i] * n * signs[i] : v[i] * n;
}

template <CodecId C>
cudaError_t launch_codec(const PrefillArgs& a, cudaStream_t s) {
  const int tiles = (a.n_tok * a.n_rep + kRows - 1) / kRows;
  const dim3 grid(a.n_kv_heads, tiles);
  if (a.head_dim == 64) prefill_kernel<C, 64><<<grid, kThreads, 0, s>>>(a);
  else if (a.head_dim == 128) prefill_kernel<C, 128><<<grid, kThreads, 0, s>>>(a);
  else return cudaErrorInvalidValue;
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_prefill(const PrefillArgs& a, cudaStream_t s) {
  if (a.n_tok <= 0) return cudaSuccess;
  switch (a.codec) {
    case CodecId::f32: return launch_codec<CodecId::f32>(a, s);
    case CodecId::f16: return launch_codec<CodecId::f16>(a, s);
    case CodecId::bf16: return launch_codec<CodecId::bf16>(a, s);
    case CodecId::fp8: return launch_codec<CodecId::fp8>(a, s);
    case CodecId::q8: return launch_codec<CodecId::q8>(a, s);
    case CodecId::q4: return launch_codec<CodecId::q4>(a, s);
    case CodecId::q4r: return launch_codec<CodecId::q4r>(a, s);
    case CodecId::tq4: return launch_codec<CodecId::tq4>(a, s);
    case CodecId::tq3: return launch_codec<CodecId::tq3>(a, s);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t launch_rotate_rows(float* x, int64_t rows, int d, const float* signs, bool inverse, cudaStream_t s) {
  if (rows <= 0) return cudaSuccess;
  const unsigned grid = unsigned((rows + 7) / 8);
  switch (d) {
    case 64: rotate_rows_kernel<64><<<grid, 256, 0, s>>>(x, rows, signs, inverse); break;
    case 128: rotate_rows_kernel<128><<<grid, 256, 0, s>>>(x, rows, signs, inverse); break;
    case 256: rotate_rows_kernel<256><<<grid, 256, 0, s>>>(x, rows, signs, inverse); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace kvtax::cuda::detail
