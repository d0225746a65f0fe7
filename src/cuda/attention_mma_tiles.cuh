#pragma once
// The tensor-core decode split kernel's configuration and tile helpers (attention_mma.cu, its only includer): the ring
// of K/V stages per codec and head width (Cfg), the f16 tiles' swizzle, the tiles' copies into the ring, and the
// codecs' code words as mma fragments (decode, swap). In an unnamed namespace: one translation unit uses them.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda/attention_launch.h"
#include "cuda/mma.cuh"
#include "cuda/pdl.cuh"
#include "cuda/rotate_regs.cuh"
#include "kv/codecs/layout.h"

namespace kvtax::cuda::detail {
namespace {

using kv::CodecId;
namespace layout = kv::layout;

constexpr int kWarps = 4, kThreads = 32 * kWarps, kTok = 16, kRows = kMmaGroupRows;
constexpr float kLog2e = 1.4426950408889634f;
static_assert(kPageTokens % kTok == 0 && kChunkAlign % kTok == 0);

// Tiles of a chunk's n_tiles that warp w walks (tiles w, w + kWarps, ...): its own loop, and the producer warp's copies.
__device__ __forceinline__ int warp_tiles(int n_tiles, int w) {
  return n_tiles > w ? (n_tiles - w + kWarps - 1) / kWarps : 0;
}
// The first token of warp w's tile j in a chunk that starts at c0.
__device__ __forceinline__ int tile_start(int c0, int w, int j) { return c0 + (w + j * kWarps) * kTok; }

// Stages of a split kernel's ring, per warp: as many as the shared memory of min_blocks blocks per SM holds (227 KB
// per SM, 1 KB of it reserved per block; 256 bytes of static arrays), 2 to `cap`. A warp has (stages - 1) tiles in
// flight, and the bytes in flight per SM are what a memory-bound loop waits on (Little's law), though the loaded
// latency itself grows with what every SM keeps in flight (Cfg::kStages). Where the cap lets more blocks than
// min_blocks fit (small rows: q4, q4r), a shorter ring that fits as many also leaves room for a block of the merge
// kernel, if there is one: the merge's blocks start while the split kernel runs (pdl.cuh), and the next split's
// blocks start while the merge runs; with no room beside it, q4r's attention took 75 us at 128k instead of 65 (H200,
// session 14).
constexpr int ring_stages(int raw, int decoded, int min_blocks, int d, int cap) {
  constexpr int kSm = 227 << 10, kBlockExtra = (1 << 10) + 256;
  auto block = [&](int s) { return kWarps * (s * raw + decoded) + kBlockExtra; };
  const int budget = ((kSm / min_blocks - kBlockExtra) / kWarps - decoded) / raw;
  const int stages = budget < 2 ? 2 : budget > cap ? cap : budget, fit = kSm / block(stages);
  for (int s = stages; s > 2 && fit > min_blocks && kSm / block(s) == fit; --s)
    if (fit * block(s) + merge_smem_bytes(d) + (1 << 10) <= kSm) return s;
  return stages;
}

// kSwap: the GQA kernel (kKReg codecs, groups of up to 8 query heads): S^T = K Q^T and O^T = V^T P^T, the tile's
// 16 tokens (and O's dims) as the M rows of m16n8k16, the group's heads as its 8 columns. Half the MMAs of the
// heads-as-rows form (whose M rows are mostly padding for groups of 4) and half the accumulator registers.
template <CodecId C, int D, bool kSwap = false>
struct Cfg {
  static constexpr int kRow = int(layout::row_bytes(C, D));
  static constexpr int kHalfTile = kTok * kRow;             // raw K (or V) rows of one tile
  static constexpr int kRaw = 2 * kHalfTile;                // one stage: K rows then V rows
  static constexpr bool kDirect = C == CodecId::f16 || C == CodecId::bf16;  // raw rows are already the 16-bit tile
  // bf16 rows go into bf16 MMAs, q and P each as a high and a low bf16 half (split_bf16), two products each: f32's
  // range, which f16 cannot hold, and more precision than f16's q and P. The loop is bound by bytes, not MMAs.
  static constexpr bool kSplit = C == CodecId::bf16;
  static constexpr int kTile = kTok * D * 2;                // one decoded f16 tile (K, then V in the same place)
  static constexpr bool kFold = layout::kRowFactor<C>;     // per-row factor folded into S and P
  // K and V codes go from the raw rows straight into B fragments, with no decoded tile in shared memory. K: each
  // lane of a quad takes a contiguous quarter of its token's code words, and q's dims are permuted to match (a dot
  // product does not care about the order of its terms). V (k runs along tokens): a lane reads the same code word
  // of its 4 tokens, interleaves the bytes of token pairs and decodes the interleaved word; O's dims come out
  // permuted (o_dim) and are put back in place when the warps merge.
  static constexpr bool kKReg =
      C == CodecId::fp8 || C == CodecId::q8 || C == CodecId::q4 || C == CodecId::q4r || C == CodecId::tq4;
  // q4 / q4r in the GQA form: nibbles go into the MMAs as f16 1024 + code, one LOP3 per two values, and the -8
  // offset and block scales are applied per block around the products (attention_mma_q4.cuh).
  static constexpr bool kBiased = kSwap && (C == CodecId::q4 || C == CodecId::q4r);
  static constexpr int kRuns = layout::word_runs(C);       // k-steps (4 values per lane each) per code word
  static constexpr int kLaneWords = D / 16 / kRuns;        // code words of one token per lane
  // Block-scaled codes (q8, q4, q4r): code words per block of kQBlock values, and the blocks a lane's K words span.
  static constexpr int kWpb = layout::kQBlock / (4 * kRuns), kSlots = (kLaneWords + kWpb - 1) / kWpb;
  // Blocks per SM the registers are capped for, and so the stages each gets. Two, with the deepest rings, for the
  // codecs whose loop keeps up with the bytes (f16, fp8, q8: 5 tiles in flight per warp for the 1-byte codes);
  // q4 and q4r time the same at 2 and 4 (bound by instructions); tq3, which decodes each tile into shared memory,
  // needs the 12 warps of 3; the heads-as-rows form at head_dim 256 the registers of 1. H200, session 13, against 3
  // (fp8) and 4 (q8) blocks: fp8 128k 80.7 -> 77.1 us, 32k 29.0 -> 27.1; q8 128k 82.7 -> 75.0, 32k 31.4 -> 27.1;
  // tq4, then decoded by tiles, at 2: 144.5 -> 159.5 at 128k.
  static constexpr bool kTileDecode = !kDirect && !kKReg;
  static constexpr int kMinBlocks = !kSwap && D >= 256 ? 1 : kTileDecode ? 3 : 2;
  // kBiased at head_dim 128 fits 4 blocks per SM by shared memory; 120 registers leave room for a merge block (128
  // threads of 32) beside them. At 127 the four took the whole register file and the merge waited for the split
  // kernel's last blocks. 0: the registers of kMinBlocks blocks per SM.
  static constexpr int kMaxRegs = kBiased && D == 128 ? 120 : 0;
  static constexpr int kDecoded = kDirect || kKReg ? 0 : kTile + 2 * kTok * 4;  // decoded tile + row factors
  // Stages of the ring (ring_stages): as many as the shared memory of kMinBlocks blocks per SM holds, 2 to 6; kBiased
  // at most 3, so that its 4 blocks per SM keep 74 KB in flight, not 147. The copy bandwidth needs ~36 KB per SM, and
  // past ~72 KB every KB in flight on every SM delays each load that hits L2 by ~25 ns (bench/gpu/queue_bench.cu):
  // q, the merge's partials, the GEMVs' x. q4r at 32k / 128k, ms a token: Q4_K weights 2.058 / 3.010 -> 2.017 /
  // 2.980, BF16 4.368 / 5.332 -> 4.305 / 5.271 (alone 18.8 -> 18.2 us at 32k, equal at 128k). fp8 capped at 3 lost
  // 0.05-0.12 ms; f16 has 3 either way (H200, session 34). fp8 using 3 or 2 of its 6 stages at the same 2 blocks per
  // SM lost 0.04-0.27 ms (Q4_K, 32k and 128k; session 35): its loop needs the depth.
  static constexpr int kStages = ring_stages(kRaw, kDecoded, kMinBlocks, D, kBiased ? 3 : 6);
  static constexpr int kWarpBytes = kStages * kRaw + kDecoded;
  // Tiles land by bulk copy (two instructions from one lane, against ~130 for the per-lane copies of an fp8 tile:
  // a quarter of its loop); f16 and bf16 keep the per-lane copies, which write the swizzled layout ldmatrix needs.
  static constexpr bool kBulk = kHasBulkCopy && !kDirect;
  // fp8: a fifth warp copies the tiles (kProducer). It never waits on the kernel before, so tiles keep landing in the
  // ring while the other warps wait for q, and it keeps kWindow tiles of the block in flight (2 a warp, 67 KB per SM
  // at 2 blocks), where each warp refilling its own ring kept 5 (169 KB): the KV encode's loads and q's, issued
  // meanwhile, queue behind fewer bytes (bench/gpu/phase_bench.cu: a short window with a deep ring). H200, session
  // 36, A/B in one call, two rounds: fp8 alone 22.2 -> 21.2 us at 32k, 68.6-68.9 -> 66.3-66.4 at 128k; Q4_K step
  // 2.104-2.115 -> 2.063-2.088 ms at 32k, 3.688-3.694 -> 3.545-3.566 at 128k (83.6 -> 86.6-86.9% of the roofline).
  // 3 tiles a warp in flight: no gain at 32k, 70.2 us at 128k; one lane issuing every copy of the block: ~3.2 TB/s.
  // q8 lost at 128k (68.7 -> 72.6 us); the rotated codecs stage q behind block barriers; q4's 4 blocks per SM leave
  // no registers for a fifth warp.
  static constexpr bool kProducer = C == CodecId::fp8 && kBulk;
  static constexpr int kWindow = 8;
  static constexpr int kBlockThreads = kThreads + (kProducer ? 32 : 0);
  // The warps' merge rows (red, at the end of the kernel). In the GQA form at head_dim 128 one store of O^T's
  // accumulators writes dims 32 (g % 4) + 4 (g / 4) + k of rows 2c (+ 1): with rows D + 2 floats apart they fall
  // in 8 banks, 4-8 lanes each, on the path of the kernel's last instructions (ncu, session 18: 0.24 M of fp8's 0.27 M
  // shared-store wavefronts at 32k were conflicts). Rows D + 4 apart and each 4-dim group's order XORed with
  // g % 4 (red_dim) put the 32 lanes on 32 banks.
  // kBiased stores dims 32 b + 16 r + 2 g (+ 1) of rows 2c (+ 1): rows D + 4 apart leave 2-way conflicts.
  static constexpr bool kRedSwizzle = kSwap && D == 128 && !kBiased;
  static constexpr int kRedRow = kRedSwizzle || kBiased ? D + 4 : D + 2;
  static constexpr int kMerge = kWarps * kRows * kRedRow * 4;
  static constexpr int kQ = kRows * D * 4;
  static constexpr int kSmem = kWarps * kWarpBytes > kMerge ? kWarps * kWarpBytes : kMerge;
  static_assert(kRow % 4 == 0 && kRaw % 16 == 0 && kSmem >= kQ);
};

// Byte offset of 16-byte piece `col` of token `row` in an f16 tile [16][D]: pieces are XOR-swizzled by row, so
// ldmatrix's eight row reads of one column fall in eight different bank groups.
template <int D>
__device__ __forceinline__ uint32_t swz(int row, int col) {
  return uint32_t(row * 2 * D + ((col ^ (row & 7)) << 4));
}

// First of the 4 consecutive dims that lane quad position c holds in k-step ks of S = Q K^T: k 2c, 2c+1 of the
// fragment are dims d, d+1 and k 2c+8, 2c+9 are d+2, d+3 (kKReg; kBiased: d, d+2 and d+1, d+3, in k-steps that each
// take one run of one block); the plain fragment order otherwise.
template <CodecId C, int D, bool kSwap = false>
__device__ __forceinline__ int k_dim(int ks, int c) {
  using G = Cfg<C, D, kSwap>;
  if constexpr (G::kBiased) return layout::kQBlock * (ks / 2) + 16 * (ks % 2) + 4 * c;
  else if constexpr (G::kKReg) return layout::word_value(C, c * G::kLaneWords + ks / G::kRuns, ks % G::kRuns);
  else return ks * 16 + 2 * c;
}

// V (kKReg): the code word of a token that lane g reads for its q-th run of n-tiles; for head_dim 128 rows the 32
// lanes' reads of one token pair fall in 32 different banks.
template <CodecId C, int D>
__device__ __forceinline__ int v_word(int g, int q) {
  constexpr int kQ = D / 32 / Cfg<C, D>::kRuns;
  return 2 * kQ * (g % 4) + g / 4 + 2 * q;
}
// Dim of O held by column n of n-tile dn (the plain order without kKReg).
template <CodecId C, int D>
__device__ __forceinline__ int o_dim(int dn, int n) {
  using G = Cfg<C, D>;
  if constexpr (G::kKReg)
    return layout::word_value(C, v_word<C, D>(n, dn / (4 * G::kRuns)), (dn / 4) % G::kRuns) + dn % 4;
  else
    return dn * 8 + n;
}

// The K rows of tokens t0 .. t0+15 of KV head `kh` in page `page` (their V rows lie a.v_offset further).
template <CodecId C, int D>
__device__ __forceinline__ const uint8_t* tile_rows(const DecodeArgs& a, const uint8_t* kh, int32_t page, int t0) {
  return kh + size_t(page) * a.page_bytes + size_t(t0 & (kPageTokens - 1)) * Cfg<C, D>::kRow;
}

// Starts the copy of tokens t0 .. t0+15 of KV head `kh` (one page, `page`: t0 is a multiple of 16) into a stage.
// Bytes past the first nvalid rows are zero-filled, not read, so those tokens decode to zeros (factor 0).
template <CodecId C, int D>
__device__ __forceinline__ void issue_tile(const DecodeArgs& a, const uint8_t* kh, int32_t page, int t0, int nvalid,
                                           uint32_t stage, int lane) {
  using G = Cfg<C, D>;
  constexpr int kPieces = G::kHalfTile / 16;
  const uint8_t* kr = tile_rows<C, D>(a, kh, page, t0);
  const int valid = nvalid * G::kRow;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const uint8_t* src = kr + (half ? a.v_offset : 0);
#pragma unroll
    for (int p0 = 0; p0 < kPieces; p0 += 32) {
      const int p = p0 + lane;
      if (kPieces % 32 == 0 || p < kPieces) {
        uint32_t dst = stage + half * G::kHalfTile;
        if constexpr (G::kDirect) dst += swz<D>(p / (D / 8), p % (D / 8));
        else dst += p * 16;
        cp_async16(dst, src + p * 16, min(16, max(0, valid - p * 16)));
      }
    }
  }
}

// The same tile by bulk copy (lane 0 alone): K rows then V rows, each run contiguous in its page, all 16 rows.
// Rows past the context hold whatever the page holds there; the loop zeroes them when the tile has landed.
template <CodecId C, int D>
__device__ __forceinline__ void issue_tile_bulk(const DecodeArgs& a, const uint8_t* kh, int32_t page, int t0,
                                                uint32_t stage, uint32_t bar) {
  using G = Cfg<C, D>;
  const uint8_t* kr = tile_rows<C, D>(a, kh, page, t0);
  mbar_expect_bytes(bar, G::kRaw);
  bulk_copy(stage, kr, G::kHalfTile, bar);
  bulk_copy<false>(stage + G::kHalfTile, kr + a.v_offset, G::kHalfTile, bar);
}

__device__ __forceinline__ uint32_t half2_bits(__half2 h) { return *reinterpret_cast<const uint32_t*>(&h); }

// A codec's codes decoded in registers: code words -> f16 pairs (kKReg) by layout::word_decode_half, or tq4's through
// a table of its levels; tq3's units (decode_tile) through a table of its levels. scale multiplies the row factors
// (kFold) where the decoded values leave a step out.
template <CodecId C>
struct CodeDecoder {
  static constexpr float scale = 1.0f;
  __device__ explicit CodeDecoder(const float*) {}
  __device__ void operator()(uint32_t w, __half2* h) const { layout::word_decode_half<C>(w, h); }
};
template <>
struct CodeDecoder<CodecId::tq4> {
  uint32_t lut[4];
  float scale;  // the levels' int8 step
  __device__ explicit CodeDecoder(const float* levels) : scale(layout::tq4_byte_lut(levels, lut)) {}
  __device__ void operator()(uint32_t w, __half2* h) const { layout::tq4_word_decode_half(w, lut, h); }
};
template <>
struct CodeDecoder<CodecId::tq3> {
  static constexpr float scale = 1.0f;
  uint32_t lut[4];
  __device__ explicit CodeDecoder(const float* levels) { layout::tq3_half_lut(levels, lut); }
};

// Raw K (kHalf 0) or V (1) rows of a stage -> f16 tile dst [16][D] (swizzled), for tq3, whose 3-bit codes do not
// fall into 4-byte words: each unit of 8 through the decoder's table (the levels rounded to f16 once, as the CPU's
// floats would round). The per-row gain (kFold) is left out of the values and stored per token in fac[16].
template <CodecId C, int D, int kHalf>
__device__ __forceinline__ void decode_tile(const uint8_t* raw, const CodeDecoder<C>& dec, uint8_t* dst, float* fac,
                                            int lane) {
  using G = Cfg<C, D>;
  static_assert(C == CodecId::tq3 && G::kFold, "tq3 only; the factor is left out of the values");
  constexpr int kUnits = D / layout::kUnit, kStep = 32 / kUnits;  // a warp step covers kStep tokens
  static_assert(32 % kUnits == 0);
  const int u = lane % kUnits, lt = lane / kUnits;
  // kB units decoded before any is stored: the compiler keeps a unit's shared loads (codes, levels) below the
  // previous unit's store, not knowing that they do not overlap, and one unit at a time waits out two load
  // latencies (as the prefill's decode_tile did: ncu, H200, session 16).
  constexpr int kIters = kTok / kStep, kB = kIters < 2 ? kIters : 2;
  static_assert(kIters % kB == 0);
#pragma unroll
  for (int i0 = 0; i0 < kIters; i0 += kB) {
    uint4 p[kB];
    float f[kB];
#pragma unroll
    for (int b = 0; b < kB; ++b) {
      const int tok = (i0 + b) * kStep + lt;
      const uint8_t* row = raw + kHalf * G::kHalfTile + tok * G::kRow;
      uint32_t h[4];
      f[b] = layout::tq3_unit_decode_half<false>(row, u, dec.lut, h);
      p[b] = make_uint4(h[0], h[1], h[2], h[3]);
    }
#pragma unroll
    for (int b = 0; b < kB; ++b) {
      const int tok = (i0 + b) * kStep + lt;
      *reinterpret_cast<uint4*>(dst + swz<D>(tok, u)) = p[b];
      if (u == 0) fac[tok] = f[b];
    }
  }
}

// K (kKReg): the lane's code words of tokens g and g + 8 (kw[0], kw[1]) decoded, block scales applied, one k-step
// at a time: f(ks, g_lo, g_hi, g8_lo, g8_hi) with the values of k 2c, 2c + 1 (lo) and 2c + 8, 2c + 9 (hi) of each
// token, which both kernel forms take as fragments (B of S = Q K^T, A of S^T = K Q^T).
template <CodecId C, int D, class F>
__device__ __forceinline__ void for_each_k_step(const uint32_t (&kw)[2][Cfg<C, D>::kLaneWords],
                                                const __half2 (&ksc)[2][Cfg<C, D>::kSlots],
                                                const CodeDecoder<C>& dec, const F& f) {
  using G = Cfg<C, D>;
#pragma unroll
  for (int i = 0; i < G::kLaneWords; ++i) {
    __half2 h[2][2 * G::kRuns];
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      dec(kw[nt][i], h[nt]);
      if constexpr (!G::kFold) {
#pragma unroll
        for (int k = 0; k < 2 * G::kRuns; ++k) h[nt][k] = __hmul2(h[nt][k], ksc[nt][i / G::kWpb]);
      }
    }
#pragma unroll
    for (int r = 0; r < G::kRuns; ++r) f(i * G::kRuns + r, h[0][2 * r], h[0][2 * r + 1], h[1][2 * r], h[1][2 * r + 1]);
  }
}

