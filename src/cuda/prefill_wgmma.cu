// Flash-prefill on Hopper's warpgroup MMA for head_dim 128 (prefill_launch.h; the mma.sync kernel, which takes
// every other case, is prefill_attention.cu).
//
// Rows of one GQA group are taken position-major as in the mma.sync kernel, so each decoded K/V tile serves every
// query head of the group. Per tile of N keys (128 for f16 rows, 64 for the decoding codecs) a warpgroup of 64 rows
// computes S = Q K^T as 8 wgmma m64nNk16 (K from shared memory, q from registers), runs the online softmax on the
// accumulators, and adds P V as N / 16 wgmma m64n128k16 with
// P in registers and V read from shared memory transposed (N-major). The tiles sit in shared memory in the 128-byte
// swizzle wgmma reads (prefill_tiles.cuh, Sw128Tile): f16 rows are copied there directly, the other codecs are
// decoded there from raw copies, as in the mma.sync kernel.
//
// A single-role form (every warpgroup copies or decodes, then multiplies, one barrier per tile) measured slower on
// the H200 for every codec (docs/perf.md, "Session 9") and was removed.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda/cluster.cuh"
#include "cuda/mma.cuh"
#include "cuda/prefill_launch.h"
#include "cuda/prefill_rows.cuh"
#include "cuda/prefill_tiles.cuh"
#include "cuda/wgmma.cuh"
#include "kv/codecs/layout.h"

