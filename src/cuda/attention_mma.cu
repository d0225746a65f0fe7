// Tensor-core flash-decode split kernel (attention_launch.h). Block: 4 warps, one KV head, one context chunk, up
// to 16 query heads of its GQA group as the M rows of mma.sync m16n8k16 (rows past the group are zero). Each warp
// walks its own tiles of 16 tokens (tiles w, w+4, ... of the chunk) with its own online softmax, so the loop needs
// no block barrier:
//   the tile's raw K and V rows land in a ring of kStages shared-memory stages, several tiles ahead: by two bulk
//   copies from lane 0 and an mbarrier per stage for the decoding codecs (rows past the context are zeroed when
//   they land), by per-lane cp.async into the swizzled layout for f16 (zero-fill past the chunk);
//   f16 rows are used as they land (ldmatrix); fp8 / q8 / q4 / q4r code words go from the stage straight into
//   mma B fragments (layout::word_decode_half, Cfg::kKReg); tq4 / tq3 are decoded by layout::unit_decode (the
//   CPU's format code) into an f16 tile [16][D]; a per-row factor (fp8 scale, tq gain) scales S and P instead;
//   S = Q K^T (two independent accumulator chains), online softmax in base 2 (q is pre-scaled by
//   log2 e / sqrt(D)), and O += P V with the S accumulators repacked as the A operand.
// Warps merge through shared memory at the end and write the same partial (unnormalised o, max, sum) as the
// scalar kernel, for merge_kernel.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdlib>
#include <string>

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

constexpr bool is_rotated(CodecId c) { return c == CodecId::q4r || c == CodecId::tq4 || c == CodecId::tq3; }

