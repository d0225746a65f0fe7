#pragma once
// Fused CPU attention over a KvCache in any codec pair: no [heads, L, ctx] score matrix is ever made.
// Work items are (KV head, tile of query positions, chunk of context); each reads its K/V rows once for
// all query heads of the group (GQA), keeps an online softmax per row, and chunks are merged with an
// exact log-sum-exp. At batch 1 the context is split into chunks so every thread has work.
#include <cstddef>

#include "core/cpu.h"
#include "core/thread_pool.h"
#include "kv/cache.h"

namespace kvtax {

// q: [n_q][n_heads*head_dim] after RoPE, for the LAST n_q positions appended to `layer` (appended and
// not yet committed, or committed: positions layer_len - n_q .. layer_len - 1). out: [n_q][n_heads*head_dim].
// Causal, policy-aware (window/sinks). scale = 1/sqrt(head_dim). Call it before commit when the policy
// evicts (a needed evicted block throws).
void attention(const KvCache&, int layer, const float* q, int n_q, int n_heads, float* out, ThreadPool& pool);
// Same at a chosen SIMD level (tests, benchmarks); levels above the CPU's are capped, and head_dim not a
// multiple of 16 (tiny test models) runs the scalar loops.
void attention_at(SimdLevel level, const KvCache&, int layer, const float* q, int n_q, int n_heads, float* out,
                  ThreadPool& pool);
// Largest scratch (bytes) any attention call has used in this process (per-thread tiles + chunk partials).
size_t attention_scratch_peak();
// Scratch (bytes) of the most recent call.
size_t attention_scratch_last();

}  // namespace kvtax