// V (kKReg): code word w of tokens 2c, 2c+1 (pair 0) and 2c+8, 2c+9 (pair 1), block scales applied, as
// h[pair][half][k]: the pair's two tokens side by side (bytes, tq4's nibbles, interleaved token by token), word half
// 0 (values 0, 1 of each run) or 1 (values 2, 3). Both kernel forms take these as fragments: B of O = P V, A of
// O^T = V^T P^T.
template <CodecId C, int D>
__device__ __forceinline__ void decode_v_word(const uint8_t* raw, int w, int c, const CodeDecoder<C>& dec,
                                              __half2 (&h)[2][2][2 * Cfg<C, D>::kRuns]) {
  using G = Cfg<C, D>;
  const uint8_t* vr = raw + G::kHalfTile + layout::codes_offset(C, D);
  uint32_t vw[4];
  __half2 vs[2];
#pragma unroll
  for (int t = 0; t < 4; ++t)
    vw[t] = *reinterpret_cast<const uint32_t*>(vr + (2 * c + (t & 1) + 8 * (t >> 1)) * G::kRow + 4 * w);
  if constexpr (!G::kFold) {
    const int blk = layout::word_value(C, w, 0) / layout::kQBlock;
    const uint8_t* sr = raw + G::kHalfTile + 2 * blk;
#pragma unroll
    for (int p = 0; p < 2; ++p)
      vs[p] = __halves2half2(__ushort_as_half(layout::load_u16<false>(sr + (2 * c + 8 * p) * G::kRow)),
                             __ushort_as_half(layout::load_u16<false>(sr + (2 * c + 8 * p + 1) * G::kRow)));
  }
#pragma unroll
  for (int p = 0; p < 2; ++p) {
    if constexpr (C == CodecId::tq4) {
      // e: values 0, 2, 4, 6 of both tokens, a byte each (first token's code in the low nibble); o: 1, 3, 5, 7.
      const uint32_t a = vw[2 * p], b = vw[2 * p + 1];
      const uint32_t e = (a & 0x0f0f0f0fu) | ((b << 4) & 0xf0f0f0f0u), o = ((a >> 4) & 0x0f0f0f0fu) | (b & 0xf0f0f0f0u);
      dec(__byte_perm(e, o, 0x6240), h[p][0]);  // values 0, 1 (run 0) and 4, 5 (run 1)
      dec(__byte_perm(e, o, 0x7351), h[p][1]);  // values 2, 3 and 6, 7
    } else {
      dec(__byte_perm(vw[2 * p], vw[2 * p + 1], 0x5140), h[p][0]);
      dec(__byte_perm(vw[2 * p], vw[2 * p + 1], 0x7362), h[p][1]);
    }
    if constexpr (!G::kFold) {
#pragma unroll
      for (int k = 0; k < 2 * G::kRuns; ++k) {
        h[p][0][k] = __hmul2(h[p][0][k], vs[p]);
        h[p][1][k] = __hmul2(h[p][1][k], vs[p]);
      }
    }
  }
}

