#include "cuda/kv_encode.h"

#include "core/error.h"
#include "cuda/attention_launch.h"
#include "cuda/codec_tables.h"
#include "cuda/kv_encode_launch.h"
#include "kv/codecs/formats.h"
#include "kv/codecs/layout.h"

namespace kvtax::cuda {
namespace {

detail::EncodeTables tables_for(kv::CodecId c) {
  const CodecTables& t = codec_tables();
  detail::EncodeTables e{t.signs.as<float>(), nullptr, nullptr};
  if (c == kv::CodecId::tq4) e = {t.signs.as<float>(), t.tq4.as<float>(), t.tq4_thr.as<float>()};
  if (c == kv::CodecId::tq3) e = {t.signs.as<float>(), t.tq3.as<float>(), t.tq3_thr.as<float>()};
  return e;
}

void check_codec(kv::CodecId c, int d) {
  if (int(c) >= kv::kNumCodecs || !decode_supported(c, d))
    fail("CUDA KV encode: no kernel for codec {} with head_dim {} (supported: 64, 128, 256)",
         int(c) < kv::kNumCodecs ? kv::codec(c).name : "?", d);
}

detail::EncodeArgs paged_args(const KvTarget& dst, const float* k, const float* v, int n_tok, int pos0,
                              const int* pos_dev) {
  check_codec(dst.codec, dst.head_dim);
  if (n_tok < 0 || pos0 < 0) fail("CUDA KV encode: {} tokens at position {}", n_tok, pos0);
  if (dst.row_bytes != kv::layout::row_bytes(dst.codec, dst.head_dim))
    fail("CUDA KV encode: row of {} bytes, codec {} needs {}", dst.row_bytes, kv::codec(dst.codec).name,
         kv::layout::row_bytes(dst.codec, dst.head_dim));
  detail::EncodeArgs a{};
  a.codec = dst.codec;
  a.d = dst.head_dim;
  a.n_kv = dst.n_kv_heads;
  a.n_tok = n_tok;
  a.pos0 = pos0;
  a.pos_dev = pos_dev;
  a.row_bytes = dst.row_bytes;
  a.k = k;
  a.v = v;
  a.pool = dst.pool;
  a.pages = dst.pages;
  a.page_bytes = dst.page_bytes;
  a.head_stride = size_t(detail::kPageTokens) * dst.row_bytes;
  a.v_offset = size_t(dst.n_kv_heads) * a.head_stride;
  a.t = tables_for(dst.codec);
  return a;
}

}  // namespace

void encode_kv(const KvTarget& dst, const float* k, const float* v, int n_tok, int pos0, cudaStream_t s,
               const int* pos_dev) {
  check(detail::launch_encode(paged_args(dst, k, v, n_tok, pos0, pos_dev), s), "KV encode launch");
}

void encode_kv_rope(const KvTarget& dst, float* q, int n_q, const float* k, const float* v, int n_tok, int pos0,
                    const ops::RopeParams& rope, cudaStream_t s, const int* pos_dev, bool rotate_q) {
  if (!q || n_q < 1 || !v) fail("CUDA KV encode: RoPE fused in needs q ({} heads), k and v", n_q);
  if (rotate_q && !q_rotation_fuses(dst.codec, dst.head_dim))
    fail("CUDA KV encode: q is rotated only for rotated codecs at head_dim 64, 128 or 256 (codec {}, head_dim {})",
         kv::codec(dst.codec).name, dst.head_dim);
  if (rope.dim < 2 || rope.dim > dst.head_dim || rope.dim % 2 != 0)
    fail("CUDA KV encode: rotary dims {} outside 2..{} (even)", rope.dim, dst.head_dim);
  detail::EncodeArgs a = paged_args(dst, k, v, n_tok, pos0, pos_dev);
  a.rope = true;
  a.q = q;
  a.n_q = n_q;
  a.rp = rope;
  a.rotate_q = rotate_q;
  check(detail::launch_encode(a, s), "KV encode launch");
}

void encode_rows(kv::CodecId codec, int d, const float* x, int n, uint8_t* rows, cudaStream_t s) {
  check_codec(codec, d);
  if (n < 0) fail("CUDA KV encode: {} rows", n);
  detail::EncodeArgs a{};
  a.codec = codec;
  a.d = d;
  a.n_kv = 1;
  a.n_tok = n;
  a.row_bytes = kv::layout::row_bytes(codec, d);
  a.k = x;
  a.rows = rows;
  a.t = tables_for(codec);
  check(detail::launch_encode(a, s), "KV encode launch");
}

}  // namespace kvtax::cuda
