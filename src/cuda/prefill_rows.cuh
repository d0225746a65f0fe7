#pragma once
// The query-row side of the flash-prefill kernels (prefill_attention.cu: mma.sync; prefill_wgmma.cu: wgmma): where a
// block's (position, query head) rows sit in q and out, q staged into shared memory as f16 (rotated first for the
// rotated codecs), the online softmax over each tile's scores, and the output rows stored (rotated back, in f32 or
// as the next product's 16-bit input). The K/V side is prefill_tiles.cuh.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda/mma.cuh"
#include "cuda/prefill_launch.h"
#include "cuda/prefill_tiles.cuh"
#include "cuda/rope.cuh"
#include "cuda/rotate_regs.cuh"

namespace kvtax::cuda::detail {

// Offset of query row r (position-major in KV head h's group; rows past the chunk clamp to its last) in q / out.
__device__ __forceinline__ size_t row_offset(const PrefillArgs& a, int h, int r, int d) {
  r = min(r, a.n_tok * a.n_rep - 1);
  return (size_t(r / a.n_rep) * a.n_kv_heads * a.n_rep + size_t(h) * a.n_rep + r % a.n_rep) * d;
}

// Position of query row r (rows past the chunk compute as copies of its last row and are not stored).
__device__ __forceinline__ int row_pos(const PrefillArgs& a, int r) {
  return a.pos0 + min(r, a.n_tok * a.n_rep - 1) / a.n_rep;
}

// q's factor: 1 / sqrt(d) of the scores and log2 e of the base-2 softmax.
template <int D>
__device__ __forceinline__ float q_scale() {
  constexpr float kLog2e = 1.4426950408889634f;
  return rsqrtf(float(D)) * kLog2e;
}

// Chunk row t's RoPE factors (cos, sin) from pair i on (PrefillArgs::rope).
template <int D>
__device__ __forceinline__ const float2* rope_row(const PrefillArgs& a, int r, int i) {
  return a.rope + size_t(row_pos(a, r) - a.pos0) * (D / 2) + i;
}

// The block's q rows r_block.. (kRows of them, position-major within the GQA group) scaled by log2 e / sqrt(d),
// as f16 rows laid out by Layout (PaddedTile<D> or Sw128Tile<D, kRows>), RoPE-turned first where a.rope is set:
// 4 values per thread per step, and with neox pairs also the 4 values D / 2 on (their partners).
template <int D, int kThreads, int kRows, class Layout>
__device__ __forceinline__ void stage_q_plain(const PrefillArgs& a, int h, int r_block, __half* q_s) {
  const float qs = q_scale<D>();
  auto store4 = [&](int r, int d0, float4 x) {
    *reinterpret_cast<uint2*>(q_s + Layout::at(r, d0 / 8) + d0 % 8) =
        make_uint2(pack_half2(x.x * qs, x.y * qs), pack_half2(x.z * qs, x.w * qs));
  };
  if (a.rope && a.rope_neox) {
    for (int i = threadIdx.x; i < kRows * D / 8; i += kThreads) {
      const int r = i / (D / 8), d0 = (i % (D / 8)) * 4;
      const float* x = a.q + row_offset(a, h, r_block + r, D) + d0;
      const float4 lo = *reinterpret_cast<const float4*>(x), hi = *reinterpret_cast<const float4*>(x + D / 2);
      const float4* c = reinterpret_cast<const float4*>(rope_row<D>(a, r_block + r, d0));
      const float4 c01 = c[0], c23 = c[1];
      const float2 p0 = rope_turn(lo.x, hi.x, make_float2(c01.x, c01.y));
      const float2 p1 = rope_turn(lo.y, hi.y, make_float2(c01.z, c01.w));
      const float2 p2 = rope_turn(lo.z, hi.z, make_float2(c23.x, c23.y));
      const float2 p3 = rope_turn(lo.w, hi.w, make_float2(c23.z, c23.w));
      store4(r, d0, make_float4(p0.x, p1.x, p2.x, p3.x));
      store4(r, d0 + D / 2, make_float4(p0.y, p1.y, p2.y, p3.y));
    }
    return;
  }
  for (int i = threadIdx.x; i < kRows * D / 4; i += kThreads) {
    const int r = i / (D / 4), d0 = (i % (D / 4)) * 4;
    float4 x = *reinterpret_cast<const float4*>(a.q + row_offset(a, h, r_block + r, D) + d0);
    if (a.rope) {  // adjacent pairs (d0, d0 + 1), (d0 + 2, d0 + 3)
      const float4 c = *reinterpret_cast<const float4*>(rope_row<D>(a, r_block + r, d0 / 2));
      const float2 p0 = rope_turn(x.x, x.y, make_float2(c.x, c.y)), p1 = rope_turn(x.z, x.w, make_float2(c.z, c.w));
      x = make_float4(p0.x, p0.y, p1.x, p1.y);
    }
    store4(r, d0, x);
  }
}

// As stage_q_plain, rotating each row first (rotated codecs): one warp per row, RoPE before the rotation (a neox
// pair's values sit 16 lanes apart).
template <int D, int kThreads, int kRows, class Layout>
__device__ __forceinline__ void stage_q_rotated(const PrefillArgs& a, int h, int r_block, __half* q_s) {
  constexpr int kPer = D / 32;
  static_assert(kPer == 2 || kPer == 4);
  const float qs = q_scale<D>();
  const int lane = threadIdx.x % 32, d0 = kPer * lane;
  for (int r = threadIdx.x / 32; r < kRows; r += kThreads / 32) {
    const float* x = a.q + row_offset(a, h, r_block + r, D) + d0;
    float v[kPer];
    if constexpr (kPer == 4) {
      const float4 x4 = *reinterpret_cast<const float4*>(x);
      v[0] = x4.x, v[1] = x4.y, v[2] = x4.z, v[3] = x4.w;
    } else {
      const float2 x2 = *reinterpret_cast<const float2*>(x);
      v[0] = x2.x, v[1] = x2.y;
    }
    if (a.rope && a.rope_neox) {
      const bool low = lane < 16;
      const float2* c = rope_row<D>(a, r_block + r, low ? d0 : d0 - D / 2);
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        const float other = __shfl_xor_sync(0xffffffffu, v[j], 16);
        const float2 p = low ? rope_turn(v[j], other, c[j]) : rope_turn(other, v[j], c[j]);
        v[j] = low ? p.x : p.y;
      }
    } else if (a.rope) {
      const float2* c = rope_row<D>(a, r_block + r, d0 / 2);
#pragma unroll
      for (int j = 0; j < kPer; j += 2) {
        const float2 p = rope_turn(v[j], v[j + 1], c[j / 2]);
        v[j] = p.x, v[j + 1] = p.y;
      }
    }
    rotate_warp<D>(v, a.signs, lane);
    __half* dst = q_s + Layout::at(r, d0 / 8) + d0 % 8;
    if constexpr (kPer == 4)
      *reinterpret_cast<uint2*>(dst) = make_uint2(pack_half2(v[0] * qs, v[1] * qs), pack_half2(v[2] * qs, v[3] * qs));
    else
      *reinterpret_cast<uint32_t*>(dst) = pack_half2(v[0] * qs, v[1] * qs);
  }
}