namespace kvtax::cuda::detail {
namespace {

using kv::CodecId;

template <CodecId C>
constexpr bool kDirect = C == CodecId::f16;

// Warp-specialized form (FlashAttention-3's shape). Warpgroups 0-1 produce the K/V tiles into the stages: f16 rows by
// cp.async, the other codecs by decoding raw tiles that bulk copies bring two tiles ahead. Warpgroups 2-3 consume them,
// 64 query rows each; setmaxnreg moves registers from the producers (56; f16's, which only issue copies, 24) to the
// consumers (200; f16's 232). One producer warpgroup left the decoding codecs producer-bound (H200, 2026-12-01: fp8
// attention 0.905 -> 0.852 s at 32k with two, tq3 1.157 -> 1.110). The consumers take turns (named barriers 1 and 2) to
// issue S(t) together with P V(t-1), so one's softmax runs while the other's products keep the tensor cores busy; no
// product is ever in flight during a softmax. Stage hand-off by mbarriers: full (every producer thread arrives once its
// part of the tile is written and fenced) and empty (one thread per consumer arrives once its products over the tile
// have completed). Every consumer runs every tile of the block, even one wholly in its rows' future (masked to zero
// weight): a wgmma on a path that depends on the thread makes ptxas serialize all of them.
// Producer threads (the first warpgroups) and all threads of the block.
constexpr int kProducers = 256, kWsThreads = kProducers + 256;

// f16 rows take 128-key tiles in three stages: twice the keys per S product and per barrier round as 64-key
// tiles (H200, 2026-12-01: f16 attention at 32k 0.696 -> 0.603 s). The decoding codecs keep 64-key tiles in four
// stages: their raw copies need room beside the stages, and 128-key tiles in two stages measured slower for
// every one of them (fp8 0.681 -> 0.728 s, tq3 0.868 -> 0.915). Unsplit (below), f32's raw tiles (64 KiB) leave room
// for two stages: 0.865 s of attention at 32k against 1.591 on the mma.sync kernel, and 0.90-0.92 with four stages
// fed by raw copies of half tiles (H200, 2026-12-01).
//
// kSplit (f32): two blocks of a cluster, adjacent row blocks of one KV head, share each tile's conversion. One copies
// and converts the tile's K rows, the other its V rows, and the copy engine carries each block's f16 rows into the
// other's stage. A block's threads then read 32 KiB of raw floats per tile instead of 64 (the producers' shared-memory
// traffic bounded f32: ncu, session 25), and its raw buffers leave room for four stages: f32 attention 2.03 -> 1.73
// ms (ncu, 8k prompt, clocks locked), TTFT at 32k with BF16 weights 1.595 -> 1.482 s (H200, session 28). Three
// stages and three raw buffers measured 1.78 ms; 128-key tiles in two stages were slower than no split.
template <CodecId C, int D, bool kSplit = false>
struct WsSmem {
  static_assert(!kSplit || C == CodecId::f32);
  static constexpr int kKeys = kDirect<C> ? 2 * kTile : kTile, kRows = 128;
  static constexpr int kStages = kDirect<C> ? 3 : C == CodecId::f32 && !kSplit ? 2 : 4;
  using Tile = Sw128Tile<D, kKeys>;
  static constexpr size_t tile = 2 * Tile::kBytes;
  static constexpr size_t q_at = kStages * tile, raw_at = q_at + Sw128Tile<D, kRows>::kBytes;
  static constexpr size_t row_bytes = kv::layout::row_bytes(C, D);
  static constexpr size_t raw = kDirect<C> ? 0 : kSplit ? kTile * row_bytes : raw_tile_bytes(row_bytes);
  // The pair table (tq4, tq3; prefill_tiles.cuh). tq4 takes one copy per lane: attention at 32k 0.746 -> 0.719 s
  // (H200, 2026-12-01). tq3's 64 entries conflict less, and 32 copies made it slower (0.700 -> 0.737 s).
  static constexpr int kPairCopies = C == CodecId::tq4 ? 32 : 1;
  static constexpr size_t pairs_at = raw_at + 2 * raw, pairs = size_t(kPairEntries<C>) * kPairCopies * 4;
  static constexpr size_t total = pairs_at + pairs + 1024;  // + alignment slack
};

template <CodecId C, int D, bool kSplit>
__global__ void __launch_bounds__(kWsThreads, 1) prefill_ws_kernel(PrefillArgs a) {
#if KVTAX_WGMMA
  using M = WsSmem<C, D, kSplit>;
  using L = typename M::Tile;
  constexpr int kRows = M::kRows, kStages = M::kStages, kKeys = M::kKeys;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  auto tile = [&](int t) { return reinterpret_cast<__half*>(smem + (t % kStages) * M::tile); };
  auto raw = [&](int t) { return smem + M::raw_at + (t & 1) * M::raw; };
  __half* q_s = reinterpret_cast<__half*>(smem + M::q_at);
  uint32_t* pairs = reinterpret_cast<uint32_t*>(smem + M::pairs_at);
  __shared__ __align__(8) uint64_t bars[2 * kStages + 2];  // full[stages], empty[stages], raw_full[2]
  auto full = [&](int t) { return smem_addr(&bars[t % kStages]); };
  auto empty = [&](int t) { return smem_addr(&bars[kStages + t % kStages]); };
  auto raw_full = [&](int t) { return smem_addr(&bars[2 * kStages + (t & 1)]); };

  const int tid = threadIdx.x, lane = tid % 32, g = lane / 4, c4 = lane % 4;
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0);  // warp-uniform to the compiler: roles branch on it
  constexpr int kProducerGroups = kProducers / 128;
  const int h = blockIdx.x;
  const int r_block = (gridDim.y - 1 - blockIdx.y) * kRows;
  // A pair runs the tiles of its later block (the one of even blockIdx.y); the earlier one's rows mask the extra.
  const int r_last = kSplit ? int(gridDim.y - 1 - (blockIdx.y & ~1u)) * kRows : r_block;
  const int kend = row_pos(a, r_last + kRows - 1) + 1, n_tiles = (kend + kKeys - 1) / kKeys;
  const uint32_t rank = kSplit ? cluster_rank() : 0u, peer = rank ^ 1u;  // split: rank 0 converts K, rank 1 V
  const uint8_t* kh = a.pool + size_t(h) * a.head_stride;
  fill_pairs<C, kWsThreads, M::kPairCopies>(a, pairs);
  if (tid == 0) {
    for (int i = 0; i < kStages; ++i) {
      mbar_init(full(i), kSplit ? 1 : kProducers);  // split: one arrival, and the bytes of the peer's half
      mbar_init(empty(i), kSplit ? 4 : 2);          // split: both blocks' consumers
    }
    mbar_init(raw_full(0), 1);
    mbar_init(raw_full(1), 1);
  }
  stage_q<D, kWsThreads, kRows, Sw128Tile<D, kRows>>(a, h, r_block, q_s);
  fence_proxy_async();
  __syncthreads();  // barriers initialised; q and the pair table written
  if constexpr (kSplit) cluster_sync();  // the peer's barriers too, before anything arrives on them

