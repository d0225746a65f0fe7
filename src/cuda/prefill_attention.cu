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
#include "cuda/prefill_rows.cuh"
#include "cuda/prefill_tiles.cuh"
#include "kv/codecs/layout.h"

namespace kvtax::cuda::detail {
namespace {

using kv::CodecId;
namespace layout = kv::layout;

// W warps per block (8 or 16, chosen per codec in prefill_attention.cpp), 16 rows each.
constexpr int kSub = 32;

// f16 rows are already the operand format: their tiles are copied straight into the padded f16 stages (no
// raw stage, no decode pass), which keeps the block's shared memory small enough for two blocks per SM.
template <CodecId C>
constexpr bool kDirect = C == CodecId::f16;

// Shared memory of one block (bytes): the block's q rows as f16, then either two f16 K/V stages (kDirect)
// or two raw stages and one decoded f16 K/V tile.
template <CodecId C, int D, int W>
struct Smem {
  static constexpr int S = PaddedTile<D>::kStride;
  static constexpr size_t q = size_t(16 * W) * S * 2, kv = 2 * PaddedTile<D>::kBytes;
  static constexpr size_t raw = raw_tile_bytes(layout::row_bytes(C, D));
  static constexpr size_t total = q + (kDirect<C> ? 2 * kv : 2 * raw + kv);
};

// grid (n_kv_heads, row tiles); the tiles with the most keys start first. Two blocks per SM (128 registers):
// q lives in shared memory, so one block's decode and softmax overlap the other's tensor-core work.
template <CodecId C, int D, int W>
__global__ void __launch_bounds__(32 * W, 16 / W) prefill_kernel(PrefillArgs a) {
  constexpr int kThreads = 32 * W, kRows = 16 * W;
  using M = Smem<C, D, W>;
  using L = PaddedTile<D>;
  constexpr int S = M::S;
  extern __shared__ __align__(16) uint8_t smem[];
  __half* q_s = reinterpret_cast<__half*>(smem);
  uint8_t* rest = smem + M::q;
  // kDirect: stage t's K at kv_stage(t), its V kTile rows later. Otherwise raw(t) and one decoded tile.
  auto kv_stage = [&](int t) { return reinterpret_cast<__half*>(rest + (kDirect<C> ? (t & 1) * M::kv : 2 * M::raw)); };
  auto raw = [&](int t) { return rest + (t & 1) * M::raw; };
  __shared__ uint32_t pairs[kPairSlots<C>];

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, c = lane % 4;
  const int h = blockIdx.x;
  const int r_block = (gridDim.y - 1 - blockIdx.y) * kRows, r_warp = r_block + warp * 16;
  const int pa = row_pos(a, r_warp + g), pb = row_pos(a, r_warp + g + 8);
  const int warp_min = row_pos(a, r_warp), warp_max = row_pos(a, r_warp + 15);
  const int kend = row_pos(a, r_block + kRows - 1) + 1;
  fill_pairs<C, kThreads>(a, pairs);

  const uint8_t* kh = a.pool + size_t(h) * a.head_stride;
  if constexpr (kDirect<C>) {
    issue_tile_f16<D, kThreads, L>(a, kh, 0, kend, kv_stage(0), kv_stage(0) + kTile * S);
  } else {
    issue_tile<kThreads>(a, kh, 0, raw(0));
  }
  cp_commit();
  stage_q<D, kThreads, kRows>(a, h, r_block, q_s);
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
        issue_tile_f16<D, kThreads, L>(a, kh, k0 + kTile, kend, nx, nx + kTile * S);
      }
      cp_commit();
      k_s = kv_stage(t);
    } else {
      if (k0 + kTile < kend) issue_tile<kThreads>(a, kh, k0 + kTile, raw(t + 1));
      cp_commit();  // possibly empty: the wait below always means "all but the newest group"
      cp_wait<1>();
      __syncthreads();  // this tile's bytes are in (every thread's copies), the previous tile is consumed
      k_s = kv_stage(0);
      decode_tile<C, D, kThreads, L>(raw(t), k0, kend, pairs, k_s, k_s + kTile * S);
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
      uint32_t pf[kSub / 16][4];
      softmax_step<kSub>(s, kj, warp_min, pa, pb, c, ma, mb, la, lb, o, pf);
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
  store_rows<D>(a, h, r_warp + g, c, o, la, lb);
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
  if (a.wgmma) return launch_prefill_wgmma(a, s);
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

}  // namespace kvtax::cuda::detail
