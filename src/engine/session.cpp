#include "engine/session.h"

#include <algorithm>

namespace kvtax {

Session::Session(const Model& m, const KvSpec& kv, int max_context, int max_batch, ThreadPool& pool)
    : fw_(m, kv, max_context, max_batch, pool) {}

int Session::reusable(const std::vector<int32_t>& prompt) const {
  if (prompt.empty()) return 0;
  const size_t limit = std::min(tokens_.size(), prompt.size() - 1);
  size_t n = 0;
  while (n < limit && tokens_[n] == prompt[n]) ++n;
  return fw_.cache().reusable_prefix(int(n));
}

void Session::reset() {
  fw_.reset();
  tokens_.clear();
}

GenerateOutput Session::generate(const std::vector<int32_t>& prompt, GenerateOptions o, bool reuse) {
  const int keep = reuse ? reusable(prompt) : 0;
  fw_.cache().truncate(keep);
  tokens_.resize(size_t(keep));
  o.cached_prefix = keep;
  GenerateOutput out;
  try {
    out = kvtax::generate(fw_, prompt, o);
  } catch (...) {
    // Keep only what is committed and known (an eval may have stopped between layers).
    const size_t n = std::min(size_t(fw_.n_past()), prompt.size());
    try {
      fw_.cache().truncate(int(n));
      tokens_.assign(prompt.begin(), prompt.begin() + std::ptrdiff_t(n));
    } catch (...) {
      reset();
    }
    throw;
  }
  // The cache now holds the prompt (all of it unless cancelled during prefill) and the answer tokens that
  // were fed back (not the last one sampled).
  const size_t n = size_t(fw_.n_past());
  tokens_.assign(prompt.begin(), prompt.begin() + std::ptrdiff_t(std::min(n, prompt.size())));
  if (n > prompt.size())
    tokens_.insert(tokens_.end(), out.tokens.begin(), out.tokens.begin() + std::ptrdiff_t(n - prompt.size()));
  return out;
}

}  // namespace kvtax
