// Tensor-core prefill attention (prefill_attention.h). Block: 8 warps, 128 rows of one GQA group taken
// position-major (row r = position r / n_rep, query head r % n_rep of the group), so the whole block shares
// one causal extent and each decoded K/V tile serves every query head of the group. Warp w owns rows
// 16w..16w+15: its Q fragments stay in registers, S = Q K^T and O += P V go through mma.sync m16n8k16, and
// the S accumulators become the A operand of P V without leaving registers. Scores are in base 2 (q is
// pre-scaled by log2 e / sqrt(d)).
//
// Pipeline per 64-key tile: the raw codec bytes of the NEXT tile's K and V rows are copied to shared memory
// with cp.async while this tile is decoded (shared -> shared, f16) and multiplied, so the tile loads' memory
// latency hides behind the tensor-core work instead of stalling the block. Fragments come from the f16 tiles
// through ldmatrix (V row-major, read transposed by ldmatrix.trans).
// Fragment layouts: cuda/mma.cuh.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda/attention_launch.h"
#include "cuda/mma.cuh"
#include "cuda/prefill_launch.h"
#include "kv/codecs/layout.h"

namespace kvtax::cuda::detail {
namespace {

using kv::CodecId;
namespace layout = kv::layout;

constexpr int kWarps = 8, kThreads = 32 * kWarps, kRows = 16 * kWarps, kTile = 64;
constexpr float kLog2e = 1.4426950408889634f;

// Raw bytes of one tile in shared memory: kTile K rows, then kTile V rows (row_bytes each, 16-byte multiple
// in total since kTile * row_bytes is).
__host__ __device__ constexpr size_t raw_tile_bytes(size_t row_bytes) { return 2 * kTile * row_bytes; }

// Starts the copy of tokens k0 .. k0+kTile-1 of KV head h into `raw`. A tile never crosses a page (k0 is a
// multiple of kTile, which divides kPageTokens): one page-table load per tile. Rows past the cache's length
// are copied too (the page holds them) and zeroed when decoded.
__device__ __forceinline__ void issue_tile(const PrefillArgs& a, const uint8_t* kh, int k0, uint8_t* raw) {
  const uint8_t* page = kh + size_t(__ldg(a.pages + (k0 >> kPageShift))) * a.page_bytes;
  const uint8_t* base = page + size_t(k0 & (kPageTokens - 1)) * a.row_bytes;
  const int n16 = int(kTile * a.row_bytes / 16);
  for (int i = threadIdx.x; i < n16; i += kThreads) {
    cp_async16(smem_addr(raw + 16 * i), base + 16 * i);
    cp_async16(smem_addr(raw + kTile * a.row_bytes + 16 * i), base + a.v_offset + 16 * i);
  }
}

// Decodes a raw tile into k_s / v_s [token][d] as f16 with the unit's factor applied; keys at or past kend
// become zeros (their bytes may be anything, NaN included, and P V would carry a NaN even at weight 0).
template <CodecId C, int D, int S>
__device__ __forceinline__ void decode_tile(const uint8_t* raw, size_t row_bytes, int k0, int kend,
                                            const float* lv, __half* k_s, __half* v_s) {
  constexpr int kUnits = D / layout::kUnit, kIters = 2 * kTile * kUnits / kThreads;
  static_assert(kPageTokens % kTile == 0 && 2 * kTile * kUnits % kThreads == 0);
#pragma unroll
  for (int i = 0; i < kIters; ++i) {
    const int idx = threadIdx.x + i * kThreads;  // consecutive threads: consecutive units of one row
    const int row = idx / kUnits, u = idx % kUnits, tok = row % kTile;
    float y[8];
    const float f = layout::unit_decode<C, /*kNc=*/false>(raw + size_t(row) * row_bytes, D, u, lv, y);
    const bool live = k0 + tok < kend;
    uint4 p;
    p.x = pack_half2(live ? y[0] * f : 0.0f, live ? y[1] * f : 0.0f);
    p.y = pack_half2(live ? y[2] * f : 0.0f, live ? y[3] * f : 0.0f);
    p.z = pack_half2(live ? y[4] * f : 0.0f, live ? y[5] * f : 0.0f);
    p.w = pack_half2(live ? y[6] * f : 0.0f, live ? y[7] * f : 0.0f);
    *reinterpret_cast<uint4*>((row < kTile ? k_s : v_s) + tok * S + u * 8) = p;
  }
}

// grid (n_kv_heads, row tiles); the tiles with the most keys start first.
template <CodecId C, int D>
__global__ void __launch_bounds__(kThreads) prefill_kernel(PrefillArgs a) {
  constexpr int S = D + 8;  // padded row stride (halves): the 8 rows of an ldmatrix hit different banks
  extern __shared__ __align__(16) uint8_t smem[];
  const size_t raw_bytes = raw_tile_bytes(a.row_bytes);
  auto raw = [&](int t) { return smem + (t & 1) * raw_bytes; };  // two stages
  __half* k_s = reinterpret_cast<__half*>(smem + 2 * raw_bytes);
  __half* v_s = k_s + kTile * S;
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
  issue_tile(a, kh, 0, raw(0));
  cp_commit();
  for (int k0 = 0, t = 0; k0 < kend; k0 += kTile, ++t) {
    if (k0 + kTile < kend) issue_tile(a, kh, k0 + kTile, raw(t + 1));
    cp_commit();  // possibly empty: the wait below always means "all but the newest group"
    cp_wait<1>();
    __syncthreads();  // this tile's bytes are in (every thread's copies), the previous tile is consumed
    decode_tile<C, D, S>(raw(t), a.row_bytes, k0, kend, lv, k_s, v_s);
    __syncthreads();
    if (k0 > warp_max) continue;  // every key of this tile is in the future of this warp's rows
    float s[kTile / 8][4];
#pragma unroll
    for (int nt = 0; nt < kTile / 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
    // ldmatrix x4, lane l addresses row l % 8 of matrix l / 8: K rows (tokens) nt*8.., d ks*16 + 0/8, ks*16+16 + 0/8.
    const int lr = lane % 8, lm = lane / 8;
#pragma unroll
    for (int ks = 0; ks < D / 16; ks += 2)
#pragma unroll
      for (int nt = 0; nt < kTile / 8; ++nt) {
        uint32_t b[4];
        ldsm_x4(smem_addr(k_s + (nt * 8 + lr) * S + ks * 16 + lm * 8), b);
        mma_16816(s[nt], qf[ks], b[0], b[1]);
        mma_16816(s[nt], qf[ks + 1], b[2], b[3]);
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
    quad_max(mxa, mxb);
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
    // ldmatrix.trans x4: V rows (tokens) kk*16 + 0..7 / 8..15 of d columns dn*8.. and (dn+1)*8..
#pragma unroll
    for (int kk = 0; kk < kTile / 16; ++kk)
#pragma unroll
      for (int dn = 0; dn < D / 8; dn += 2) {
        uint32_t b[4];
        ldsm_x4_trans(smem_addr(v_s + (kk * 16 + (lm % 2) * 8 + lr) * S + (dn + lm / 2) * 8), b);
        mma_16816(o[dn], pf[kk], b[0], b[1]);
        mma_16816(o[dn + 1], pf[kk], b[2], b[3]);
      }
  }
  quad_sum(la, lb);
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

// Dynamic shared memory of one block: two raw stages and the f16 K and V tiles.
template <CodecId C, int D>
constexpr size_t smem_bytes() {
  return 2 * raw_tile_bytes(layout::row_bytes(C, D)) + 2 * size_t(kTile) * (D + 8) * sizeof(__half);
}

// The kernel with its dynamic shared memory allowed (once per instantiation, not per launch).
template <CodecId C, int D>
cudaError_t prepared() {
  static const cudaError_t e =
      cudaFuncSetAttribute(prefill_kernel<C, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem_bytes<C, D>()));
  return e;
}

template <CodecId C, int D>
cudaError_t launch_codec_dim(const PrefillArgs& a, cudaStream_t s) {
  if (a.row_bytes != layout::row_bytes(C, D)) return cudaErrorInvalidValue;
  // cp.async moves 16-byte pieces: every tile's start must be 16-byte aligned (it is for whole-page pools).
  if ((reinterpret_cast<uintptr_t>(a.pool) | a.head_stride | a.page_bytes | a.v_offset | (kTile * a.row_bytes)) % 16)
    return cudaErrorMisalignedAddress;
  if (cudaError_t e = prepared<C, D>(); e != cudaSuccess) return e;
  const dim3 grid(a.n_kv_heads, (a.n_tok * a.n_rep + kRows - 1) / kRows);
  prefill_kernel<C, D><<<grid, kThreads, smem_bytes<C, D>(), s>>>(a);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_prefill(const PrefillArgs& a, cudaStream_t s) {
  if (a.n_tok <= 0) return cudaSuccess;
  return dispatch(AllCodecs{}, Dims<64, 128>{}, a.codec, a.head_dim,
                  [&]<CodecId C, int D>() { return launch_codec_dim<C, D>(a, s); });
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
