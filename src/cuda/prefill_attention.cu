// Tensor-core prefill attention (prefill_attention.h). Block: W warps (8 or 16), 16 W rows of one GQA group taken
// position-major (row r = position r / n_rep, query head r % n_rep of the group), so the whole block shares
// one causal extent and each decoded K/V tile serves every query head of the group. Warp w owns rows
// 16w..16w+15: q sits in shared memory as f16 (one 16x16 A fragment loaded at a time, so the kernel fits in
// 128 registers: two 8-warp blocks per SM), S = Q K^T and O += P V go through mma.sync m16n8k16, and the S
// accumulators become the A operand of P V without leaving registers. Scores are in base 2 (q is pre-scaled by
// log2 e / sqrt(d)); each 64-key tile is taken in two 32-key softmax steps.
//
// Pipeline per 64-key tile: the raw codec bytes of the NEXT tile's K and V rows are copied to shared memory
// with cp.async while this tile is decoded (shared -> shared, f16) and multiplied, so the tile loads' memory
// latency hides behind the tensor-core work instead of stalling the block. f16 rows need no decode: they are
// copied straight into two padded f16 stages. Fragments come from the f16 tiles through ldmatrix (V
// row-major, read transposed by ldmatrix.trans).
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

// W warps per block (8 or 16, chosen per codec in prefill_attention.cpp), 16 rows each.
constexpr int kTile = 64, kSub = 32;
constexpr size_t kMaxSmem = 227 * 1024;  // dynamic shared memory one block may take on sm_90
constexpr float kLog2e = 1.4426950408889634f;

// f16 rows are already the operand format: their tiles are copied straight into the padded f16 stages (no
// raw stage, no decode pass), which keeps the block's shared memory small enough for two blocks per SM.
template <CodecId C>
constexpr bool kDirect = C == CodecId::f16;

// Raw bytes of one tile in shared memory: kTile K rows, then kTile V rows (row_bytes each, 16-byte multiple
// in total since kTile * row_bytes is).
__host__ __device__ constexpr size_t raw_tile_bytes(size_t row_bytes) { return 2 * kTile * row_bytes; }

__device__ __forceinline__ const uint8_t* tile_base(const PrefillArgs& a, const uint8_t* kh, int k0) {
  const uint8_t* page = kh + size_t(__ldg(a.pages + (k0 >> kPageShift))) * a.page_bytes;
  return page + size_t(k0 & (kPageTokens - 1)) * a.row_bytes;
}

// Starts the copy of tokens k0 .. k0+kTile-1 of KV head h into `raw`. A tile never crosses a page (k0 is a
// multiple of kTile, which divides kPageTokens): one page-table load per tile. Rows past the cache's length
// are copied too (the page holds them) and zeroed when decoded.
template <int W>
__device__ __forceinline__ void issue_tile(const PrefillArgs& a, const uint8_t* kh, int k0, uint8_t* raw) {
  const uint8_t* base = tile_base(a, kh, k0);
  const int n16 = int(kTile * a.row_bytes / 16);
  for (int i = threadIdx.x; i < n16; i += 32 * W) {
    cp_async16(smem_addr(raw + 16 * i), base + 16 * i);
    cp_async16(smem_addr(raw + kTile * a.row_bytes + 16 * i), base + a.v_offset + 16 * i);
  }
}

// f16 rows straight into the padded k_s / v_s stage; keys at or past kend are zero-filled by the copy itself
// (their bytes may be anything, NaN included, and P V would carry a NaN even at weight 0).
template <int D, int S, int W>
__device__ __forceinline__ void issue_tile_f16(const PrefillArgs& a, const uint8_t* kh, int k0, int kend,
                                               __half* k_s, __half* v_s) {
  constexpr int kThreads = 32 * W, kPer = D / 8, kIters = kTile * kPer / kThreads;  // 16-byte pieces: per row, per thread
  static_assert(kTile * kPer % kThreads == 0);
  const uint8_t* base = tile_base(a, kh, k0);
#pragma unroll 2
  for (int i = 0; i < kIters; ++i) {
    const int idx = threadIdx.x + i * kThreads, tok = idx / kPer, p = idx % kPer;
    const int live = k0 + tok < kend ? 16 : 0;
    const uint8_t* src = base + size_t(tok) * a.row_bytes + 16 * p;
    cp_async16(smem_addr(k_s + tok * S + 8 * p), src, live);
    cp_async16(smem_addr(v_s + tok * S + 8 * p), src + a.v_offset, live);
  }
}