// movmatrix: an 8x8 b16 matrix in mma fragment layout (lane 4g + c: row g, columns 2c, 2c + 1) transposed.
__device__ __forceinline__ uint32_t transpose8x8(uint32_t x) {
  uint32_t y;
  asm("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

// The GQA form's true dim of row gg (+ 8 if hi8) of O^T m-tile mt: the rows of two m-tiles come from one code word
// of V (decode_v_word's halves and runs), the word lane group gg reads for its q-th pair of m-tile runs. kBiased:
// m-tile 2b + r holds run r of block b, rows gg and gg + 8 its values 2gg and 2gg + 1 (attention_mma_q4.cuh).
template <CodecId C, int D>
__device__ __forceinline__ int swap_dim(int mt, int gg, int hi8) {
  using G = Cfg<C, D>;
  if constexpr (Cfg<C, D, true>::kBiased) return layout::kQBlock * (mt / 2) + 16 * (mt % 2) + 2 * gg + hi8;
  const int q = mt / (2 * G::kRuns), r = (mt / 2) % G::kRuns, mh = mt % 2;
  return layout::word_value(C, v_word<C, D>(gg, q), r) + 2 * mh + hi8;
}

// The GQA form's online softmax for lane (g, c): s[e] is the score of token g (e < 2) or g + 8 for head
// 2c + (e & 1); tokens from nvalid on are masked. The maxima are taken across the 8 lane groups, the sums stay per
// lane until the end. O^T is rescaled where a maximum rose; s becomes the tile's softmax weights.
template <int D>
__device__ __forceinline__ void swap_softmax(float (&s)[4], int nvalid, int g, float (&o)[D / 16][4], float& m0,
                                             float& m1, float& l0, float& l1) {
#pragma unroll
  for (int e = 0; e < 4; ++e)
    if (g + 8 * (e >> 1) >= nvalid) s[e] = -INFINITY;
  float mx0 = fmaxf(s[0], s[2]), mx1 = fmaxf(s[1], s[3]);
#pragma unroll
  for (int off = 4; off < 32; off <<= 1) {
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, off));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, off));
  }
  // Token 0 of the tile is valid, so the new maxima are finite.
  const auto [f0, f1] = raise_max(m0, m1, mx0, mx1);
  if (__any_sync(0xffffffffu, f0 != 1.0f || f1 != 1.0f)) {
#pragma unroll
    for (int mt = 0; mt < D / 16; ++mt) {
      o[mt][0] *= f0;
      o[mt][1] *= f1;
      o[mt][2] *= f0;
      o[mt][3] *= f1;
    }
  }
