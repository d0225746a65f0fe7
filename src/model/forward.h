#pragma once
// The forward pass. ForwardPass runs the layer loop over a batch of sequences, each with its own KV cache
// and positions: their rows are stacked, so every weight matrix is read once per call for all of them
// (continuous batching), while attention runs per sequence over its own cache. Forward is one sequence:
// a ForwardPass plus the cache it owns.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kv/cache.h"
#include "model/decoder.h"
#include "model/model.h"
#include "ops/cpu/elementwise.h"

namespace kvtax {

// One sequence's share of a ForwardPass::eval call: n tokens at positions cache->n_past() .. +n-1.
struct SeqRows {
  KvCache* cache = nullptr;
  const int32_t* tokens = nullptr;
  int n = 0;
  float* logits = nullptr;  // [n_vocab] for the last token, or [n][n_vocab] with all_logits
  bool all_logits = false;
};

class ForwardPass {
 public:
  // max_rows: the most tokens (summed over the sequences) one eval() call takes.
  ForwardPass(const Model& m, int max_rows, ThreadPool& pool);

  // Runs every sequence's tokens through the model, appends their K/V to its cache and commits them.
  // A sequence may appear once per call. Row results do not depend on the other sequences in the call
  // beyond the float summation order of the batched matmuls.
  void eval(std::span<const SeqRows> seqs);

  int max_rows() const { return max_rows_; }
  const Model& model() const { return m_; }
  size_t scratch_bytes() const;  // the activation buffers below

 private:
  const Model& m_;
  ThreadPool& pool_;
  int max_rows_;
  Rope rope_;
  // Activations for up to max_rows tokens, row-major [row][width].
  std::vector<float> x_, xb_, xb2_, q_, k_, v_, att_, hb_, hb2_;
  // Per row: its position. Per sequence: first row, and first kept row of the last layer (+ an end entry).
  std::vector<int> row_pos_, seq_row0_, seq_q0_;
  std::vector<float> logits_;  // kept rows' logits when several sequences share a call
  // KVTAX_DUMP_DIR: writes intermediate activations (debugging parity with llama_logits --dump).
  std::string dump_dir_;
  void dump(const char* name, int layer, const float* p, size_t n) const;
};

class Forward : public Decoder {
 public:
  // max_context: tokens the cache must hold (a context overflow beyond it is an Error).
  // max_batch: the largest number of tokens one eval() call takes (the prefill chunk).
  Forward(const Model& m, const KvSpec& kv, int max_context, int max_batch, ThreadPool& pool);

  // Runs n tokens at positions n_past() .. n_past()+n-1 through the model and appends their K/V to the cache.
  // logits receives the last token's logits ([n_vocab]) or, with all_logits, every token's ([n][n_vocab]).
  void eval(const int32_t* tokens, int n, float* logits, bool all_logits = false) override;

  int n_past() const override { return cache_.n_past(); }
  int max_context() const override { return max_context_; }
  int max_batch() const override { return pass_.max_rows(); }
  void reset() override { cache_.clear(); }
  const KvCache& cache() const { return cache_; }
  KvCache& cache() { return cache_; }
  const Model& model() const override { return pass_.model(); }
  size_t scratch_bytes() const { return pass_.scratch_bytes(); }

 private:
  ForwardPass pass_;
  int max_context_;
  KvCache cache_;
};

}  // namespace kvtax
