// Tensor-core flash-decode split kernel (attention_launch.h). Block: 4 warps, one KV head, one context chunk, up
// to 16 query heads of its GQA group as the M rows of mma.sync m16n8k16 (rows past the group are zero). Each warp
// walks its own tiles of 16 tokens (tiles w, w+4, ... of the chunk) with its own online softmax, so the loop needs
// no block barrier:
//   the tile's raw K and V rows land in a ring of kStages shared-memory stages, several tiles ahead: by two bulk
//   copies from lane 0 and an mbarrier per stage for the decoding codecs (rows past the context are zeroed when
//   they land), by per-lane cp.async into the swizzled layout for f16 and bf16 (zero-fill past the chunk);
//   f16 and bf16 rows are used as they land (ldmatrix; bf16 in bf16 MMAs, q and P split in two halves);
//   fp8 / q8 / q4 / q4r / tq4 code words go from the stage straight into mma fragments (CodeDecoder, Cfg::kKReg;
//   in the GQA form q4 / q4r go in as 1024 + code, their offset and block scales applied per block:
//   attention_mma_q4.cuh); tq3 is decoded by units, through a table of its levels, into an f16 tile [16][D];
//   a per-row factor (fp8 scale, tq gain) scales S and P instead;
//   S = Q K^T (two independent accumulator chains), online softmax in base 2 (q is pre-scaled by
//   log2 e / sqrt(D)), and O += P V with the S accumulators repacked as the A operand.
// Warps merge through shared memory at the end and write the same partial (unnormalised o, max, sum) as the
// scalar kernel, for merge_kernel.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdlib>
#include <string>

#include "cuda/attention_mma_q4.cuh"