// Stages of a split kernel's ring, per warp: as many as the shared memory of min_blocks blocks per SM holds (227 KB
// per SM, 1 KB of it reserved per block; 256 bytes of static arrays), 2 to 6. A warp has (stages - 1) tiles in
// flight, and the bytes in flight per SM are what a memory-bound loop waits on (Little's law: ~3 us of loaded
// latency x 30 GB/s per SM ~ 100 KB). Where the cap of 6 lets more blocks than min_blocks fit (small rows: q4,
// q4r), a shorter ring that fits as many also leaves room for a block of the merge kernel, if there is one: the
// merge's blocks start while the split kernel runs (pdl.cuh), and the next split's blocks start while the merge
// runs; with no room beside it, q4r's attention took 75 us at 128k instead of 65 (H200, session 14).
constexpr int ring_stages(int raw, int decoded, int min_blocks, int d) {
  constexpr int kSm = 227 << 10, kBlockExtra = (1 << 10) + 256;
  auto block = [&](int s) { return kWarps * (s * raw + decoded) + kBlockExtra; };
  const int budget = ((kSm / min_blocks - kBlockExtra) / kWarps - decoded) / raw;
  const int stages = budget < 2 ? 2 : budget > 6 ? 6 : budget, fit = kSm / block(stages);
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
  static constexpr bool kDirect = C == CodecId::f16;        // raw rows are already the f16 tile
  static constexpr int kTile = kTok * D * 2;                // one decoded f16 tile (K, then V in the same place)
  static constexpr bool kFold = layout::kRowFactor<C>;     // per-row factor folded into S and P
  // K and V codes go from the raw rows straight into B fragments, with no decoded tile in shared memory. K: each
  // lane of a quad takes a contiguous quarter of its token's code words, and q's dims are permuted to match (a dot
  // product does not care about the order of its terms). V (k runs along tokens): a lane reads the same code word
  // of its 4 tokens, interleaves the bytes of token pairs and decodes the interleaved word; O's dims come out
  // permuted (o_dim) and are put back in place when the warps merge.
  static constexpr bool kKReg = C == CodecId::fp8 || C == CodecId::q8 || C == CodecId::q4 || C == CodecId::q4r;
  static constexpr int kRuns = layout::word_runs(C);       // k-steps (4 values per lane each) per code word
  static constexpr int kLaneWords = D / 16 / kRuns;        // code words of one token per lane
  // Block-scaled codes (q8, q4, q4r): code words per block of kQBlock values, and the blocks a lane's K words span.
  static constexpr int kWpb = layout::kQBlock / (4 * kRuns), kSlots = (kLaneWords + kWpb - 1) / kWpb;
  // Blocks per SM the registers are capped for, and so the stages each gets. Two, with the deepest rings, for the
  // codecs whose loop keeps up with the bytes (f16, fp8, q8: 5 tiles in flight per warp for the 1-byte codes);
  // q4 and q4r time the same at 2 and 4 (bound by instructions); tq4 / tq3, which decode each tile into shared
  // memory, need the 12 warps of 3; the heads-as-rows form at head_dim 256 the registers of 1. H200, session 13,
  // against 3 (fp8) and 4 (q8) blocks: fp8 128k 80.7 -> 77.1 us, 32k 29.0 -> 27.1; q8 128k 82.7 -> 75.0, 32k
  // 31.4 -> 27.1; tq4 at 2: 144.5 -> 159.5 at 128k.
  static constexpr bool kTq = C == CodecId::tq4 || C == CodecId::tq3;
  static constexpr int kMinBlocks = !kSwap && D >= 256 ? 1 : kTq ? 3 : 2;
  static constexpr int kDecoded = kDirect || kKReg ? 0 : kTile + 2 * kTok * 4;  // decoded tile + row factors
  // Stages of the ring (ring_stages): as many as the shared memory of kMinBlocks blocks per SM holds, 2 to 6.
  static constexpr int kStages = ring_stages(kRaw, kDecoded, kMinBlocks, D);
  static constexpr int kWarpBytes = kStages * kRaw + kDecoded;
  // Tiles land by bulk copy (two instructions from one lane, against ~130 for the per-lane copies of an fp8 tile:
  // a quarter of its loop); f16 keeps the per-lane copies, which write the swizzled layout its ldmatrix reads need.
  static constexpr bool kBulk = kHasBulkCopy && !kDirect;
  // The warps' merge rows (red, at the end of the kernel). In the GQA form at head_dim 128 one store of O^T's
  // accumulators writes dims 32 (g % 4) + 4 (g / 4) + k of rows 2c (+ 1): with rows D + 2 floats apart they fall
  // in 8 banks, 4-8 lanes each, on the path of the kernel's last instructions (ncu, session 18: 0.24 M of fp8's 0.27 M
  // shared-store wavefronts at 32k were conflicts). Rows D + 4 apart and each 4-dim group's order XORed with
  // g % 4 (red_dim) put the 32 lanes on 32 banks.
  static constexpr bool kRedSwizzle = kSwap && D == 128;
  static constexpr int kRedRow = kRedSwizzle ? D + 4 : D + 2;
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
// fragment are dims d, d+1 and k 2c+8, 2c+9 are d+2, d+3 (kKReg); the plain fragment order otherwise.
template <CodecId C, int D>
__device__ __forceinline__ int k_dim(int ks, int c) {
  using G = Cfg<C, D>;
  if constexpr (G::kKReg) return layout::word_value(C, c * G::kLaneWords + ks / G::kRuns, ks % G::kRuns);
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

// Starts the copy of tokens t0 .. t0+15 of KV head `kh` (one page, `page`: t0 is a multiple of 16) into a stage.
// Bytes past the first nvalid rows are zero-filled, not read, so those tokens decode to zeros (factor 0).
template <CodecId C, int D>
__device__ __forceinline__ void issue_tile(const DecodeArgs& a, const uint8_t* kh, int32_t page, int t0, int nvalid,
                                           uint32_t stage, int lane) {
  using G = Cfg<C, D>;
  constexpr int kPieces = G::kHalfTile / 16;
  const uint8_t* kr = kh + size_t(page) * a.page_bytes + size_t(t0 & (kPageTokens - 1)) * G::kRow;
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
  const uint8_t* kr = kh + size_t(page) * a.page_bytes + size_t(t0 & (kPageTokens - 1)) * G::kRow;
  mbar_expect_bytes(bar, G::kRaw);
  bulk_copy(stage, kr, G::kHalfTile, bar);
  bulk_copy(stage + G::kHalfTile, kr + a.v_offset, G::kHalfTile, bar);
}

__device__ __forceinline__ uint32_t half2_bits(__half2 h) { return *reinterpret_cast<const uint32_t*>(&h); }

// Raw K (kHalf 0) or V (1) rows of a stage -> f16 tile dst [16][D] (swizzled), for the codebook codecs (tq4, tq3):
// decoded to floats (layout::unit_decode) and rounded once. Their per-row gain (kFold) is left out of the values and
// stored per token in fac[16].
template <CodecId C, int D, int kHalf>
__device__ __forceinline__ void decode_tile(const uint8_t* raw, const float* lv, uint8_t* dst, float* fac, int lane) {
  using G = Cfg<C, D>;
  static_assert(G::kFold, "the factor is left out of the values");
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
      float y[8];
      f[b] = layout::unit_decode<C, false>(row, D, u, lv, y);
      p[b] = make_uint4(pack_half2(y[0], y[1]), pack_half2(y[2], y[3]), pack_half2(y[4], y[5]),
                        pack_half2(y[6], y[7]));
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
                                                const __half2 (&ksc)[2][Cfg<C, D>::kSlots], const F& f) {
  using G = Cfg<C, D>;
#pragma unroll
  for (int i = 0; i < G::kLaneWords; ++i) {
    __half2 h[2][2 * G::kRuns];
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      layout::word_decode_half<C>(kw[nt][i], h[nt]);
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
// h[pair][half][k]: the pair's two tokens side by side (bytes interleaved token by token), word half 0 (values 0, 1
// of each run) or 1 (values 2, 3). Both kernel forms take these as fragments: B of O = P V, A of O^T = V^T P^T.
template <CodecId C, int D>
__device__ __forceinline__ void decode_v_word(const uint8_t* raw, int w, int c, __half2 (&h)[2][2][2 * Cfg<C, D>::kRuns]) {
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
    layout::word_decode_half<C>(__byte_perm(vw[2 * p], vw[2 * p + 1], 0x5140), h[p][0]);
    layout::word_decode_half<C>(__byte_perm(vw[2 * p], vw[2 * p + 1], 0x7362), h[p][1]);
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
// of V (decode_v_word's halves and runs), the word lane group gg reads for its q-th pair of m-tile runs.
template <CodecId C, int D>
__device__ __forceinline__ int swap_dim(int mt, int gg, int hi8) {
  using G = Cfg<C, D>;
  const int q = mt / (2 * G::kRuns), r = (mt / 2) % G::kRuns, mh = mt % 2;
  return layout::word_value(C, v_word<C, D>(gg, q), r) + 2 * mh + hi8;
}

// One tile of the GQA form for lane (g, c): S^T = K Q^T (A: K of tokens g, g + 8 as the K words kw already hold
// them; B: q of head g), the online softmax of heads 2c, 2c + 1 over the tile's 16 tokens (a max across the 8 lane
// groups; sums per lane until the end), P^T through movmatrix as B, and O^T += V^T P^T (A: decode_v_word).
template <CodecId C, int D>
__device__ __forceinline__ void swap_tile(const uint8_t* raw, const uint32_t (&kw)[2][Cfg<C, D>::kLaneWords],
                                          const __half2 (&ksc)[2][Cfg<C, D>::kSlots], const uint32_t (&qb)[D / 16][2],
                                          int nvalid, int g, int c, float (&o)[D / 16][4], float& m0, float& m1,
                                          float& l0, float& l1) {
  using G = Cfg<C, D>;
  float st[2][4] = {};  // two independent chains (k-step parity)
  for_each_k_step<C, D>(kw, ksc, [&](int ks, __half2 g_lo, __half2 g_hi, __half2 g8_lo, __half2 g8_hi) {
    const uint32_t a[4] = {half2_bits(g_lo), half2_bits(g8_lo), half2_bits(g_hi), half2_bits(g8_hi)};
    mma_16816(st[ks & 1], a, qb[ks][0], qb[ks][1]);
  });
  // s[e]: token g (e < 2) or g + 8, head 2c + (e & 1). fp8's row scales of those tokens scale S and P.
  float fk[2] = {1.0f, 1.0f}, fv[2] = {1.0f, 1.0f};
  if constexpr (G::kFold) {
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      fk[t] = layout::load_f32<false>(raw + (8 * t + g) * G::kRow);
      fv[t] = layout::load_f32<false>(raw + G::kHalfTile + (8 * t + g) * G::kRow);
    }
  }
  float s[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    s[e] = (st[0][e] + st[1][e]) * fk[e >> 1];
    if (g + 8 * (e >> 1) >= nvalid) s[e] = -INFINITY;
  }
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
  float p[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) p[e] = exp2_fast(s[e] - (e & 1 ? m1 : m0));
  l0 = l0 * f0 + (p[0] + p[2]);
  l1 = l1 * f1 + (p[1] + p[3]);
  // This lane's P (tokens g / g + 8, heads 2c, 2c + 1) is a fragment of two 8x8 blocks [token][head]; transposed,
  // lane (g, c) holds head g's tokens 2c, 2c + 1 (and + 8): the B fragment of P^T.
  const uint32_t pb0 = transpose8x8(pack_half2(p[0] * fv[0], p[1] * fv[0]));
  const uint32_t pb1 = transpose8x8(pack_half2(p[2] * fv[1], p[3] * fv[1]));
#pragma unroll
  for (int q = 0; q < D / 32 / G::kRuns; ++q) {
    __half2 h[2][2][2 * G::kRuns];
    decode_v_word<C, D>(raw, v_word<C, D>(g, q), c, h);
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

// grid (n_splits, n_kv_heads, row groups of 16 query heads; kSwap: one group of up to 8).
template <CodecId C, int D, bool kSwap>
__global__ void __launch_bounds__(kThreads, Cfg<C, D, kSwap>::kMinBlocks) mma_split_kernel(DecodeArgs a) {
  using G = Cfg<C, D, kSwap>;
  static_assert(!kSwap || G::kKReg, "the GQA form decodes K and V straight into fragments");
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ float lv[16];
  __shared__ __align__(8) uint64_t bars[kWarps][G::kStages];  // kBulk: one per stage, phase j / kStages

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, c = lane % 4;
  const int split = blockIdx.x, h = blockIdx.y;
  const int r0 = blockIdx.z * kRows, nr = min(kRows, a.n_rep - r0);

  // With len_dev (a captured graph replays this launch at every length) the chunk follows the length; chunks
  // past it are empty and leave max -inf / sum 0, which the merge weighs as nothing.
  const int len = a.len_dev ? *a.len_dev : a.len;
  const int chunk =
      a.len_dev ? ((len + a.n_splits - 1) / a.n_splits + kChunkAlign - 1) / kChunkAlign * kChunkAlign : a.chunk;
  const int c0 = split * chunk, c1 = min(len, c0 + chunk);
  const int n_tiles = c0 < c1 ? (c1 - c0 + kTok - 1) / kTok : 0;
  const int my_tiles = n_tiles > warp ? (n_tiles - warp + kWarps - 1) / kWarps : 0;
  const uint8_t* kh = a.pool + size_t(h) * a.head_stride;

  uint8_t* wb = smem + warp * G::kWarpBytes;
  const uint32_t ws = smem_addr(wb);
  uint8_t* td = wb + G::kStages * G::kRaw;              // decoded K, then V tile (not used by f16 and kKReg)
  float* fac = reinterpret_cast<float*>(td + G::kTile);  // per-row factors of the tile: K 16, V 16 (kFold)
  auto tile_t0 = [&](int j) { return c0 + (warp + j * kWarps) * kTok; };
  // Page-table entries are loaded a tile ahead of their copy: a copy that waited on its entry would expose a
  // memory round trip per tile (the asm memory clobbers keep the compiler from hoisting the load itself).
  auto page_of = [&](int j) { return j < my_tiles ? __ldg(a.pages + (tile_t0(j) >> kPageShift)) : 0; };
  int32_t pg[G::kStages];
#pragma unroll
  for (int j = 0; j < G::kStages; ++j) pg[j] = page_of(j);
  auto bar = [&](int j) { return smem_addr(&bars[warp][j % G::kStages]); };
  // Starts the copy of the warp's tile j (page entry pg_j) into its stage.
  auto issue = [&](int j, int32_t pg_j) {
    const uint32_t stage = ws + (j % G::kStages) * G::kRaw;
    if constexpr (G::kBulk) {
      if (lane == 0 && j < my_tiles) issue_tile_bulk<C, D>(a, kh, pg_j, tile_t0(j), stage, bar(j));
    } else {
      if (j < my_tiles) issue_tile<C, D>(a, kh, pg_j, tile_t0(j), c1 - tile_t0(j), stage, lane);
      cp_commit();
    }
  };
  // The ring's barriers and its first kStages - 1 tiles (stages 0 .. kStages - 2; q is staged beyond them).
  auto start_copies = [&] {
    if constexpr (G::kBulk) {
      if (lane == 0)
#pragma unroll
        for (int j = 0; j < G::kStages; ++j) mbar_init(bar(j), 1);
      __syncwarp();
    }
#pragma unroll
    for (int j = 0; j < G::kStages - 1; ++j) issue(j, pg[j]);
  };
  // Programmatic dependent launch (pdl.cuh): until the wait, the kernels before this one may still run. Only the
  // newest row is being written then (by the KV encode), and it lies in the last chunk: every other block starts its
  // copies now, and the last one puts its first tiles into L2 meanwhile (L2 is where the encode's write lands too, so
  // a prefetch cannot go stale). q, also the encode's, is read after the wait.
  const bool early = c1 < len;
  if (early) start_copies();
  else if (lane < 2 * (G::kStages - 1) && lane / 2 < my_tiles) {
    const int j = lane / 2;
    prefetch_l2_bulk(kh + size_t(page_of(j)) * a.page_bytes + size_t(tile_t0(j) & (kPageTokens - 1)) * G::kRow +
                         (lane % 2 ? a.v_offset : 0),
                     G::kHalfTile);
  }
  pdl_trigger();  // the merge may launch: it waits for this whole grid
  pdl_wait();

  // The A fragments (f16) of the group's q rows, scaled by log2 e / sqrt(D) (and rotated). Rotated codecs stage the
  // rows in shared memory first, a warp per row in registers; the others read their fragments from global memory,
  // issued before the first tiles' copies so that both round trips overlap (packed after the copies are issued).
  const float qscale = rsqrtf(float(D)) * kLog2e;
  uint32_t qf[D / 16][4];  // A fragments: rows g and g + 8
  uint32_t qb[D / 16][2];  // kSwap: B fragments of Q^T, column g (head g)
  float2 qraw[D / 16][4];  // non-rotated codecs: this lane's q values, loaded ahead of the copies
  if constexpr (is_rotated(C)) {
    // Row r in warp (r % kWarps)'s part of the block, beyond the stages the first copies fill: its last stage, or
    // its decoded tile where it has one.
    constexpr int kQAt = G::kDecoded ? G::kStages * G::kRaw : (G::kStages - 1) * G::kRaw;
    static_assert((G::kDecoded ? G::kDecoded : G::kRaw) >= kRows / kWarps * D * 4, "q's rows fit");
    auto q_row = [&](int r) {
      return reinterpret_cast<float*>(smem + (r % kWarps) * G::kWarpBytes + kQAt) + (r / kWarps) * D;
    };
    constexpr int kPer = D / 32;
    for (int r = warp; r < kRows; r += kWarps) {
      float v[kPer];
#pragma unroll
      for (int k = 0; k < kPer; ++k)
        v[k] = r < nr ? a.q[(size_t(h) * a.n_rep + r0 + r) * D + kPer * lane + k] * qscale : 0.0f;
      if (r < nr) rotate_warp<D>(v, a.signs, lane, 1.0f / sqrtf(float(D)));
#pragma unroll
      for (int k = 0; k < kPer; ++k) q_row(r)[kPer * lane + k] = v[k];
    }
    if (tid < 16) lv[tid] = tid < a.n_levels ? a.levels[tid] : 0.0f;
    __syncthreads();
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      const int d0 = k_dim<C, D>(ks, c), hi = G::kKReg ? 2 : 8;
      const float* ra = q_row(g) + d0;
      const float* rb = q_row(g + 8) + d0;
      if constexpr (kSwap) {
        qb[ks][0] = pack_half2(ra[0], ra[1]);
        qb[ks][1] = pack_half2(ra[hi], ra[hi + 1]);
      } else {
        qf[ks][0] = pack_half2(ra[0], ra[1]);
        qf[ks][1] = pack_half2(rb[0], rb[1]);
        qf[ks][2] = pack_half2(ra[hi], ra[hi + 1]);
        qf[ks][3] = pack_half2(rb[hi], rb[hi + 1]);
      }
    }
    __syncthreads();  // q's rows are overwritten by the stages
  } else {
    const float* qg = a.q + (size_t(h) * a.n_rep + r0) * D;
    auto load = [&](int r, int d) {
      return r < nr ? *reinterpret_cast<const float2*>(qg + r * D + d) : make_float2(0.0f, 0.0f);
    };
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      const int d0 = k_dim<C, D>(ks, c), hi = G::kKReg ? 2 : 8;
      qraw[ks][0] = load(g, d0);
      qraw[ks][2] = load(g, d0 + hi);
      if constexpr (!kSwap) {
        qraw[ks][1] = load(g + 8, d0);
        qraw[ks][3] = load(g + 8, d0 + hi);
      }
    }
  }

  if (!early) start_copies();
  int32_t pg_next = pg[G::kStages - 1];  // entry of the next tile to copy
  if constexpr (!is_rotated(C)) {
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        if constexpr (kSwap) {
          if (i % 2 == 0) qb[ks][i / 2] = pack_half2(qraw[ks][i].x * qscale, qraw[ks][i].y * qscale);
        } else {
          qf[ks][i] = pack_half2(qraw[ks][i].x * qscale, qraw[ks][i].y * qscale);
        }
      }
  }

  // This lane's ldmatrix rows: K (non-transposed, tokens x dims) and V (transposed).
  const int k_tok = (lane & 7) + ((lane >> 4) << 3), k_hi = (lane >> 3) & 1;
  const int v_tok = (lane & 7) + (((lane >> 3) & 1) << 3), v_hi = lane >> 4;

  // O (rows g, g + 8; n-tiles of 8 dims) or, kSwap, O^T (m-tiles of 16 dims; columns 2c, 2c + 1 = heads).
  constexpr int kOTiles = kSwap ? D / 16 : D / 8;
  float o[kOTiles][4];
#pragma unroll
  for (int dn = 0; dn < kOTiles; ++dn) o[dn][0] = o[dn][1] = o[dn][2] = o[dn][3] = 0.0f;
  // Running max and sum of rows g and g + 8; kSwap: of heads 2c and 2c + 1 (the sums this lane's tokens only).
  float ma = -INFINITY, mb = -INFINITY, la = 0.0f, lb = 0.0f;

  for (int j = 0; j < my_tiles; ++j) {
    const int t0 = tile_t0(j), nvalid = min(kTok, c1 - t0);
    uint8_t* stage = wb + (j % G::kStages) * G::kRaw;
    if constexpr (G::kBulk) {
      mbar_wait(bar(j), (j / G::kStages) & 1);
      if (nvalid < kTok) {  // the context's last tile: its rows past the end decode to 0 (factor 0)
        for (int i = nvalid * G::kRow + 4 * lane; i < G::kHalfTile; i += 128) {
          *reinterpret_cast<uint32_t*>(stage + i) = 0;
          *reinterpret_cast<uint32_t*>(stage + G::kHalfTile + i) = 0;
        }
      }
    } else {
      cp_wait<G::kStages - 2>();
    }
    __syncwarp();  // also: every lane is past tile j - 1, whose stage is refilled below
    const uint8_t* raw = stage;
    // kKReg: this lane's K code words of tokens g and g + 8, and (block-scaled codes) the f16 scales they need.
    constexpr int kWpb = G::kWpb, kSlots = G::kSlots;
    uint32_t kw[2][G::kLaneWords];
    __half2 ksc[2][kSlots];
    if constexpr (G::kKReg) {
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        const uint8_t* row = raw + (nt * 8 + g) * G::kRow;
        const uint8_t* words = row + layout::codes_offset(C, D) + 4 * c * G::kLaneWords;
#pragma unroll
        for (int i = 0; i < G::kLaneWords; ++i) kw[nt][i] = *reinterpret_cast<const uint32_t*>(words + 4 * i);
        if constexpr (!G::kFold) {
#pragma unroll
          for (int sl = 0; sl < kSlots; ++sl) {
            const int blk = layout::word_value(C, c * G::kLaneWords + sl * kWpb, 0) / layout::kQBlock;
            ksc[nt][sl] = __half2half2(__ushort_as_half(layout::load_u16<false>(row + 2 * blk)));
          }
        }
      }
    }
    uint32_t kt = 0, vt;
    if constexpr (G::kDirect) {
      kt = ws + (j % G::kStages) * G::kRaw;
      vt = kt + G::kHalfTile;
    } else if constexpr (G::kKReg) {
      vt = 0;
    } else {
      decode_tile<C, D, 0>(raw, lv, td, fac, lane);
      __syncwarp();
      kt = vt = smem_addr(td);
    }
    {  // refill the stage tile j - 1 used (every lane is past it)
      const int jn = j + G::kStages - 1;
      issue(jn, pg_next);
      pg_next = page_of(jn + 1);
    }

    if constexpr (kSwap) {
      swap_tile<C, D>(raw, kw, ksc, qb, nvalid, g, c, o, ma, mb, la, lb);
    } else {
      float s2[2][2][4];  // [k-step parity][token n-tile]: two independent chains
#pragma unroll
      for (int p = 0; p < 2; ++p)
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) s2[p][nt][0] = s2[p][nt][1] = s2[p][nt][2] = s2[p][nt][3] = 0.0f;
      if constexpr (G::kKReg) {
        for_each_k_step<C, D>(kw, ksc, [&](int ks, __half2 g_lo, __half2 g_hi, __half2 g8_lo, __half2 g8_hi) {
          mma_16816(s2[ks & 1][0], qf[ks], half2_bits(g_lo), half2_bits(g_hi));
          mma_16816(s2[ks & 1][1], qf[ks], half2_bits(g8_lo), half2_bits(g8_hi));
        });
      } else {
#pragma unroll
        for (int ks = 0; ks < D / 16; ++ks) {
          uint32_t b[4];
          ldsm_x4(kt + swz<D>(k_tok, 2 * ks + k_hi), b);
          mma_16816(s2[ks & 1][0], qf[ks], b[0], b[1]);
          mma_16816(s2[ks & 1][1], qf[ks], b[2], b[3]);
        }
      }
      if constexpr (!G::kDirect && !G::kKReg) {  // K is in registers now: V takes its place
        __syncwarp();
        decode_tile<C, D, 1>(raw, lv, td, fac + kTok, lane);
        __syncwarp();
      }
      // This lane's tokens: 2c, 2c+1 (n-tile 0) and 8+2c, 9+2c (n-tile 1), for both of its rows.
      float fk[2][2], fv[2][2];
      if constexpr (G::kFold) {
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
          if constexpr (G::kKReg) {  // the row scales themselves (word_decode_half gives the e4m3 values)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const uint8_t* kr = raw + (nt * 8 + 2 * c + e) * G::kRow;
              fk[nt][e] = layout::load_f32<false>(kr);
              fv[nt][e] = layout::load_f32<false>(kr + G::kHalfTile);
            }
          } else {
            const float2 k2 = *reinterpret_cast<const float2*>(fac + nt * 8 + 2 * c);
            const float2 v2 = *reinterpret_cast<const float2*>(fac + kTok + nt * 8 + 2 * c);
            fk[nt][0] = k2.x, fk[nt][1] = k2.y, fv[nt][0] = v2.x, fv[nt][1] = v2.y;
          }
        }
      }
      float s[2][4];
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          s[nt][e] = s2[0][nt][e] + s2[1][nt][e];
          if constexpr (G::kFold) s[nt][e] *= fk[nt][e & 1];
          if (nt * 8 + 2 * c + (e & 1) >= nvalid) s[nt][e] = -INFINITY;
        }
      float mxa = fmaxf(fmaxf(s[0][0], s[0][1]), fmaxf(s[1][0], s[1][1]));
      float mxb = fmaxf(fmaxf(s[0][2], s[0][3]), fmaxf(s[1][2], s[1][3]));
      quad_max(mxa, mxb);
      // Token 0 of the tile is valid, so the new maxima are finite (exp2(-inf) = 0 rescales the empty start).
      const auto [ca, cb] = raise_max(ma, mb, mxa, mxb);
      // Past the first tiles the maxima rarely move, and the warp then skips the multiplies.
      if (__any_sync(0xffffffffu, ca != 1.0f || cb != 1.0f)) scale_rows(o, ca, cb);
      uint32_t pf[4];
      float sa = 0.0f, sb = 0.0f;
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        const float p0 = exp2_fast(s[nt][0] - ma), p1 = exp2_fast(s[nt][1] - ma);
        const float p2 = exp2_fast(s[nt][2] - mb), p3 = exp2_fast(s[nt][3] - mb);
        sa += p0 + p1;
        sb += p2 + p3;
        if constexpr (G::kFold) {
          pf[2 * nt] = pack_half2(p0 * fv[nt][0], p1 * fv[nt][1]);
          pf[2 * nt + 1] = pack_half2(p2 * fv[nt][0], p3 * fv[nt][1]);
        } else {
          pf[2 * nt] = pack_half2(p0, p1);
          pf[2 * nt + 1] = pack_half2(p2, p3);
        }
      }
      la = la * ca + sa;
      lb = lb * cb + sb;
      if constexpr (G::kKReg) {
        // Tokens 2c, 2c+1 (b0 of the fragment) and 2c+8, 2c+9 (b1); one code word of each per run of n-tiles.
        constexpr int kQ = D / 32 / G::kRuns;
#pragma unroll
        for (int q = 0; q < kQ; ++q) {
          const int w = v_word<C, D>(g, q);
          __half2 h[2][2][2 * G::kRuns];
          decode_v_word<C, D>(raw, w, c, h);
#pragma unroll
          for (int r = 0; r < G::kRuns; ++r)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int dn = (q * G::kRuns + r) * 4 + e, k = 2 * r + (e & 1);
              mma_16816(o[dn], pf, half2_bits(h[0][e >> 1][k]), half2_bits(h[1][e >> 1][k]));
            }
        }
      } else {
#pragma unroll
        for (int dp = 0; dp < D / 16; ++dp) {
          uint32_t b[4];
          ldsm_x4_trans(vt + swz<D>(v_tok, 2 * dp + v_hi), b);
          mma_16816(o[2 * dp], pf, b[0], b[1]);
          mma_16816(o[2 * dp + 1], pf, b[2], b[3]);
        }
      }
    }
  }
  cp_wait<0>();

  // Merge the warps, then write this chunk's partial (unnormalised output, max, sum) for rows of the group.
  __syncthreads();  // every warp is done with its stages
  float* red = reinterpret_cast<float*>(smem);  // [kWarps][kRows][kRedRow]: D dims (red_dim), max, sum
  constexpr int kRR = G::kRedRow;
  constexpr bool kSw = G::kRedSwizzle;
  // This lane's two rows of red: heads g and g + 8, or (kSwap) heads 2c and 2c + 1, whose sums so far cover only
  // this lane's tokens. Accumulator e of a tile is row e >> 1 at dim e & 1 of the pair, or (kSwap: O^T) the reverse.
  if constexpr (kSwap) {
#pragma unroll
    for (int off = 4; off < 32; off <<= 1) {
      la += __shfl_xor_sync(0xffffffffu, la, off);
      lb += __shfl_xor_sync(0xffffffffu, lb, off);
    }
  } else {
    quad_sum(la, lb);
  }
  {
    float* ra = red + (warp * kRows + (kSwap ? 2 * c : g)) * kRR;
    float* rb = ra + (kSwap ? 1 : 8) * kRR;
#pragma unroll
    for (int t = 0; t < kOTiles; ++t) {
      int d[2];
      if constexpr (kSwap) d[0] = swap_dim<C, D>(t, g, 0), d[1] = swap_dim<C, D>(t, g, 1);
      else d[0] = o_dim<C, D>(t, 2 * c), d[1] = o_dim<C, D>(t, 2 * c + 1);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = kSwap ? e & 1 : e >> 1, dim = d[kSwap ? e >> 1 : e & 1];
        (row ? rb : ra)[red_dim<kSw>(dim)] = o[t][e];
      }
    }
    if ((kSwap ? g : c) == 0) {
      ra[D] = ma;
      ra[D + 1] = la;
      rb[D] = mb;
      rb[D + 1] = lb;
    }
  }
  __syncthreads();
  for (int i = tid; i < nr * D; i += kThreads) {
    const int r = i / D, dd = i % D;
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) M = fmaxf(M, red[(w * kRows + r) * kRR + D]);
    float o_sum = 0.0f, L = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float* rw = red + (w * kRows + r) * kRR;
      if (rw[D] == -INFINITY) continue;  // warp saw no token of this chunk
      const float wt = exp2f(rw[D] - M);
      o_sum = fmaf(wt, rw[red_dim<kSw>(dd)], o_sum);
      L = fmaf(wt, rw[D + 1], L);
    }
    float* part = a.part + ((size_t(h) * a.n_rep + r0 + r) * a.n_splits + split) * (D + 2);
    part[dd] = o_sum;
    if (dd == 0) {
      part[D] = M;
      part[D + 1] = L;
    }
  }
}