#pragma unroll
  for (int e = 0; e < 4; ++e) s[e] = exp2_fast(s[e] - (e & 1 ? m1 : m0));
  l0 = l0 * f0 + (s[0] + s[2]);
  l1 = l1 * f1 + (s[1] + s[3]);
}

// One tile of the GQA form for lane (g, c): S^T = K Q^T (A: K of tokens g, g + 8 as the K words kw already hold
// them; B: q of head g), the online softmax of heads 2c, 2c + 1 over the tile's 16 tokens, P^T through movmatrix
// as B, and O^T += V^T P^T (A: decode_v_word).
template <CodecId C, int D>
__device__ __forceinline__ void swap_tile(const uint8_t* raw, const uint32_t (&kw)[2][Cfg<C, D>::kLaneWords],
                                          const __half2 (&ksc)[2][Cfg<C, D>::kSlots], const CodeDecoder<C>& dec,
                                          const uint32_t (&qb)[D / 16][2], int nvalid, int g, int c,
                                          float (&o)[D / 16][4], float& m0, float& m1, float& l0, float& l1) {
  using G = Cfg<C, D>;
  float st[2][4] = {};  // two independent chains (k-step parity)
  for_each_k_step<C, D>(kw, ksc, dec, [&](int ks, __half2 g_lo, __half2 g_hi, __half2 g8_lo, __half2 g8_hi) {
    const uint32_t a[4] = {half2_bits(g_lo), half2_bits(g8_lo), half2_bits(g_hi), half2_bits(g8_hi)};
    mma_16816(st[ks & 1], a, qb[ks][0], qb[ks][1]);
  });
  // The row factors of the lane's tokens (g, g + 8: fp8's scale, tq4's gain) scale S and P.
  float fk[2] = {1.0f, 1.0f}, fv[2] = {1.0f, 1.0f};
  if constexpr (G::kFold) {
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      fk[t] = layout::load_f32<false>(raw + (8 * t + g) * G::kRow) * dec.scale;
      fv[t] = layout::load_f32<false>(raw + G::kHalfTile + (8 * t + g) * G::kRow) * dec.scale;
    }
  }
  float p[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) p[e] = (st[0][e] + st[1][e]) * fk[e >> 1];
  swap_softmax<D>(p, nvalid, g, o, m0, m1, l0, l1);
  // This lane's P (tokens g / g + 8, heads 2c, 2c + 1) is a fragment of two 8x8 blocks [token][head]; transposed,
  // lane (g, c) holds head g's tokens 2c, 2c + 1 (and + 8): the B fragment of P^T.
  const uint32_t pb0 = transpose8x8(pack_half2(p[0] * fv[0], p[1] * fv[0]));
  const uint32_t pb1 = transpose8x8(pack_half2(p[2] * fv[1], p[3] * fv[1]));