  if (wg < kProducerGroups) {  // producer
    if constexpr (kDirect<C>) regs_dec<24>(); else regs_dec<56>();
    const uint32_t raw_bytes = uint32_t(kTile * a.row_bytes);
    auto fetch_raw = [&](int t) {  // one thread: K rows and V rows of tile t (split: K or V), bulk copies
      if (t >= n_tiles) return;
      const uint8_t* src = tile_base(a, kh, t * kTile);
      if constexpr (kSplit) {
        mbar_expect_bytes(raw_full(t), raw_bytes);
        bulk_copy(smem_addr(raw(t)), src + (rank == 1 ? a.v_offset : 0), raw_bytes, raw_full(t));
      } else {
        mbar_expect_bytes(raw_full(t), 2 * raw_bytes);
        bulk_copy(smem_addr(raw(t)), src, raw_bytes, raw_full(t));
        bulk_copy<false>(smem_addr(raw(t) + raw_bytes), src + a.v_offset, raw_bytes, raw_full(t));
      }
    };
    if constexpr (!kDirect<C>) {
      if (tid == 0) {
        fetch_raw(0);
        fetch_raw(1);
      }
    }
    // cp.async tiles handed over kLag behind the newest: the tile the producer waits to refill (t - kStages) is
    // freed by the consumers' products over t - kStages + 1, which must therefore be handed over already.
    constexpr int kLag = kStages - 2;
    static_assert(!kDirect<C> || kLag == 1 || kLag == 2);
    for (int t = 0; t < n_tiles; ++t) {
      if (t >= kStages) mbar_wait(empty(t), ((t / kStages) & 1) ^ 1);  // tile t - kStages's products are done
      if constexpr (kSplit) {
        __half* mine = rank == 0 ? tile(t) : tile(t) + kTile * D;
        mbar_wait(raw_full(t), (t / 2) & 1);
        decode_tile<C, D, kProducers, L, 1, kTile>(raw(t), t * kTile, kend, pairs, mine, nullptr);
        fence_proxy_async();
        bar_sync<kProducers>(3);  // every producer thread is done with raw(t) and has written its rows
        if (tid == 0) {
          mbar_expect_bytes(full(t), L::kBytes);  // the peer's rows, which its copy brings
          bulk_copy_to(map_to(smem_addr(mine), peer), smem_addr(mine), L::kBytes, map_to(full(t), peer));
          fetch_raw(t + 2);
        }
      } else if constexpr (kDirect<C>) {
        issue_tile_f16<D, kProducers, L, kKeys>(a, kh, t * kKeys, kend, tile(t), tile(t) + kKeys * D);
        cp_commit();
        if (t >= kLag) {  // tile t - kLag landed: fence it for the tensor cores, hand it over
          cp_wait<kLag>();
          fence_proxy_async();
          mbar_arrive(full(t - kLag));
        }
      } else {
        mbar_wait(raw_full(t), (t / 2) & 1);
        decode_tile<C, D, kProducers, L, M::kPairCopies>(raw(t), t * kTile, kend, pairs, tile(t), tile(t) + kTile * D);
        fence_proxy_async();
        mbar_arrive(full(t));
        bar_sync<kProducers>(3);  // every producer thread is done reading raw(t)
        if (tid == 0) fetch_raw(t + 2);
      }
    }
    if constexpr (kDirect<C>) {  // the last kLag tiles
      if (kLag == 2 && n_tiles >= 2) {
        cp_wait<1>();
        fence_proxy_async();
        mbar_arrive(full(n_tiles - 2));
      }
      cp_wait<0>();
      fence_proxy_async();
      mbar_arrive(full(n_tiles - 1));
    }
    if constexpr (kSplit) cluster_sync();  // no block leaves while its peer may still write to it
    return;
  }