// The kernel with its dynamic shared memory allowed (once per instantiation).
template <CodecId C, int D, bool kSwap>
cudaError_t prepared() {
  static const cudaError_t e = cudaFuncSetAttribute(
      mma_split_kernel<C, D, kSwap>, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg<C, D, kSwap>::kSmem);
  return e;
}

// The GQA form for every register-fed codec when a group has up to 8 query heads (KVTAX_DECODE_GQA=0: never, for
// measurements). H200: it took q4 from 69.2 to 62.5 us at 128k and q4r from 77.4 to 69.9 (session 9); fp8, which
// lost in it at 3 blocks per SM, gains at 2: 78.4 -> 76.4 us at 128k, 26.6 -> 25.9 at 32k (session 14).
bool gqa_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("KVTAX_DECODE_GQA");
    return !e || std::string(e) != "0";
  }();
  return on;
}

// Calls f.template operator()<kSwap>() with the form the launch takes.
template <CodecId C, int D, class F>
cudaError_t with_form(int n_rep, const F& f) {
  if constexpr (Cfg<C, D>::kKReg) {
    if (n_rep <= 8 && gqa_enabled()) return f.template operator()<true>();
  }
  return f.template operator()<false>();
}

template <CodecId C, int D>
cudaError_t launch_codec_dim(const DecodeArgs& a, cudaStream_t st) {
  return with_form<C, D>(a.n_rep, [&]<bool kSwap>() {
    if (cudaError_t e = prepared<C, D, kSwap>(); e != cudaSuccess) return e;
    const dim3 grid(a.n_splits, a.n_kv_heads, (a.n_rep + kRows - 1) / kRows);
    return launch_pdl_smem(mma_split_kernel<C, D, kSwap>, grid, kThreads, Cfg<C, D, kSwap>::kSmem, st, a);
  });
}