__device__ __forceinline__ uint32_t half2_bits(__half2 h) {
  return uint32_t(__half_as_ushort(h.x)) | (uint32_t(__half_as_ushort(h.y)) << 16);
}

// Decodes a raw tile into k_s / v_s [token][d] as f16 with the unit's factor applied; keys at or past kend
// become zeros (their bytes may be anything, NaN included, and P V would carry a NaN even at weight 0).
template <CodecId C, int D, int S, int W>
__device__ __forceinline__ void decode_tile(const uint8_t* raw, size_t row_bytes, int k0, int kend,
                                            const float* lv, __half* k_s, __half* v_s) {
  constexpr int kThreads = 32 * W, kUnits = D / layout::kUnit, kIters = 2 * kTile * kUnits / kThreads;
  static_assert(kPageTokens % kTile == 0 && 2 * kTile * kUnits % kThreads == 0);
#pragma unroll 4
  for (int i = 0; i < kIters; ++i) {
    const int idx = threadIdx.x + i * kThreads;  // consecutive threads: consecutive units of one row
    const int row = idx / kUnits, u = idx % kUnits, tok = row % kTile;
    const bool live = k0 + tok < kend;
    uint4 p;
    if constexpr (layout::kHasUnitDecodeHalf<C>) {
      // Codes with an exact f16 form (fp8, q8, q4, q4r): integer bit moves, then one f16 product by the
      // factor (zero for dead keys: their codes are finite in f16 whatever the bytes, the factor may not be).
      __half2 hv[4];
      const float f = layout::unit_decode_half<C, /*kNc=*/false>(raw + size_t(row) * row_bytes, D, u, hv);
      const __half2 f2 = __float2half2_rn(live ? f : 0.0f);
      p.x = half2_bits(__hmul2(hv[0], f2));
      p.y = half2_bits(__hmul2(hv[1], f2));
      p.z = half2_bits(__hmul2(hv[2], f2));
      p.w = half2_bits(__hmul2(hv[3], f2));
    } else {
      float y[8];
      const float f = layout::unit_decode<C, /*kNc=*/false>(raw + size_t(row) * row_bytes, D, u, lv, y);
      p.x = pack_half2(live ? y[0] * f : 0.0f, live ? y[1] * f : 0.0f);
      p.y = pack_half2(live ? y[2] * f : 0.0f, live ? y[3] * f : 0.0f);
      p.z = pack_half2(live ? y[4] * f : 0.0f, live ? y[5] * f : 0.0f);
      p.w = pack_half2(live ? y[6] * f : 0.0f, live ? y[7] * f : 0.0f);
    }
    *reinterpret_cast<uint4*>((row < kTile ? k_s : v_s) + tok * S + u * 8) = p;
  }
}

// Shared memory of one block (bytes): the block's q rows as f16, then either two f16 K/V stages (kDirect)
// or two raw stages and one decoded f16 K/V tile.
template <CodecId C, int D, int W>
struct Smem {
  static constexpr int S = D + 8;  // padded row stride (halves): the 8 rows of an ldmatrix hit different banks
  static constexpr size_t q = size_t(16 * W) * S * 2, kv = 2 * size_t(kTile) * S * 2;
  static constexpr size_t raw = raw_tile_bytes(layout::row_bytes(C, D));
  static constexpr size_t total = q + (kDirect<C> ? 2 * kv : 2 * raw + kv);
};

