#include "engine/session.h"

#include <algorithm>

namespace kvtax {

Session::Session(const Model& m, const KvSpec& kv, int max_context, int max_batch, ThreadPool& pool)
    : fw_(m, kv, max_context, max_batch, pool) {}

int reusable_prefix(const std::vector<int32_t>& cached, const KvCache& cache, const std::vector<int32_t>& prompt) {
  if (prompt.empty()) return 0;
  const size_t limit = std::min({cached.size(), prompt.size() - 1, size_t(cache.n_past())});
  size_t n = 0;
  while (n < limit && cached[n] == prompt[n]) ++n;
  return cache.reusable_prefix(int(n));
}

void cached_after(std::vector<int32_t>& cached, const std::vector<int32_t>& prompt, const std::vector<int32_t>& answer,
                  int n_past) {
  const size_t n = size_t(std::max(0, n_past));
  cached.assign(prompt.begin(), prompt.begin() + std::ptrdiff_t(std::min(n, prompt.size())));
  if (n > prompt.size())
    cached.insert(cached.end(), answer.begin(), answer.begin() + std::ptrdiff_t(std::min(n - prompt.size(), answer.size())));
}

int Session::reusable(const std::vector<int32_t>& prompt) const { return reusable_prefix(tokens_, fw_.cache(), prompt); }

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
  cached_after(tokens_, prompt, out.tokens, fw_.n_past());
  return out;
}

}  // namespace kvtax
