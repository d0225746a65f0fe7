#pragma once
// The kernels' view of one layer's paged K/V (attention_launch.h), filled from a KvView: one place for
// the page geometry the decode and the prefill attention both read.
#include "cuda/attention.h"
#include "cuda/attention_launch.h"
#include "cuda/codec_tables.h"

namespace kvtax::cuda::detail {

inline PagedKvArgs paged_kv_args(const KvView& kv, int n_heads, const float* q, float* out) {
  PagedKvArgs a{};
  a.codec = kv.codec;
  a.head_dim = kv.head_dim;
  a.n_kv_heads = kv.n_kv_heads;
  a.n_rep = n_heads / kv.n_kv_heads;
  a.row_bytes = kv.row_bytes;
  a.head_stride = size_t(kPageTokens) * kv.row_bytes;
  a.page_bytes = kv.page_bytes;
  a.v_offset = size_t(kv.n_kv_heads) * a.head_stride;
  a.pool = kv.pool;
  a.pages = kv.pages;
  a.q = q;
  a.out = out;
  const CodecTables& t = codec_tables();
  if (kv.codec == kv::CodecId::tq4) a.levels = t.tq4.as<float>(), a.n_levels = 16;
  if (kv.codec == kv::CodecId::tq3) a.levels = t.tq3.as<float>(), a.n_levels = 8;
  return a;
}

}  // namespace kvtax::cuda::detail
