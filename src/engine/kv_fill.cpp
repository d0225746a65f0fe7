#include "engine/kv_fill.h"

#include <algorithm>

#include "core/error.h"

namespace kvtax {

void fill_kv_by_tiling(Forward& fw, const std::vector<int32_t>& prefix, int depth) {
  if (prefix.empty()) fail("KV fill: the prefix is empty");
  if (fw.n_past() != 0) fail("KV fill: the cache already holds {} tokens (it must start empty)", fw.n_past());
  if (depth < 0 || depth > fw.max_context())
    fail("KV fill: depth {} outside 0..{} (the context size)", depth, fw.max_context());
  if (depth == 0) return;

  const int n_prefix = std::min(int(prefix.size()), depth);
  std::vector<float> logits(fw.model().config().n_vocab);
  for (int i = 0; i < n_prefix; i += fw.max_batch())
    fw.eval(prefix.data() + i, std::min(fw.max_batch(), n_prefix - i), logits.data());
  if (depth == n_prefix) return;

  // The prefix's rows as attention sees them, [layer][pos][kv_head][head_dim], K after RoPE.
  KvCache& cache = fw.cache();
  const KvShape& s = cache.shape();
  const size_t row = size_t(s.n_kv_heads) * s.head_dim, per_layer = size_t(n_prefix) * row;
  std::vector<float> k(per_layer * s.n_layers), v(k.size());
  for (int l = 0; l < s.n_layers; ++l)
    for (int p = 0; p < n_prefix; ++p)
      for (int h = 0; h < s.n_kv_heads; ++h) {
        const size_t at = l * per_layer + p * row + size_t(h) * s.head_dim;
        cache.read_token(l, p, h, &k[at], &v[at]);
      }

  // Chunks never cross the end of the prefix, so each is one contiguous run of its rows.
  const int chunk = std::min(n_prefix, fw.max_batch());
  while (cache.n_past() < depth) {
    const int src = cache.n_past() % n_prefix;
    const int n = std::min({chunk, n_prefix - src, depth - cache.n_past()});
    for (int l = 0; l < s.n_layers; ++l)
      cache.append(l, n, &k[l * per_layer + src * row], &v[l * per_layer + src * row]);
    cache.commit(n);
  }
}

}  // namespace kvtax