#pragma unroll
  for (int q = 0; q < D / 32 / G::kRuns; ++q) {
    __half2 h[2][2][2 * G::kRuns];
    decode_v_word<C, D>(raw, v_word<C, D>(g, q), c, dec, h);
#pragma unroll
    for (int r = 0; r < G::kRuns; ++r)
#pragma unroll
      for (int mh = 0; mh < 2; ++mh) {  // rows g, g + 8 <- values 2r, 2r + 1 of word half mh (swap_dim)
        const uint32_t a[4] = {half2_bits(h[0][mh][2 * r]), half2_bits(h[0][mh][2 * r + 1]),
                               half2_bits(h[1][mh][2 * r]), half2_bits(h[1][mh][2 * r + 1])};
        mma_16816(o[(q * G::kRuns + r) * 2 + mh], a, pb0, pb1);
      }
  }
}

// Where dim d of a merge row sits (Cfg::kRedSwizzle): its 4-dim group's order XORed with bits 5-6 of d (g % 4 of the
// lane that stores it), within the group, so the readers' consecutive dims stay conflict-free.
template <bool kSwizzle>
__device__ __forceinline__ int red_dim(int d) {
  return kSwizzle ? d ^ ((d >> 5) & 3) : d;
}

}  // namespace
}  // namespace kvtax::cuda::detail
