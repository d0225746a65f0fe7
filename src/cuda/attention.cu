// Flash-decode kernels: the scalar split kernel (f32, the codec the tensor-core kernel of attention_mma.cu does not
// take) and the merge of every codec's chunks. Thread layout of the scalar split kernel: a token is read by D/8
// consecutive lanes (one 8-value unit of layout.h each), so a warp reads whole rows back to back (coalesced) and the
// block's 128 threads form 128/(D/8) independent "groups" that walk the chunk's tokens with a stride.
// Each group keeps its own online softmax in registers; the groups are merged through shared memory at
// the end, and the chunks by merge_kernel.
#include <cuda_runtime.h>

#include <cfloat>

#include "cuda/attention_launch.h"
#include "cuda/block_scan.cuh"
#include "cuda/mma.cuh"
#include "cuda/pdl.cuh"
#include "cuda/quantize_x.cuh"
#include "cuda/rotate_regs.cuh"
#include "kv/codecs/layout.h"

namespace kvtax::cuda::detail {

namespace {

using kv::CodecId;
namespace layout = kv::layout;

constexpr float kLog2e = 1.4426950408889634f;

// grid (n_splits, n_kv_heads, row groups); scores are kept in base 2 (q is pre-scaled by log2 e).
template <CodecId C, int D, int NREP>
__global__ void __launch_bounds__(kDecodeThreads) split_kernel(DecodeArgs a) {
  constexpr int kLanes = D / layout::kUnit;           // lanes per token
  constexpr int kGroups = kDecodeThreads / kLanes;     // tokens in flight per block step
  constexpr int kUnroll = NREP >= 8 ? 2 : 4;           // tokens per group step (loads in flight)
  static_assert(kLanes <= 32 && 32 % kLanes == 0);

  __shared__ float q_s[NREP * D];
  __shared__ float red[kGroups][NREP][D + 2];

  const int tid = threadIdx.x, split = blockIdx.x, h = blockIdx.y;
  const int r0 = blockIdx.z * NREP, nr = min(NREP, a.n_rep - r0);
  const float qscale = rsqrtf(float(D)) * kLog2e;
  for (int i = tid; i < NREP * D; i += kDecodeThreads) {
    const int r = i / D;
    q_s[i] = r < nr ? a.q[(size_t(h) * a.n_rep + r0 + r) * D + i % D] * qscale : 0.0f;
  }
  __syncthreads();

  const int u = tid % kLanes, g = tid / kLanes;
  float qr[NREP][8];
#pragma unroll
  for (int r = 0; r < NREP; ++r)
#pragma unroll
    for (int k = 0; k < 8; ++k) qr[r][k] = q_s[r * D + 8 * u + k];

  float m[NREP], l[NREP], acc[NREP][8];
#pragma unroll
  for (int r = 0; r < NREP; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int k = 0; k < 8; ++k) acc[r][k] = 0.0f;
  }

