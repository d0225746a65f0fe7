#pragma once
// One sequence's forward pass over its KV cache.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kv/cache.h"
#include "model/decoder.h"
#include "model/model.h"
#include "ops/cpu/elementwise.h"

namespace kvtax {

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
  int max_batch() const override { return max_batch_; }
  void reset() override { cache_.clear(); }
  const KvCache& cache() const { return cache_; }
  KvCache& cache() { return cache_; }
  const Model& model() const override { return m_; }
  size_t scratch_bytes() const;  // the activation buffers below

 private:
  const Model& m_;
  ThreadPool& pool_;
  int max_context_, max_batch_;
  KvCache cache_;
  Rope rope_;
  // Activations for up to max_batch tokens, row-major [token][width].
  std::vector<float> x_, xb_, xb2_, q_, k_, v_, att_, hb_, hb2_;
  // KVTAX_DUMP_DIR: writes intermediate activations (debugging parity with llama_logits --dump).
  std::string dump_dir_;
  void dump(const char* name, int layer, const float* p, size_t n) const;
};

}  // namespace kvtax