namespace kvtax::cuda::detail {
namespace {

// kProducer: the fifth warp's work. Lane w copies consumer warp w's tiles in order, each once its stage is free and
// once the tile kWindow / kWarps before it has landed (one lane issuing every copy of its block streamed ~3.2 TB/s;
// H200, session 36). It never waits on the kernel before, except in the block whose chunk holds the newest row (the
// KV encode's), which puts its first tiles into L2 meanwhile.
template <CodecId C, int D, bool kSwap>
__device__ __forceinline__ void produce_tiles(const DecodeArgs& a, const uint8_t* kh, int c0, int n_tiles, bool early,
                                              int lane, uint8_t* smem, uint64_t (*bars)[Cfg<C, D, kSwap>::kStages],
                                              uint64_t (*empties)[Cfg<C, D, kSwap>::kStages]) {
  using G = Cfg<C, D, kSwap>;
  // Tiles in flight per consumer warp, below the ring: the tile kWin back then sits in a slot not yet refilled, so
  // its phase cannot move on twice while the lane waits on it.
  constexpr int kPerWarp = G::kWindow / kWarps;
  constexpr int kWin = kPerWarp < 1 ? 1 : kPerWarp < G::kStages ? kPerWarp : G::kStages - 1;
  const int w = lane;
  const int tiles = warp_tiles(n_tiles, w);
  auto tile_t0 = [&](int j) { return tile_start(c0, w, j); };
  auto page_of = [&](int j) { return __ldg(a.pages + (tile_t0(j) >> kPageShift)); };
  int32_t pg_next = w < kWarps && tiles > 0 ? page_of(0) : 0;
  if (!early) {  // the newest row is still being written: the first tiles go into L2 until the encode is done
    if (w < kWarps && tiles > 0) {
      const uint8_t* kr = tile_rows<C, D>(a, kh, pg_next, tile_t0(0));
      prefetch_l2_bulk(kr, G::kHalfTile);
      prefetch_l2_bulk(kr + a.v_offset, G::kHalfTile);
    }
    pdl_wait();
  }
  if (w >= kWarps) return;
  for (int j = 0; j < tiles; ++j) {
    const int slot = j % G::kStages;
    const int32_t page = pg_next;
    if (j + 1 < tiles) pg_next = page_of(j + 1);  // a tile ahead: its load is not waited on here
    if (j >= kWin) mbar_wait(smem_addr(&bars[w][(j - kWin) % G::kStages]), unsigned((j - kWin) / G::kStages) & 1);
    if (j >= G::kStages) mbar_wait(smem_addr(&empties[w][slot]), unsigned(j / G::kStages - 1) & 1);
    issue_tile_bulk<C, D>(a, kh, page, tile_t0(j), smem_addr(smem + w * G::kWarpBytes + slot * G::kRaw),
                          smem_addr(&bars[w][slot]));
  }
}

// The kernel's body (mma_split_kernel below). grid (n_splits, n_kv_heads, row groups of 16 query heads; kSwap: one
// group of up to 8).
template <CodecId C, int D, bool kSwap>
__device__ __forceinline__ void mma_split(const DecodeArgs& a) {
  using G = Cfg<C, D, kSwap>;
  static_assert(!kSwap || G::kKReg, "the GQA form decodes K and V straight into fragments");
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ float lv[16];
  __shared__ __align__(8) uint64_t bars[kWarps][G::kStages];  // kBulk: one per stage, phase j / kStages
  // kProducer: a stage's tile used (a consumer's arrival), phase j / kStages
  __shared__ __align__(8) uint64_t empties[G::kProducer ? kWarps : 1][G::kProducer ? G::kStages : 1];

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
  const int my_tiles = warp_tiles(n_tiles, warp);
  const uint8_t* kh = a.pool + size_t(h) * a.head_stride;

  uint8_t* wb = smem + warp * G::kWarpBytes;
  const uint32_t ws = smem_addr(wb);
  uint8_t* td = wb + G::kStages * G::kRaw;              // decoded K, then V tile (not used by f16 and kKReg)
  float* fac = reinterpret_cast<float*>(td + G::kTile);  // per-row factors of the tile: K 16, V 16 (kFold)
  auto tile_t0 = [&](int j) { return tile_start(c0, warp, j); };
  // Page-table entries are loaded a tile ahead of their copy: a copy that waited on its entry would expose a
  // memory round trip per tile (the asm memory clobbers keep the compiler from hoisting the load itself).
  auto page_of = [&](int j) { return j < my_tiles ? __ldg(a.pages + (tile_t0(j) >> kPageShift)) : 0; };
  int32_t pg[G::kStages] = {};
  if constexpr (!G::kProducer) {
#pragma unroll
    for (int j = 0; j < G::kStages; ++j) pg[j] = page_of(j);
  }
  const uint32_t bar0 = smem_addr(&bars[warp][0]);
  auto bar = [&](int slot) { return bar0 + 8 * slot; };
  // Starts the copy of the warp's tile j (page entry pg_j) into its stage, ring slot j % kStages (which the loop
  // counts instead of dividing: kStages is 3 or 6 for most codecs, not a power of two).
  auto issue = [&](int j, int slot, int32_t pg_j) {
    const uint32_t stage = ws + slot * G::kRaw;
    if constexpr (G::kBulk) {
      if (lane == 0 && j < my_tiles) issue_tile_bulk<C, D>(a, kh, pg_j, tile_t0(j), stage, bar(slot));
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
    for (int j = 0; j < G::kStages - 1; ++j) issue(j, j, pg[j]);
  };
  // Programmatic dependent launch (pdl.cuh): until the wait, the kernels before this one may still run. Only the
  // newest row is being written then (by the KV encode), and it lies in the last chunk: every other block starts its
  // copies now, and the last one puts its first tiles into L2 meanwhile (L2 is where the encode's write lands too, so
  // a prefetch cannot go stale). q, also the encode's, is read after the wait.
  const bool early = c1 < len;
  if constexpr (G::kProducer) {
    if (tid == kThreads) {
      for (int w = 0; w < kWarps; ++w)
        for (int j = 0; j < G::kStages; ++j) {
          mbar_init(smem_addr(&bars[w][j]), 1);
          mbar_init(smem_addr(&empties[w][j]), 1);
        }
    }
    __syncthreads();
    if (warp == kWarps) {
      pdl_trigger();
      produce_tiles<C, D, kSwap>(a, kh, c0, n_tiles, early, lane, smem, bars, empties);
      __syncthreads();  // the consumers' two barriers before their merge (the ring is then theirs)
      __syncthreads();
      return;
    }
  } else if (early) {
    start_copies();
  } else if (lane < 2 * (G::kStages - 1) && lane / 2 < my_tiles) {
    const int j = lane / 2;
    prefetch_l2_bulk(tile_rows<C, D>(a, kh, page_of(j), tile_t0(j)) + (lane % 2 ? a.v_offset : 0), G::kHalfTile);
  }
  pdl_trigger();  // the merge may launch: it waits for this whole grid
  pdl_wait();

  // The A fragments (f16) of the group's q rows, scaled by log2 e / sqrt(D) (and rotated). Rotated codecs stage the
  // rows in shared memory first, a warp per row in registers; the others read their fragments from global memory,
  // issued before the first tiles' copies so that both round trips overlap (packed after the copies are issued).
  // q rotated by the KV encode (DecodeArgs::q_rotated) is read as the other codecs read theirs.
  const float qscale = rsqrtf(float(D)) * kLog2e;
  uint32_t qf[D / 16][4];  // A fragments: rows g and g + 8
  uint32_t ql[G::kSplit ? D / 16 : 1][4];  // kSplit: their low bf16 halves
  auto put_q = [&](int ks, int i, float x0, float x1) {  // dims x0, x1 into register i of q's k-step ks
    if constexpr (G::kSplit) split_bf16(x0, x1, qf[ks][i], ql[ks][i]);
    else qf[ks][i] = pack_half2(x0, x1);
  };
  uint32_t qb[D / 16][2];  // kSwap: B fragments of Q^T, column g (head g)
  float2 qraw[D / 16][4];  // q read from global memory: this lane's q values, loaded ahead of the copies
  const bool rotate_q = layout::rotated(C) && !a.q_rotated;
  if constexpr (layout::rotated(C)) {
    if (tid < 16) lv[tid] = tid < a.n_levels ? a.levels[tid] : 0.0f;  // visible after the barriers below
  }
  if (rotate_q) {
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
    __syncthreads();
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      const int d0 = k_dim<C, D, kSwap>(ks, c), hi = G::kKReg ? 2 : 8;
      const float* ra = q_row(g) + d0;
      const float* rb = q_row(g + 8) + d0;
      if constexpr (G::kBiased) {
        q4_query_pair({ra[0], ra[1], ra[2], ra[3]}, ks, qb[ks]);
      } else if constexpr (kSwap) {
        qb[ks][0] = pack_half2(ra[0], ra[1]);
        qb[ks][1] = pack_half2(ra[hi], ra[hi + 1]);
      } else {
        put_q(ks, 0, ra[0], ra[1]);
        put_q(ks, 1, rb[0], rb[1]);
        put_q(ks, 2, ra[hi], ra[hi + 1]);
        put_q(ks, 3, rb[hi], rb[hi + 1]);
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
      const int d0 = k_dim<C, D, kSwap>(ks, c), hi = G::kKReg ? 2 : 8;
      qraw[ks][0] = load(g, d0);
      qraw[ks][2] = load(g, d0 + hi);
      if constexpr (!kSwap) {
        qraw[ks][1] = load(g + 8, d0);
        qraw[ks][3] = load(g + 8, d0 + hi);
      }
    }
    if constexpr (layout::rotated(C)) __syncthreads();  // lv
  }

  if (!G::kProducer && !early) start_copies();
  int32_t pg_next = pg[G::kStages - 1];  // entry of the next tile to copy
  if (!rotate_q) {
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      if constexpr (G::kBiased) {  // dims d0 .. d0 + 3: qraw[ks][0] and [2]
        q4_query_pair({qraw[ks][0].x * qscale, qraw[ks][0].y * qscale, qraw[ks][2].x * qscale, qraw[ks][2].y * qscale},
                      ks, qb[ks]);
      } else {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          if constexpr (kSwap) {
            if (i % 2 == 0) qb[ks][i / 2] = pack_half2(qraw[ks][i].x * qscale, qraw[ks][i].y * qscale);
          } else {
            put_q(ks, i, qraw[ks][i].x * qscale, qraw[ks][i].y * qscale);
          }
        }
      }
    }
  }

