#pragma once
// A sequence whose KV cache outlives one request (prefix caching): the next request keeps the longest
// common token prefix of what the cache holds, drops the rest and evaluates only its new tokens.
#include <cstdint>
#include <vector>

#include "engine/generate.h"
#include "model/forward.h"

namespace kvtax {

// The prefix rules, shared with the server's batched sequences (serve/scheduler.h):
// how many of `prompt`'s tokens a cache holding `cached` (its token at each position) can keep: the longest
// common prefix, at most prompt.size() - 1, cut to what the KV policy can truncate exactly.
int reusable_prefix(const std::vector<int32_t>& cached, const KvCache& cache, const std::vector<int32_t>& prompt);
// What the cache holds after a generation over `prompt` left it at n_past tokens: the prompt (all of it
// unless cancelled during prefill), then the answer tokens that were fed back (not the last one sampled).
void cached_after(std::vector<int32_t>& cached, const std::vector<int32_t>& prompt, const std::vector<int32_t>& answer,
                  int n_past);

class Session {
 public:
  Session(const Model& m, const KvSpec& kv, int max_context, int max_batch, ThreadPool& pool);

  // Tokens generate() would take from the cache for `prompt`: the longest common prefix with the cached
  // sequence, at most prompt.size() - 1 (the last prompt token is always evaluated for its logits), and
  // cut to what the KV policy can truncate exactly (KvCache::reusable_prefix).
  int reusable(const std::vector<int32_t>& prompt) const;

  // One request. reuse = false clears the cache first (an isolated run). o.cached_prefix is set here;
  // the result's stats.cached_tokens says how many prompt tokens came from the cache.
  GenerateOutput generate(const std::vector<int32_t>& prompt, GenerateOptions o, bool reuse = true);

  void reset();
  const std::vector<int32_t>& tokens() const { return tokens_; }  // token at each cache position
  const KvCache& cache() const { return fw_.cache(); }
  const Forward& forward() const { return fw_; }
  int max_context() const { return fw_.max_context(); }

 private:
  Forward fw_;
  std::vector<int32_t> tokens_;  // size == cache n_past
};

}  // namespace kvtax