// grid (n_kv_heads, row tiles); the tiles with the most keys start first. Two blocks per SM (128 registers):
// q lives in shared memory, so one block's decode and softmax overlap the other's tensor-core work.
template <CodecId C, int D, int W>
__global__ void __launch_bounds__(32 * W, 16 / W) prefill_kernel(PrefillArgs a) {
  constexpr int kThreads = 32 * W, kRows = 16 * W;
  using M = Smem<C, D, W>;
  constexpr int S = M::S;
  extern __shared__ __align__(16) uint8_t smem[];
  __half* q_s = reinterpret_cast<__half*>(smem);
  uint8_t* rest = smem + M::q;
  // kDirect: stage t's K at kv_stage(t), its V kTile rows later. Otherwise raw(t) and one decoded tile.
  auto kv_stage = [&](int t) { return reinterpret_cast<__half*>(rest + (kDirect<C> ? (t & 1) * M::kv : 2 * M::raw)); };
  auto raw = [&](int t) { return rest + (t & 1) * M::raw; };
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

  const uint8_t* kh = a.pool + size_t(h) * a.head_stride;
  if constexpr (kDirect<C>) {
    issue_tile_f16<D, S, W>(a, kh, 0, kend, kv_stage(0), kv_stage(0) + kTile * S);
  } else {
    issue_tile<W>(a, kh, 0, raw(0));
  }
  cp_commit();
  {  // the block's q rows, scaled by log2 e / sqrt(d), as f16: 4 values per thread per step
    const float qs = rsqrtf(float(D)) * kLog2e;
    for (int i = tid; i < kRows * D / 4; i += kThreads) {
      const int r = i / (D / 4), d0 = (i % (D / 4)) * 4;
      const float4 x = *reinterpret_cast<const float4*>(q_of(r_block + r) + d0);
      *reinterpret_cast<uint2*>(q_s + r * S + d0) = make_uint2(pack_half2(x.x * qs, x.y * qs), pack_half2(x.z * qs, x.w * qs));
    }
  }
  float o[D / 8][4];
#pragma unroll
  for (int dn = 0; dn < D / 8; ++dn) o[dn][0] = o[dn][1] = o[dn][2] = o[dn][3] = 0.0f;
  float ma = -INFINITY, mb = -INFINITY, la = 0.0f, lb = 0.0f;
  const int lr = lane % 8, lm = lane / 8;
  // ldmatrix x4 of q: matrices (rows 0-7 | 8-15) x (d 0-7 | 8-15) of a 16x16 block, the A fragment's order.
  const uint32_t q_addr = smem_addr(q_s + (warp * 16 + (lm % 2) * 8 + lr) * S + (lm / 2) * 8);

  for (int k0 = 0, t = 0; k0 < kend; k0 += kTile, ++t) {
    __half *k_s, *v_s;
    if constexpr (kDirect<C>) {
      cp_wait<0>();
      __syncthreads();  // tile t is in (every thread's copies); stage t+1 = t-1 is no longer read
      if (k0 + kTile < kend) {
        __half* nx = kv_stage(t + 1);
        issue_tile_f16<D, S, W>(a, kh, k0 + kTile, kend, nx, nx + kTile * S);
      }
      cp_commit();
      k_s = kv_stage(t);
    } else {
      if (k0 + kTile < kend) issue_tile<W>(a, kh, k0 + kTile, raw(t + 1));
      cp_commit();  // possibly empty: the wait below always means "all but the newest group"
      cp_wait<1>();
      __syncthreads();  // this tile's bytes are in (every thread's copies), the previous tile is consumed
      k_s = kv_stage(0);
      decode_tile<C, D, S, W>(raw(t), a.row_bytes, k0, kend, lv, k_s, k_s + kTile * S);
      __syncthreads();
    }
    v_s = k_s + kTile * S;
    // The tile in steps of kSub keys: S is kSub / 2 registers, so two blocks fit in 128 registers per thread.
#pragma unroll
    for (int j0 = 0; j0 < kTile; j0 += kSub) {
      const int kj = k0 + j0;
      if (kj > warp_max) break;  // every key from here on is in the future of this warp's rows
      float s[kSub / 8][4];
#pragma unroll
      for (int nt = 0; nt < kSub / 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
      // One q fragment (4 registers) at a time. ldmatrix x4 of K, lane l addresses row l % 8 of matrix l / 8:
      // tokens (nt + l / 16) * 8.., d ks * 16 + (l / 8 % 2) * 8: the B fragments of key groups nt and nt + 1.
      const uint32_t k_addr = smem_addr(k_s + (j0 + (lm / 2) * 8 + lr) * S + (lm % 2) * 8);
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {
        uint32_t qa[4];
        ldsm_x4(q_addr + ks * 32, qa);
#pragma unroll
        for (int nt = 0; nt < kSub / 8; nt += 2) {
          uint32_t b[4];
          ldsm_x4(k_addr + (nt * 8 * S + ks * 16) * 2, b);
          mma_16816(s[nt], qa, b[0], b[1]);
          mma_16816(s[nt + 1], qa, b[2], b[3]);
        }
      }
      if (kj + kSub - 1 > warp_min) {  // causal mask (also covers the zero rows past kend)
#pragma unroll
        for (int nt = 0; nt < kSub / 8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            if (kj + nt * 8 + 2 * c + (e & 1) > (e < 2 ? pa : pb)) s[nt][e] = -INFINITY;
      }
      float mxa = -INFINITY, mxb = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < kSub / 8; ++nt) {
        mxa = fmaxf(mxa, fmaxf(s[nt][0], s[nt][1]));
        mxb = fmaxf(mxb, fmaxf(s[nt][2], s[nt][3]));
      }
      quad_max(mxa, mxb);
      // Key 0 is in the first step and every row sees it, so the running maxima are finite from there on.
      const auto [ca, cb] = raise_max(ma, mb, mxa, mxb);
      la *= ca;
      lb *= cb;
      scale_rows(o, ca, cb);
      uint32_t pf[kSub / 16][4];
#pragma unroll
      for (int nt = 0; nt < kSub / 8; ++nt) {
        const float p0 = exp2_fast(s[nt][0] - ma), p1 = exp2_fast(s[nt][1] - ma);
        const float p2 = exp2_fast(s[nt][2] - mb), p3 = exp2_fast(s[nt][3] - mb);
        la += p0 + p1;
        lb += p2 + p3;
        pf[nt / 2][(nt % 2) * 2] = pack_half2(p0, p1);
        pf[nt / 2][(nt % 2) * 2 + 1] = pack_half2(p2, p3);
      }
      // ldmatrix.trans x4: V rows (tokens) j0 + kk*16 + 0..7 / 8..15 of d columns dn*8.. and (dn+1)*8..
      const uint32_t v_addr = smem_addr(v_s + (j0 + (lm % 2) * 8 + lr) * S + (lm / 2) * 8);
#pragma unroll
      for (int kk = 0; kk < kSub / 16; ++kk)
#pragma unroll
        for (int dn = 0; dn < D / 8; dn += 2) {
          uint32_t b[4];
          ldsm_x4_trans(v_addr + (kk * 16 * S + dn * 8) * 2, b);
          mma_16816(o[dn], pf[kk], b[0], b[1]);
          mma_16816(o[dn + 1], pf[kk], b[2], b[3]);
        }
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

// The kernel with its dynamic shared memory allowed (once per instantiation, not per launch).
template <CodecId C, int D, int W>
cudaError_t prepared() {
  static const cudaError_t e = cudaFuncSetAttribute(prefill_kernel<C, D, W>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                    int(Smem<C, D, W>::total));
  return e;
}

template <CodecId C, int D, int W>
cudaError_t launch_warps(const PrefillArgs& a, cudaStream_t s) {
  if (cudaError_t e = prepared<C, D, W>(); e != cudaSuccess) return e;
  constexpr int kRows = 16 * W;
  const dim3 grid(a.n_kv_heads, (a.n_tok * a.n_rep + kRows - 1) / kRows);
  prefill_kernel<C, D, W><<<grid, 32 * W, Smem<C, D, W>::total, s>>>(a);
  return cudaGetLastError();
}

template <CodecId C, int D>
cudaError_t launch_codec_dim(const PrefillArgs& a, cudaStream_t s) {
  if (a.row_bytes != layout::row_bytes(C, D)) return cudaErrorInvalidValue;
  // cp.async moves 16-byte pieces: every tile's start must be 16-byte aligned (it is for whole-page pools).
  if ((reinterpret_cast<uintptr_t>(a.pool) | a.head_stride | a.page_bytes | a.v_offset | (kTile * a.row_bytes)) % 16)
    return cudaErrorMisalignedAddress;
  if constexpr (Smem<C, D, 16>::total <= kMaxSmem) {
    if (a.warps == 16) return launch_warps<C, D, 16>(a, s);
  }
  return launch_warps<C, D, 8>(a, s);
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