  const CodeDecoder<C> dec(lv);  // the codes' decoder (tq4 and tq3: their levels, visible since the barriers above)
  float qbias[D / 32][2];  // kBiased: where each block's S^T starts (q4_query_bias)
  if constexpr (G::kBiased) q4_query_bias<D>(qb, c, qbias);

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

  int slot = 0;         // j % kStages
  uint32_t parity = 0;  // (j / kStages) & 1
  for (int j = 0; j < my_tiles; ++j) {
    const int t0 = tile_t0(j), nvalid = min(kTok, c1 - t0);
    uint8_t* stage = wb + slot * G::kRaw;
    if constexpr (G::kBulk) {
      mbar_wait(bar(slot), parity);
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
    if constexpr (G::kKReg && !G::kBiased) {  // kBiased reads its own (swap_tile_q4)
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
      kt = ws + slot * G::kRaw;
      vt = kt + G::kHalfTile;
    } else if constexpr (G::kKReg) {
      vt = 0;
    } else {
      decode_tile<C, D, 0>(raw, dec, td, fac, lane);
      __syncwarp();
      kt = vt = smem_addr(td);
    }
    if constexpr (G::kProducer) {  // the stage tile j - 1 used is free (every lane is past it)
      if (lane == 0 && j > 0) mbar_arrive(smem_addr(&empties[warp][slot == 0 ? G::kStages - 1 : slot - 1]));
    } else {  // refill it
      const int jn = j + G::kStages - 1;
      issue(jn, slot == 0 ? G::kStages - 1 : slot - 1, pg_next);
      pg_next = page_of(jn + 1);
    }

    if constexpr (G::kBiased) {
      swap_tile_q4<C, D>(raw, qb, qbias, nvalid, g, c, o, ma, mb, la, lb);
    } else if constexpr (kSwap) {
      swap_tile<C, D>(raw, kw, ksc, dec, qb, nvalid, g, c, o, ma, mb, la, lb);
    } else {
      float s2[2][2][4];  // [k-step parity][token n-tile]: two independent chains
#pragma unroll
      for (int p = 0; p < 2; ++p)
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) s2[p][nt][0] = s2[p][nt][1] = s2[p][nt][2] = s2[p][nt][3] = 0.0f;
      if constexpr (G::kKReg) {
        for_each_k_step<C, D>(kw, ksc, dec, [&](int ks, __half2 g_lo, __half2 g_hi, __half2 g8_lo, __half2 g8_hi) {
          mma_16816(s2[ks & 1][0], qf[ks], half2_bits(g_lo), half2_bits(g_hi));
          mma_16816(s2[ks & 1][1], qf[ks], half2_bits(g8_lo), half2_bits(g8_hi));
        });
      } else {
#pragma unroll
        for (int ks = 0; ks < D / 16; ++ks) {
          uint32_t b[4];
          ldsm_x4(kt + swz<D>(k_tok, 2 * ks + k_hi), b);
          mma_16816<G::kSplit>(s2[ks & 1][0], qf[ks], b[0], b[1]);
          mma_16816<G::kSplit>(s2[ks & 1][1], qf[ks], b[2], b[3]);
          if constexpr (G::kSplit) {  // the low halves into the other chain
            mma_16816<true>(s2[~ks & 1][0], ql[ks], b[0], b[1]);
            mma_16816<true>(s2[~ks & 1][1], ql[ks], b[2], b[3]);
          }
        }
      }
      if constexpr (!G::kDirect && !G::kKReg) {  // K is in registers now: V takes its place
        __syncwarp();
        decode_tile<C, D, 1>(raw, dec, td, fac + kTok, lane);
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
              fk[nt][e] = layout::load_f32<false>(kr) * dec.scale;
              fv[nt][e] = layout::load_f32<false>(kr + G::kHalfTile) * dec.scale;
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
      uint32_t pf[4], pl[G::kSplit ? 4 : 1];  // P's A fragment (kSplit: high, then low bf16 halves)
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
        } else if constexpr (G::kSplit) {
          split_bf16(p0, p1, pf[2 * nt], pl[2 * nt]);
          split_bf16(p2, p3, pf[2 * nt + 1], pl[2 * nt + 1]);
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
          decode_v_word<C, D>(raw, w, c, dec, h);
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
          mma_16816<G::kSplit>(o[2 * dp], pf, b[0], b[1]);
          mma_16816<G::kSplit>(o[2 * dp + 1], pf, b[2], b[3]);
          if constexpr (G::kSplit) {
            mma_16816<true>(o[2 * dp], pl, b[0], b[1]);
            mma_16816<true>(o[2 * dp + 1], pl, b[2], b[3]);
          }
        }
      }
    }
    if (++slot == G::kStages) {
      slot = 0;
      parity ^= 1;
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

// Registers capped for kMinBlocks blocks per SM, or at Cfg::kMaxRegs where that is set, by __maxnreg__ (which cannot
// stand beside the launch bounds' block count, and which made tq3's rows form spill more where it replaced them).
template <CodecId C, int D, bool kSwap>
__global__ void __launch_bounds__(Cfg<C, D, kSwap>::kBlockThreads, Cfg<C, D, kSwap>::kMinBlocks)
    mma_split_kernel(DecodeArgs a) {
  mma_split<C, D, kSwap>(a);
}
template <CodecId C, int D, bool kSwap>
__global__ void __launch_bounds__(Cfg<C, D, kSwap>::kBlockThreads) __maxnreg__((Cfg<C, D, kSwap>::kMaxRegs))
    mma_split_kernel_capped(DecodeArgs a) {
  mma_split<C, D, kSwap>(a);
}
template <CodecId C, int D, bool kSwap>
constexpr auto split_kernel() {
  if constexpr (Cfg<C, D, kSwap>::kMaxRegs > 0) return mma_split_kernel_capped<C, D, kSwap>;
  else return mma_split_kernel<C, D, kSwap>;
}

// The kernel with its dynamic shared memory allowed (once per instantiation).
template <CodecId C, int D, bool kSwap>
cudaError_t prepared() {
  static const cudaError_t e = cudaFuncSetAttribute(
      split_kernel<C, D, kSwap>(), cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg<C, D, kSwap>::kSmem);
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
    using G = Cfg<C, D, kSwap>;
    return launch_pdl_smem(split_kernel<C, D, kSwap>(), grid, G::kBlockThreads, G::kSmem, st, a);
  });
}

template <CodecId C, int D>
cudaError_t occupancy_codec_dim(int n_rep, int* blocks) {
  return with_form<C, D>(n_rep, [&]<bool kSwap>() {
    if (cudaError_t e = prepared<C, D, kSwap>(); e != cudaSuccess) return e;
    using G = Cfg<C, D, kSwap>;
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, split_kernel<C, D, kSwap>(), G::kBlockThreads,
                                                         G::kSmem);
  });
}

// The codecs the tensor-core kernel takes (f32 keeps f32 precision on the scalar kernel).
using MmaCodecs = Codecs<CodecId::f16, CodecId::bf16, CodecId::fp8, CodecId::q8, CodecId::q4, CodecId::q4r,
                         CodecId::tq4, CodecId::tq3>;
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
