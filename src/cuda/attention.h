#pragma once
// Flash-decode attention on the device, written once over the codec unit decoders of
// kv/codecs/layout.h (the same bit layouts the CPU reads). The context is split into chunks so that
// a single query fills every SM; each block (one KV head, one chunk, up to 16 query heads of its GQA
// group: the M rows of the tensor-core kernel, attention_mma.cu; 8 for the scalar f32 kernel) keeps
// an online softmax and writes an unnormalised partial; a second kernel merges the chunks with an exact
// log-sum-exp and un-rotates the output of rotated V codecs.
#include <cstddef>
#include <cstdint>

#include "cuda/runtime.h"
#include "kv/cache.h"
#include "kv/codecs/codec.h"

namespace kvtax::cuda {

// head_dim 64, 128 or 256, and any codec of kv/codecs.
bool decode_supported(kv::CodecId codec, int head_dim);

// Tokens per KV page (attention_launch.h): a page holds that many tokens of one layer, K rows
// [kv_head][token][row_bytes] then V rows in the same order.
int kv_page_tokens();
size_t kv_page_bytes(kv::CodecId codec, int n_kv_heads, int head_dim);

// One layer's paged K/V as the attention kernel reads it: token t of KV head h sits in page
// pages[t / kv_page_tokens()] of `pool` (pages is a device array).
struct KvView {
  kv::CodecId codec;
  int n_kv_heads, head_dim, len;
  size_t row_bytes, page_bytes;
  const uint8_t* pool;
  const int32_t* pages;
  int max_len;  // tokens the page table covers (sizes the attention scratch)
  // Optional device copy of len read by the kernel at run time, so one launch (a CUDA graph node) serves
  // every length; the grid is then sized for max_len.
  const int* len_dev = nullptr;
};

// One layer's K and V on the device in pages of its own, in token order (tests and benchmarks).
class DeviceKv {
 public:
  DeviceKv(kv::CodecId codec, int n_kv_heads, int head_dim, int capacity);

  kv::CodecId codec() const { return codec_; }
  int n_kv_heads() const { return n_kv_heads_; }
  int head_dim() const { return head_dim_; }
  int capacity() const { return capacity_; }
  int len() const { return len_; }
  size_t row_bytes() const { return row_bytes_; }
  size_t bytes() const { return pool_.bytes(); }
  KvView view() const;

  // n encoded rows of KV head h at positions pos.. (host memory, rows back to back); len covers them.
  void write_rows(int h, int pos, int n, const uint8_t* k_rows, const uint8_t* v_rows);
  // Every token of one layer of a CPU cache (unbounded policy; its K and V codec must be this codec).
  void copy_from(const KvCache& cache, int layer);
  // Attend over the first len tokens (<= capacity; rows must have been written).
  void set_len(int len);
  // Every byte of the pages set to `byte` (tests: 0xff makes the rows no one wrote NaN codes).
  void fill(uint8_t byte) { pool_.fill(byte); }

 private:
  kv::CodecId codec_;
  int n_kv_heads_, head_dim_, capacity_, len_ = 0;
  size_t row_bytes_, page_bytes_;
  Buffer pool_, pages_;
};

// Grid size in waves of resident blocks (default 1); for benchmarks. Scratch sized before a change
// may be too small after it.
void set_decode_waves(int waves);

// Device scratch decode_attention needs for n_heads query heads at any length up to kv.max_len.
size_t decode_scratch_bytes(const KvView& kv, int n_heads);
// Context chunks one call uses at kv.len (for reports).
int decode_splits(const KvView& kv, int n_heads);

// q: device [n_heads][head_dim] f32 for the position after the last stored token (after RoPE);
// out: device [n_heads][head_dim]. Scale 1/sqrt(head_dim); attends to all kv.len tokens. out_codes: a GEMV
// scratch (gemv.h) into which out's int8 codes go too, so that a quantized GEMV of out takes them
// (GemvFusion::x_in_scratch) instead of a pass of its own. q_rotated: for a rotated codec, q has been rotated as K
// is (encode_kv_rope's rotate_q), and the kernel does not rotate it again.
void decode_attention(const KvView& kv, const float* q, int n_heads, float* out, void* scratch,
                      cudaStream_t stream = nullptr, void* out_codes = nullptr, bool q_rotated = false);

inline size_t decode_scratch_bytes(const DeviceKv& kv, int n_heads) { return decode_scratch_bytes(kv.view(), n_heads); }
inline int decode_splits(const DeviceKv& kv, int n_heads) { return decode_splits(kv.view(), n_heads); }
inline void decode_attention(const DeviceKv& kv, const float* q, int n_heads, float* out, void* scratch,
                             cudaStream_t stream = nullptr, void* out_codes = nullptr, bool q_rotated = false) {
  decode_attention(kv.view(), q, n_heads, out, scratch, stream, out_codes, q_rotated);
}

}  // namespace kvtax::cuda
