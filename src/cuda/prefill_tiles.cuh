#pragma once
// K/V tiles of the flash-prefill kernels (prefill_attention.cu: mma.sync; prefill_wgmma.cu: wgmma): kTile keys of
// one KV head copied from the paged pool into shared memory and, for the decoding codecs, decoded there into f16
// with the codec's factor applied. Where a decoded piece lands is the kernel's choice (a Layout): padded rows for
// ldmatrix, or the 128-byte swizzle that wgmma reads.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda/attention_launch.h"
#include "cuda/mma.cuh"
#include "cuda/prefill_launch.h"
#include "kv/codecs/layout.h"

namespace kvtax::cuda::detail {

constexpr int kTile = 64;  // keys per tile; divides kPageTokens, so a tile never crosses a page
constexpr size_t kMaxSmem = 227 * 1024;  // dynamic shared memory one block may take on sm_90
constexpr int kDecodeBatch = 4;  // units a thread decodes before it stores any (decode_tile)

// Row-major [token][d] f16 with rows D + 8 halves apart: the 8 rows one ldmatrix reads hit different banks.
template <int D>
struct PaddedTile {
  static constexpr int kStride = D + 8, kTokStride = kStride;  // at(tok + 8m, p) = at(tok, p) + 8m kTokStride
  static constexpr size_t kBytes = size_t(kTile) * kStride * 2;
  // Halves from the tile's start to dims 8p..8p+7 of token `tok`.
  __device__ static int at(int tok, int p) { return tok * kStride + 8 * p; }
};

// wgmma's 128-byte swizzle: 64-dim column blocks [D / 64][token][64], and in each 128-byte row the 16-byte piece p
// sits at p ^ (token % 8), so the 8 rows of a core matrix fall in different banks. The tile must start on a
// 1024-byte boundary (the swizzle pattern's period).
template <int D, int kRowsT = kTile>
struct Sw128Tile {
  static_assert(D % 64 == 0);
  static constexpr int kTokStride = 64;  // at(tok + 8m, p) = at(tok, p) + 8m kTokStride
  static constexpr size_t kBytes = size_t(kRowsT) * D * 2;
  __device__ static int at(int tok, int p) { return (p / 8) * kRowsT * 64 + tok * 64 + ((p % 8) ^ (tok % 8)) * 8; }
};

__device__ __forceinline__ const uint8_t* tile_base(const PrefillArgs& a, const uint8_t* kh, int k0) {
  const uint8_t* page = kh + size_t(__ldg(a.pages + (k0 >> kPageShift))) * a.page_bytes;
  return page + size_t(k0 & (kPageTokens - 1)) * a.row_bytes;
}

// Raw bytes of one tile in shared memory: kTile K rows, then kTile V rows (row_bytes each, 16-byte multiple
// in total since kTile * row_bytes is).
__host__ __device__ constexpr size_t raw_tile_bytes(size_t row_bytes) { return 2 * kTile * row_bytes; }

// Starts the copy of tokens k0 .. k0+kTile-1 of KV head h into `raw` (kThreads threads). Rows past the cache's
// length are copied too (the page holds them) and zeroed when decoded.
template <int kThreads>
__device__ __forceinline__ void issue_tile(const PrefillArgs& a, const uint8_t* kh, int k0, uint8_t* raw) {
  const uint8_t* base = tile_base(a, kh, k0);
  const int n16 = int(kTile * a.row_bytes / 16);
  for (int i = threadIdx.x; i < n16; i += kThreads) {
    cp_async16(smem_addr(raw + 16 * i), base + 16 * i);
    cp_async16(smem_addr(raw + kTile * a.row_bytes + 16 * i), base + a.v_offset + 16 * i);
  }
}

// kKeys f16 rows straight into the f16 tiles k_s / v_s; keys at or past kend are zero-filled by the copy itself
// (their bytes may be anything, NaN included, and P V would carry a NaN even at weight 0). kKeys divides
// kPageTokens and k0 is a multiple of it, so the tile lies in one page.
template <int D, int kThreads, class Layout, int kKeys = kTile>
__device__ __forceinline__ void issue_tile_f16(const PrefillArgs& a, const uint8_t* kh, int k0, int kend,
                                               __half* k_s, __half* v_s) {
  static_assert(kPageTokens % kKeys == 0);
  constexpr int kPer = D / 8, kPieces = kKeys * kPer;  // 16-byte pieces: per row, per tile
  const uint8_t* base = tile_base(a, kh, k0);
#pragma unroll 2
  for (int i = 0; i < (kPieces + kThreads - 1) / kThreads; ++i) {
    const int idx = threadIdx.x + i * kThreads, tok = idx / kPer, p = idx % kPer;
    if (kPieces % kThreads != 0 && idx >= kPieces) break;
    const int live = k0 + tok < kend ? 16 : 0;
    const uint8_t* src = base + size_t(tok) * a.row_bytes + 16 * p;
    cp_async16(smem_addr(k_s + Layout::at(tok, p)), src, live);
    cp_async16(smem_addr(v_s + Layout::at(tok, p)), src + a.v_offset, live);
  }
}

__device__ __forceinline__ uint32_t half2_bits(__half2 h) {
  return uint32_t(__half_as_ushort(h.x)) | (uint32_t(__half_as_ushort(h.y)) << 16);
}

// tq4 / tq3 decode two values per shared load from a table of f16 level pairs (kv/codecs/layout.h,
// unit_pair_codes): 256 entries for tq4, 64 for tq3, built once per block. Looking up each level as a float,
// then scaling and rounding it, made them the slowest codecs of the prefill by ~25% (H200, 2026-12-01). A single
// copy of tq4's table conflicts on 47% of its shared-load wavefronts (the central codes are the common ones), so a
// kernel with room keeps kCopies copies side by side: entry e of copy l at word e * kCopies + l, read by the lanes
// l (mod kCopies). With 32 copies each lane reads its own bank.
template <kv::CodecId C>
constexpr int kPairEntries = kv::layout::kPairLevels<C> * kv::layout::kPairLevels<C>;
// A single copy's size in words, for a static shared array (at least 1: a codec without one still declares it).
template <kv::CodecId C>
constexpr int kPairSlots = kPairEntries<C> > 0 ? kPairEntries<C> : 1;

template <kv::CodecId C, int kThreads, int kCopies = 1>
__device__ __forceinline__ void fill_pairs(const PrefillArgs& a, uint32_t* pairs) {
  constexpr int n = kv::layout::kPairLevels<C>;
  if constexpr (n > 0)
    for (int i = threadIdx.x; i < kPairEntries<C> * kCopies; i += kThreads) {
      const int e = i / kCopies;
      pairs[i] = pack_half2(a.levels[e % n], a.levels[e / n]);
    }
}

// Decodes a raw tile (rows of the codec's row_bytes(C, D), checked at launch) into k_s / v_s as f16 with the
// unit's factor applied; keys at or past kend become zeros (their bytes may be anything, NaN included, and P V
// would carry a NaN even at weight 0). kRawRows kTile: the raw tile holds rows of one kind only, decoded into k_s
// (the f32 prefill in pairs of blocks, prefill_wgmma.cu).
// Thread i always takes unit i % kUnits of rows i / kUnits + kRowStep j: the unit, its swizzled place in a row and
// every offset are then compile-time steps from one base, where a generic index walk spent more instructions on
// divisions and swizzle arithmetic than on the decode (ncu, H200, 2026-12-01: ~60 instructions per 8 fp8 values).
template <kv::CodecId C, int D, int kThreads, class Layout, int kCopies = 1, int kRawRows = 2 * kTile>
__device__ __forceinline__ void decode_tile(const uint8_t* raw, int k0, int kend, const uint32_t* pairs,
                                            __half* k_s, __half* v_s) {
  namespace layout = kv::layout;
  static_assert(kRawRows == kTile || kRawRows == 2 * kTile);
  constexpr size_t kRowBytes = layout::row_bytes(C, D);
  constexpr int kUnits = D / layout::kUnit, kTotal = kRawRows * kUnits, kRowStep = kThreads / kUnits;
  static_assert(layout::kUnit == 8, "one unit is one 16-byte f16 piece of the tile");
  static_assert(kThreads % kUnits == 0 && kTotal % kThreads == 0 && kTile % kRowStep == 0 && kRowStep % 8 == 0);
  const unsigned t = threadIdx.x % kThreads, u = t % kUnits, row0 = t / kUnits;
  const uint8_t* src = raw + row0 * kRowBytes;
  const uint32_t* pairs_l = pairs + threadIdx.x % kCopies;  // this lane's copy of the pair table
  const int at0 = Layout::at(int(row0), int(u));
  // f32: the 32 bytes of a unit in shared memory are two 16-byte loads, and in order lanes u and u + 4 would hit the
  // same banks (2 wavefronts per 128 bytes). Units with bit 2 set load their second half first, so 8 lanes' first
  // loads cover the 32 banks once; their piece then holds its two 8-byte halves swapped, and is stored so.
  constexpr bool kF32 = C == kv::CodecId::f32;
  const int first = kF32 ? int(u >> 2) & 1 : 0;  // the half of the unit this thread loads first
  // Unit j: loads and arithmetic only, its 8 f16 values as one 16-byte piece.
  auto unit = [&](int j) -> uint4 {
    const int jr = j * kRowStep, dtok = jr % kTile;  // rows kTile.. of the raw tile are V
    const bool live = k0 + int(row0) + dtok < kend;
    uint4 p;
    if constexpr (layout::kHasUnitDecodeHalf<C>) {
      // Codes with an exact f16 form (fp8, q8, q4, q4r): integer bit moves, then one f16 product by the
      // factor (zero for dead keys: their codes are finite in f16 whatever the bytes, the factor may not be).
      __half2 hv[4];
      const float f = layout::unit_decode_half<C, /*kNc=*/false>(src + jr * kRowBytes, D, int(u), hv);
      const __half2 f2 = __float2half2_rn(live ? f : 0.0f);
      p.x = half2_bits(__hmul2(hv[0], f2));
      p.y = half2_bits(__hmul2(hv[1], f2));
      p.z = half2_bits(__hmul2(hv[2], f2));
      p.w = half2_bits(__hmul2(hv[3], f2));
    } else if constexpr (kPairEntries<C> > 0) {
      uint32_t idx[4];
      const float f = layout::unit_pair_codes<C, /*kNc=*/false>(src + jr * kRowBytes, int(u), idx);
      const __half2 f2 = __float2half2_rn(live ? f : 0.0f);
      p.x = half2_bits(__hmul2(layout::bits_as_half2(pairs_l[idx[0] * kCopies]), f2));
      p.y = half2_bits(__hmul2(layout::bits_as_half2(pairs_l[idx[1] * kCopies]), f2));
      p.z = half2_bits(__hmul2(layout::bits_as_half2(pairs_l[idx[2] * kCopies]), f2));
      p.w = half2_bits(__hmul2(layout::bits_as_half2(pairs_l[idx[3] * kCopies]), f2));
    } else if constexpr (kF32) {  // the row's floats themselves (layout::unit_decode<f32> reads them in order); a dead
      // row's are not read
      const float4* h = reinterpret_cast<const float4*>(src + jr * kRowBytes + 32 * u);
      const float4 a = live ? h[first] : float4{}, b = live ? h[first ^ 1] : float4{};
      p.x = pack_half2(a.x, a.y);
      p.y = pack_half2(a.z, a.w);
      p.z = pack_half2(b.x, b.y);
      p.w = pack_half2(b.z, b.w);
    } else {  // bf16
      float y[8];
      const float f = layout::unit_decode<C, /*kNc=*/false>(src + jr * kRowBytes, D, int(u), nullptr, y);
      p.x = pack_half2(live ? y[0] * f : 0.0f, live ? y[1] * f : 0.0f);
      p.y = pack_half2(live ? y[2] * f : 0.0f, live ? y[3] * f : 0.0f);
      p.z = pack_half2(live ? y[4] * f : 0.0f, live ? y[5] * f : 0.0f);
      p.w = pack_half2(live ? y[6] * f : 0.0f, live ? y[7] * f : 0.0f);
    }
    return p;
  };
  // kDecodeBatch units decoded before any of them is stored: the compiler may not move a unit's shared loads above the
  // previous unit's store (it cannot tell the tile from the raw bytes and the pair table), so one unit at a time
  // paid two shared-load latencies in a row per unit (ncu, H200, session 16: short-scoreboard stalls, 13.6% of the
  // tq4 prefill kernel's samples, all in its producers).
  constexpr int kPer = kTotal / kThreads, kB = kPer < kDecodeBatch ? kPer : kDecodeBatch;
  static_assert(kPer % kB == 0);
#pragma unroll
  for (int j0 = 0; j0 < kPer; j0 += kB) {
    uint4 p[kB];
#pragma unroll
    for (int b = 0; b < kB; ++b) p[b] = unit(j0 + b);
#pragma unroll
    for (int b = 0; b < kB; ++b) {
      const int jr = (j0 + b) * kRowStep, dtok = jr % kTile;
      __half* dst = (jr < kTile ? k_s : v_s) + at0 + dtok * Layout::kTokStride;
      if constexpr (kF32) {
        reinterpret_cast<uint2*>(dst)[first] = make_uint2(p[b].x, p[b].y);
        reinterpret_cast<uint2*>(dst)[first ^ 1] = make_uint2(p[b].z, p[b].w);
      } else {
        *reinterpret_cast<uint4*>(dst) = p[b];
      }
    }
  }
}

}  // namespace kvtax::cuda::detail