  // With len_dev (a captured graph replays this launch at every length) the chunk follows the length;
  // chunks past it are empty and leave max -inf / sum 0, which the merge weighs as nothing.
  const int len = a.len_dev ? *a.len_dev : a.len;
  const int chunk = a.len_dev ? (len + a.n_splits - 1) / a.n_splits : a.chunk;
  const int c0 = split * chunk, c1 = min(len, c0 + chunk);
  const uint8_t* kh = a.pool + size_t(h) * a.head_stride;
  const int32_t* pages = a.pages;
  const size_t page_bytes = a.page_bytes, v_off = a.v_offset;
  // The step loop is uniform over the block: every lane takes part in every shuffle, also where its
  // group's tokens run past the chunk (those re-read row c0 and get weight 0).
  for (int tb = c0; tb < c1; tb += kGroups * kUnroll) {
    const int t0 = tb + g;
    float yk[kUnroll][8], yv[kUnroll][8], sk[kUnroll], sv[kUnroll];
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {
      const int t = t0 + j * kGroups;
      const int tt = t < c1 ? t : c0;
      const uint8_t* kr = kh + size_t(__ldg(pages + (tt >> kPageShift))) * page_bytes +
                          size_t(tt & (kPageTokens - 1)) * a.row_bytes;
      sk[j] = layout::unit_decode<C>(kr, D, u, nullptr, yk[j]);  // no codebook: f32
      sv[j] = layout::unit_decode<C>(kr + v_off, D, u, nullptr, yv[j]);
    }
    float s[kUnroll][NREP];
#pragma unroll
    for (int j = 0; j < kUnroll; ++j)
#pragma unroll
      for (int r = 0; r < NREP; ++r) {
        float d = 0.0f;
#pragma unroll
        for (int k = 0; k < 8; ++k) d = fmaf(qr[r][k], yk[j][k], d);
        s[j][r] = d * sk[j];
      }
#pragma unroll
    for (int off = kLanes / 2; off > 0; off >>= 1)
#pragma unroll
      for (int j = 0; j < kUnroll; ++j)
#pragma unroll
        for (int r = 0; r < NREP; ++r) s[j][r] += __shfl_xor_sync(0xffffffffu, s[j][r], off);
    if (t0 >= c1) continue;  // no token of this group in this step (token j = 0 is the first)
#pragma unroll
    for (int r = 0; r < NREP; ++r) {
      float mx = s[0][r];
#pragma unroll
      for (int j = 1; j < kUnroll; ++j)
        if (t0 + j * kGroups < c1) mx = fmaxf(mx, s[j][r]);
      const float m_new = fmaxf(m[r], mx);
      const float corr = exp2f(m[r] - m_new);
      l[r] *= corr;
#pragma unroll
      for (int k = 0; k < 8; ++k) acc[r][k] *= corr;
      m[r] = m_new;
#pragma unroll
      for (int j = 0; j < kUnroll; ++j) {
        const float p = t0 + j * kGroups < c1 ? exp2f(s[j][r] - m_new) : 0.0f;
        l[r] += p;
        const float w = p * sv[j];
#pragma unroll
        for (int k = 0; k < 8; ++k) acc[r][k] = fmaf(w, yv[j][k], acc[r][k]);
      }
    }
  }