template <CodecId C, int D>
cudaError_t occupancy_codec_dim(int n_rep, int* blocks) {
  return with_form<C, D>(n_rep, [&]<bool kSwap>() {
    if (cudaError_t e = prepared<C, D, kSwap>(); e != cudaSuccess) return e;
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, mma_split_kernel<C, D, kSwap>, kThreads,
                                                         Cfg<C, D, kSwap>::kSmem);
  });
}

// The codecs the tensor-core kernel takes (f32 keeps f32 precision and bf16 can exceed f16's range: both stay on
// the scalar kernel).
using MmaCodecs = Codecs<CodecId::f16, CodecId::fp8, CodecId::q8, CodecId::q4, CodecId::q4r, CodecId::tq4, CodecId::tq3>;
using MmaDims = Dims<64, 128, 256>;

}  // namespace

cudaError_t launch_decode_mma(const DecodeArgs& a, cudaStream_t st) {
  return dispatch(MmaCodecs{}, MmaDims{}, a.codec, a.head_dim,
                  [&]<CodecId C, int D>() { return launch_codec_dim<C, D>(a, st); });
}

cudaError_t decode_mma_blocks_per_sm(CodecId codec, int head_dim, int n_rep, int* blocks) {
  return dispatch(MmaCodecs{}, MmaDims{}, codec, head_dim,
                  [&]<CodecId C, int D>() { return occupancy_codec_dim<C, D>(n_rep, blocks); });
}

}  // namespace kvtax::cuda::detail