template <int D, int kThreads, int kRows, class Layout = PaddedTile<D>>
__device__ __forceinline__ void stage_q(const PrefillArgs& a, int h, int r_block, __half* q_s) {
  if (a.signs)
    stage_q_rotated<D, kThreads, kRows, Layout>(a, h, r_block, q_s);
  else
    stage_q_plain<D, kThreads, kRows, Layout>(a, h, r_block, q_s);
}

// Row r's and row r + 8's q as the A fragments of D / 16 m64nNk16 products (the mma.sync m16n8k16 A layout; c is
// lane % 4), read from q staged by stage_q in Sw128Tile<D, kRows>: the swizzle puts a warp's 8 rows in distinct
// banks.
template <int D, class Layout>
__device__ __forceinline__ void q_fragments(const __half* q_s, int r, int c, uint32_t (&qf)[D / 16][4]) {
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      qf[ks][e] = *reinterpret_cast<const uint32_t*>(q_s + Layout::at(r + 8 * (e & 1), 2 * ks + e / 2) + 2 * c);
}

// One online-softmax step over kN keys kj.. for one warp's rows g and g + 8 (positions pa, pb): scores s (base 2,
// C fragments) are masked where causal, the running maxima and sums (ma, mb, la, lb) and the output o rise to
// include them, and the weights come back as f16 A fragments of P (pf[k] covers keys 16k..16k+15).
template <int kN, int kO>
__device__ __forceinline__ void softmax_step(float (&s)[kN / 8][4], int kj, int warp_min, int pa, int pb, int c,
                                             float& ma, float& mb, float& la, float& lb, float (&o)[kO][4],
                                             uint32_t (&pf)[kN / 16][4]) {
  if (kj + kN - 1 > warp_min) {  // causal mask (also covers the zero rows past kend)
#pragma unroll
    for (int nt = 0; nt < kN / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (kj + nt * 8 + 2 * c + (e & 1) > (e < 2 ? pa : pb)) s[nt][e] = -INFINITY;
  }
  float mxa = -INFINITY, mxb = -INFINITY;
#pragma unroll
  for (int nt = 0; nt < kN / 8; ++nt) {
    mxa = fmaxf(mxa, fmaxf(s[nt][0], s[nt][1]));
    mxb = fmaxf(mxb, fmaxf(s[nt][2], s[nt][3]));
  }
  quad_max(mxa, mxb);
  // Key 0 is in the first step and every row sees it, so the running maxima are finite from there on.
  const auto [ca, cb] = raise_max(ma, mb, mxa, mxb);
  la *= ca;
  lb *= cb;
  // Once the maxima settle most tiles leave them unchanged: skip the product then (warp-wide, so no divergence).
  if (__any_sync(0xffffffffu, ca != 1.0f || cb != 1.0f)) scale_rows(o, ca, cb);
#pragma unroll
  for (int nt = 0; nt < kN / 8; ++nt) {
    const float p0 = exp2_fast(s[nt][0] - ma), p1 = exp2_fast(s[nt][1] - ma);
    const float p2 = exp2_fast(s[nt][2] - mb), p3 = exp2_fast(s[nt][3] - mb);
    la += p0 + p1;
    lb += p2 + p3;
    pf[nt / 2][(nt % 2) * 2] = pack_half2(p0, p1);
    pf[nt / 2][(nt % 2) * 2 + 1] = pack_half2(p2, p3);
  }
}

// o / l of one warp's rows ra and ra + 8 (rotated back for rotated codecs) into a.out, or rounded into a.out16
// (rows past the chunk are not stored).
template <int D>
__device__ __forceinline__ void store_rows(const PrefillArgs& a, int h, int ra, int c, float (&o)[D / 8][4],
                                           float la, float lb) {
  quad_sum(la, lb);
  scale_rows(o, 1.0f / la, 1.0f / lb);
  if (a.signs) unrotate_rows<D>(o, a.signs, c);
  const int rb = ra + 8, n_rows = a.n_tok * a.n_rep;
  const bool sa = ra < n_rows, sb = rb < n_rows;
  const size_t at = sa ? row_offset(a, h, ra, D) : 0, bt = sb ? row_offset(a, h, rb, D) : 0;
  auto put = [&](size_t off, float x, float y) {
    if (!a.out16)
      *reinterpret_cast<float2*>(a.out + off) = make_float2(x, y);
    else
      *reinterpret_cast<uint32_t*>(a.out16 + off) = a.out_bf16 ? pack_pair<true>(x, y) : pack_pair<false>(x, y);
  };
#pragma unroll
  for (int dn = 0; dn < D / 8; ++dn) {
    const int d0 = dn * 8 + 2 * c;
    if (sa) put(at + d0, o[dn][0], o[dn][1]);
    if (sb) put(bt + d0, o[dn][2], o[dn][3]);
  }
}

}  // namespace kvtax::cuda::detail
