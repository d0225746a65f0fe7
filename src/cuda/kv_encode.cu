// KV encode: one warp per (token, KV head, K or V) row. The row is staged in shared memory, rotated
// there for the rotated codecs (the CPU's butterfly order, so the same floats), encoded by the steps of
// the CPU encoder in kv/codecs/*.cpp, and written out as whole 4-byte words.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda/attention_launch.h"
#include "cuda/kv_encode_launch.h"
#include "cuda/mma.cuh"
#include "cuda/pdl.cuh"
#include "cuda/rope.cuh"
#include "cuda/kv_encode_row.cuh"
#include "kv/codecs/layout.h"

namespace kvtax::cuda::detail {

namespace {

using kv::CodecId;
constexpr int kWarps = 4, kMaxD = 256, kMaxRow = kMaxD * 4 + 16;

template <CodecId C, int D>
__global__ void __launch_bounds__(kWarps * 32) encode_kernel(EncodeArgs a) {
  __shared__ float xs[kWarps][kMaxD];
  __shared__ __align__(16) uint8_t rows[kWarps][kMaxRow];
  __shared__ uint8_t codes[kWarps][kMaxD];
  pdl_trigger();  // every block is resident: the attention may launch and prefetch its first tiles
  pdl_wait();     // k and v come from the kernels before this one
  const int w = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int per_tok = a.n_kv * (a.v ? 2 : 1);
  const int r = blockIdx.x * kWarps + w;
  if (r >= a.n_tok * per_tok) {  // past the K/V rows: q heads to rotate, if any
    const int qr = r - a.n_tok * per_tok;
    if (!a.rope || qr >= a.n_tok * a.n_q) return;  // whole warps
    const int t = qr / a.n_q;
    const int pos = a.pos_dev ? a.pos_dev[t] : a.pos0 + t;
    for (int i = lane; i < a.rp.dim / 2; i += 32) rope_pair(a.q + size_t(qr) * a.d, i, pos, a.rp);
    return;
  }
  const int t = r / per_tok, rem = r % per_tok, is_v = rem >= a.n_kv ? 1 : 0, h = rem % a.n_kv;
  const int pos = a.pos_dev ? a.pos_dev[t] : a.pos0 + t;
  const float* src = (is_v ? a.v : a.k) + (size_t(t) * a.n_kv + h) * a.d;
  for (int i = lane; i < a.d; i += 32) xs[w][i] = src[i];
  __syncwarp();
  if (a.rope && !is_v) {
    for (int i = lane; i < a.rp.dim / 2; i += 32) rope_pair(xs[w], i, pos, a.rp);
    __syncwarp();
  }
  encode_row<C, D>(a.d, xs[w], rows[w], codes[w], a.t);
  store_row(a.pages ? paged_row(a, pos, h, is_v) : a.rows + size_t(t) * a.row_bytes, rows[w], a.row_bytes, lane);
}

}  // namespace

cudaError_t launch_encode(const EncodeArgs& a, cudaStream_t s) {
  if (a.d > kMaxD || a.d % 32 != 0 || a.row_bytes > kMaxRow || a.row_bytes % 4 != 0) return cudaErrorInvalidValue;
  if (a.rope && (a.rp.dim < 2 || a.rp.dim > a.d || !a.q || a.n_q < 1 || !a.v)) return cudaErrorInvalidValue;
  const int n_rows = a.n_tok * (a.n_kv * (a.v ? 2 : 1) + (a.rope ? a.n_q : 0));
  if (n_rows == 0) return cudaSuccess;
  auto go = [&]<CodecId C, int D>() {
    return launch_pdl(encode_kernel<C, D>, (n_rows + kWarps - 1) / kWarps, kWarps * 32, s, a);
  };
  if (a.d == 64 || a.d == 128 || a.d == 256) return dispatch(AllCodecs{}, Dims<64, 128, 256>{}, a.codec, a.d, go);
  return dispatch(AllCodecs{}, Dims<0>{}, a.codec, 0, go);  // other widths: d at run time
}

}  // namespace kvtax::cuda::detail