  // Merge the block's groups, then write this chunk's partial (unnormalised output, max, sum).
#pragma unroll
  for (int r = 0; r < NREP; ++r) {
#pragma unroll
    for (int k = 0; k < 8; ++k) red[g][r][8 * u + k] = acc[r][k];
    if (u == 0) {
      red[g][r][D] = m[r];
      red[g][r][D + 1] = l[r];
    }
  }
  __syncthreads();
  for (int i = tid; i < nr * D; i += kDecodeThreads) {
    const int r = i / D, dd = i % D;
    float M = -INFINITY;
    for (int gg = 0; gg < kGroups; ++gg) M = fmaxf(M, red[gg][r][D]);
    float o = 0.0f, L = 0.0f;
    for (int gg = 0; gg < kGroups; ++gg) {
      const float mg = red[gg][r][D];
      if (mg == -INFINITY) continue;  // group saw no token of this chunk
      const float w = exp2f(mg - M);
      o = fmaf(w, red[gg][r][dd], o);
      L = fmaf(w, red[gg][r][D + 1], L);
    }
    float* part = a.part + ((size_t(h) * a.n_rep + r0 + r) * a.n_splits + split) * (D + 2);
    part[dd] = o;
    if (dd == 0) {
      part[D] = M;
      part[D + 1] = L;
    }
  }
}

// grid n_heads, block D threads: exact merge of the chunks' partials, then the inverse rotation. A head's partials
// (n rows of D + 2 floats) land in shared memory by cp.async in one memory round trip, kBatch chunks at a time; the
// loads of the old form (a pass for the maximum, then the weighted sums 16 chunks per round trip) took five at 49
// chunks. Each chunk's weight exp2(max - M) and its share of the sum are computed once, by one thread, and the
// maxima and sums are reduced over the block, where every thread used to work through all of them (66 chunks for q4
// and q4r).
template <int D, bool kRotated>
__global__ void __launch_bounds__(256) merge_kernel(DecodeArgs a) {
  constexpr int kRow = D + 2, kBatch = merge_batch(D), kWarpsM = D / 32;
  extern __shared__ __align__(16) float stage[];  // at least min(n_splits, kBatch) rows (launch_codec_dim)
  __shared__ float o_s[D], w_s[kBatch], red[2][kWarpsM];
  static_assert(kBatch * kRow * 4 + sizeof(o_s) + sizeof(w_s) + sizeof(red) <= merge_smem_bytes(D));
  pdl_trigger();  // the GEMV after it may start streaming its weights (pdl.cuh)
  pdl_wait();     // the partials come from the split kernel
  const int head = blockIdx.x, dd = threadIdx.x, warp = dd / 32, lane = dd % 32, n = a.n_splits;
  const float* part = a.part + size_t(head) * n * kRow;
  float M = -INFINITY, o = 0.0f, L = 0.0f;
  for (int c0 = 0; c0 < n; c0 += kBatch) {
    const int nb = min(kBatch, n - c0);
    const float* src = part + size_t(c0) * kRow;  // 8-byte aligned: kRow is even
    for (int i = dd; i < nb * kRow / 2; i += D) cp_async8(smem_addr(stage + 2 * i), src + 2 * i);
    cp_commit();
    cp_wait<0>();
    __syncthreads();
    float mc = -INFINITY;
    for (int c = dd; c < nb; c += D) mc = fmaxf(mc, stage[c * kRow + D]);
    mc = warp_max(mc);
    if (lane == 0) red[0][warp] = mc;
    __syncthreads();
    float mb = M;
#pragma unroll
    for (int w = 0; w < kWarpsM; ++w) mb = fmaxf(mb, red[0][w]);
    if (mb != M) {  // -inf until a chunk saw a token, and the sums so far are 0 then
      const float f = exp2f(M - mb);
      o *= f;
      L *= f;
      M = mb;
    }
    float lc = 0.0f;
    for (int c = dd; c < nb; c += D) {
      const float* p = stage + c * kRow;
      const float w = p[D] == -INFINITY ? 0.0f : exp2f(p[D] - M);  // a chunk that saw no token weighs nothing
      w_s[c] = w;
      lc = fmaf(w, p[D + 1], lc);
    }
    lc = warp_sum(lc);
    if (lane == 0) red[1][warp] = lc;
    __syncthreads();
#pragma unroll
    for (int w = 0; w < kWarpsM; ++w) L += red[1][w];
    float o2 = 0.0f;  // two chains
    int c = 0;
    for (; c + 1 < nb; c += 2) {
      o = fmaf(w_s[c], stage[c * kRow + dd], o);
      o2 = fmaf(w_s[c + 1], stage[(c + 1) * kRow + dd], o2);
    }
    if (c < nb) o = fmaf(w_s[c], stage[c * kRow + dd], o);
    o += o2;
    __syncthreads();  // the next batch overwrites the stage, the weights and red
  }
  o_s[dd] = L > 0.0f ? o / L : 0.0f;
  __syncthreads();
  if constexpr (kRotated) {  // warp 0 rotates the row back in registers (rotate_regs.cuh)
    constexpr int kPer = D / 32;
    if (dd < 32) {
      float v[kPer];
#pragma unroll
      for (int k = 0; k < kPer; ++k) v[k] = o_s[kPer * dd + k];
      unrotate_warp<D>(v, a.signs, dd, 1.0f / sqrtf(float(D)));
#pragma unroll
      for (int k = 0; k < kPer; ++k) o_s[kPer * dd + k] = v[k];
    }
    __syncthreads();
  }
  a.out[size_t(head) * D + dd] = o_s[dd];
  // Warp w holds dims 32w .. 32w + 31 of the head: one whole block of the codes (D is a multiple of 32).
  if (a.codes.xq) quantize_x_block32(o_s[dd], head * D + (dd & ~31), a.codes.xq, a.codes.xd, a.codes.xs);
}

int nrep_block(int n_rep) { return n_rep <= 1 ? 1 : n_rep <= 2 ? 2 : n_rep <= 4 ? 4 : 8; }

template <CodecId C, int D>
cudaError_t occupancy_codec_dim(int n_rep, int* blocks) {
  if constexpr (mma_codec(C)) {
    return decode_mma_blocks_per_sm(C, D, n_rep, blocks);
  } else {
    switch (nrep_block(n_rep)) {
      case 1: return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, split_kernel<C, D, 1>, kDecodeThreads, 0);
      case 2: return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, split_kernel<C, D, 2>, kDecodeThreads, 0);
      case 4: return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, split_kernel<C, D, 4>, kDecodeThreads, 0);
      default: return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, split_kernel<C, D, 8>, kDecodeThreads, 0);
    }
  }
}