  // 256 x 56 + 256 x 200 (f16: 24 + 232) = the SM's 64K registers. f16's producers only issue cp.async copies; its
  // consumers hold 128-key scores and q's fragments at once.
  if constexpr (kDirect<C>) regs_inc<232>(); else regs_inc<200>();
  // Consumers: warpgroup cw = wg - 1 owns rows r_block + 64 cw ..; warp w of it rows 16 w ..
  const int cw = wg - kProducerGroups, r_warp = r_block + 64 * cw + 16 * ((tid / 32) % 4);
  const int pa = row_pos(a, r_warp + g), pb = row_pos(a, r_warp + g + 8), warp_min = row_pos(a, r_warp);
  // q's A fragments stay in registers: an m64n64k16 product with both operands in shared memory reads 4 KiB there
  // for 32 cycles of tensor work, as much as the shared-memory pipe gives in that time, while the producers also
  // use the pipe (H200, attention at 32k, Q4_K weights; session 30: f32 0.711-0.719 -> 0.647-0.649 s, fp8
  // 0.665-0.670 -> 0.629-0.635, q4 0.737 -> 0.623, q4r unchanged; session 31, f16's 128-key tiles: 0.634-0.636 ->
  // 0.619-0.620).
  uint32_t qf[D / 16][4];
  q_fragments<D, Sw128Tile<D, kRows>>(q_s, r_warp - r_block + g, c4, qf);
  float o[D / 8][4];
#pragma unroll
  for (int dn = 0; dn < D / 8; ++dn) o[dn][0] = o[dn][1] = o[dn][2] = o[dn][3] = 0.0f;
  float ma = -INFINITY, mb = -INFINITY, la = 0.0f, lb = 0.0f;
  uint32_t pf[kKeys / 16][4];
  // Descriptors step by adding (bytes >> 4) to the start address field: offsets stay inside the 256 KiB window.
  auto issue_pv = [&](int t) {  // O += P(t) V(t); N-major V: keys kk*16.. are 16 rows of 128 bytes further
    const uint64_t v_desc = sw128_desc(smem_addr(tile(t) + kKeys * D), kKeys * 128, 1024);
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) wgmma_f16<D, true>(o, pf[kk], v_desc + ((kk * 16 * 128) >> 4), true);
  };
  if (cw == 1) bar_arrive<256>(1);  // consumer 0 issues first
  for (int t = 0; t < n_tiles; ++t) {
    mbar_wait(full(t), (t / kStages) & 1);
    bar_sync<256>(1 + cw);  // this consumer's turn at the tensor cores
    const uint64_t k_desc = sw128_desc(smem_addr(tile(t)), 16, 1024);
    float s[kKeys / 8][4];
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {  // K-major q and K: dims ks*16.. are 32 bytes into 64-dim block ks / 4
      const uint64_t k_at = k_desc + (((ks / 4) * kKeys * 128 + (ks % 4) * 32) >> 4);
      wgmma_f16<kKeys, false>(s, qf[ks], k_at, ks > 0);
    }
    if (t > 0) issue_pv(t - 1);
    wgmma_commit();
    bar_arrive<256>(2 - cw);  // the other consumer's turn
    wgmma_wait<0>();
    fence_acc(s);
    fence_acc(o);
    if (t > 0 && tid % 128 == 0) {
      mbar_arrive(empty(t - 1));
      if constexpr (kSplit) mbar_arrive_remote(map_to(empty(t - 1), peer));
    }
    softmax_step<kKeys>(s, t * kKeys, warp_min, pa, pb, c4, ma, mb, la, lb, o, pf);
  }
  bar_sync<256>(1 + cw);
  wgmma_fence();
  issue_pv(n_tiles - 1);
  wgmma_commit();
  if (cw == 0) bar_arrive<256>(2);  // consumer 1's last turn (each barrier: as many arrivals as waits)
  wgmma_wait<0>();
  fence_acc(o);
  store_rows<D>(a, h, r_warp + g, c4, o, la, lb);
  if constexpr (kSplit) cluster_sync();
#endif
}

template <CodecId C, int D, bool kSplit>
cudaError_t launch_ws(const PrefillArgs& a, cudaStream_t s) {
  using M = WsSmem<C, D, kSplit>;
  auto* kernel = prefill_ws_kernel<C, D, kSplit>;
  static const cudaError_t ready = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                        int(M::total));
  if (ready != cudaSuccess) return ready;
  int blocks = (a.n_tok * a.n_rep + M::kRows - 1) / M::kRows;
  if (kSplit) blocks += blocks & 1;  // whole pairs: a block past the chunk computes copies of its last row, unstored
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(a.n_kv_heads, blocks);
  cfg.blockDim = dim3(kWsThreads);
  cfg.dynamicSmemBytes = M::total;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 1;
  attr[0].val.clusterDim.y = kSplit ? 2 : 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = kSplit ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, a);
}

template <CodecId C, int D>
cudaError_t launch_codec_dim(const PrefillArgs& a, cudaStream_t s) {
  // head_dim 64 gave wrong results on the H200 (2026-12-01, not understood yet): it takes the mma.sync kernel.
  if constexpr (D != 128 || WsSmem<C, D>::total > kMaxSmem) {
    PrefillArgs b = a;
    b.wgmma = false;
    return launch_prefill(b, s);
  } else if constexpr (C == CodecId::f32) {
    return a.split ? launch_ws<C, D, true>(a, s) : launch_ws<C, D, false>(a, s);
  } else {
    return launch_ws<C, D, false>(a, s);
  }
}

__global__ void probe_kernel(int* out) { *out = kHasWgmma ? 1 : 0; }

}  // namespace

bool prefill_wgmma_available() {
  static const bool ok = [] {
    int* d = nullptr;
    int v = 0;
    if (cudaMalloc(&d, sizeof(int)) != cudaSuccess) return false;
    probe_kernel<<<1, 1>>>(d);
    const bool ran = cudaMemcpy(&v, d, sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess;
    cudaFree(d);
    return ran && v == 1;
  }();
  return ok;
}

cudaError_t launch_prefill_wgmma(const PrefillArgs& a, cudaStream_t s) {
  if (a.n_tok <= 0) return cudaSuccess;
  return dispatch(AllCodecs{}, Dims<64, 128>{}, a.codec, a.head_dim,
                  [&]<CodecId C, int D>() { return launch_codec_dim<C, D>(a, s); });
}

}  // namespace kvtax::cuda::detail