// The split kernel of the codec (tensor cores where mma_codec), then the merge.
template <CodecId C, int D>
cudaError_t launch_codec_dim(const DecodeArgs& a, cudaStream_t st) {
  if constexpr (mma_codec(C)) {
    if (const cudaError_t e = launch_decode_mma(a, st); e != cudaSuccess) return e;
  } else {
    const int groups_of = (a.n_rep + kMaxGroupRows - 1) / kMaxGroupRows;
    const dim3 grid(a.n_splits, a.n_kv_heads, groups_of);
    switch (nrep_block(a.n_rep)) {
      case 1: split_kernel<C, D, 1><<<grid, kDecodeThreads, 0, st>>>(a); break;
      case 2: split_kernel<C, D, 2><<<grid, kDecodeThreads, 0, st>>>(a); break;
      case 4: split_kernel<C, D, 4><<<grid, kDecodeThreads, 0, st>>>(a); break;
      default: split_kernel<C, D, 8><<<grid, kDecodeThreads, 0, st>>>(a); break;
    }
    if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  // The merge's stage holds as many chunks as there are for fp8 and q8, so that at 33 chunks its block fits beside
  // their two blocks per SM, and kBatch chunks otherwise. H200, session 14: fp8 and q8 run faster with the merge's
  // block beside theirs (call 7: fp8 2k 8.9 -> 7.6 us, 128k 74.1 -> 73.1; q8 alike); f16 and q4r at 2k slower
  // (call 9, every kernel at the largest carveout: f16 7.9 -> 8.4 us, q4r 10.9 -> 11.4).
  constexpr bool kSized = C == CodecId::fp8 || C == CodecId::q8;
  const int stage_bytes = merge_stage_bytes(D, kSized ? a.n_splits : merge_batch(D));
  return launch_pdl_smem(merge_kernel<D, kv::layout::rotated(C)>, a.n_kv_heads * a.n_rep, D, stage_bytes, st, a);
}

}  // namespace

cudaError_t launch_decode(const DecodeArgs& a, cudaStream_t st) {
  return dispatch(AllCodecs{}, Dims<64, 128, 256>{}, a.codec, a.head_dim,
                  [&]<CodecId C, int D>() { return launch_codec_dim<C, D>(a, st); });
}

cudaError_t decode_blocks_per_sm(CodecId codec, int head_dim, int n_rep, int* blocks) {
  return dispatch(AllCodecs{}, Dims<64, 128, 256>{}, codec, head_dim,
                  [&]<CodecId C, int D>() { return occupancy_codec_dim<C, D>(n_rep, blocks); });
}

}  // namespace kvtax::cuda::detail
