// The CPU side of the server: every step is one ForwardPass over all running sequences.
#include <fmt/format.h>

#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/session.h"
#include "model/forward.h"
#include "serve/scheduler.h"
#include "serve/step_engine.h"

namespace kvtax::serve {
namespace {

class CpuSeq : public EngineSeq {
 public:
  CpuSeq(const KvShape& shape, const KvSpec& kv, int max_context, int batch)
      : cache(shape, kv, size_t(max_context), batch) {}
  size_t bytes_used() const override { return cache.bytes_used(); }
  int n_past() const override { return cache.n_past(); }
  void clear() override { cache.clear(); }
  void truncate(int n) override { cache.truncate(n); }
  int reusable(const std::vector<int32_t>& cached, const std::vector<int32_t>& prompt) const override {
    return reusable_prefix(cached, cache, prompt);
  }
  KvCache cache;
};

class CpuEngine : public StepEngine {
 public:
  CpuEngine(const Model& m, const SchedulerConfig& c)
      : shape_{int(m.config().n_layers), int(m.config().n_kv_heads), int(m.config().head_dim)},
        kv_(c.kv), batch_(c.batch), pool_(c.threads), pass_(m, std::max(1, c.batch), pool_) {
    budget_ = c.kv_budget ? c.kv_budget
                          : size_t(c.parallel) * KvCache::bytes_needed(shape_, kv_, size_t(c.max_context), batch_);
    cap_ = KvCache::capacity(shape_, kv_, budget_, batch_);
    if (cap_ < 2) fail("serve: a KV budget of {} bytes holds no sequence under KV spec {}", budget_, kv_.str());
    max_context_ = int(std::min(cap_, size_t(c.max_context)));
  }
  size_t budget() const override { return budget_; }
  int max_context() const override { return max_context_; }
  size_t bytes_needed(size_t tokens) const override { return KvCache::bytes_needed(shape_, kv_, tokens, batch_); }
  bool batched() const override { return true; }
  std::string describe() const override {
    return fmt::format("CPU, {} threads; KV cache: {} tokens in {:.3f} GiB ({})", pool_.size(), cap_,
                       double(budget_) / (1ull << 30), kv_.str());
  }
  std::unique_ptr<EngineSeq> sequence() override {
    return std::make_unique<CpuSeq>(shape_, kv_, max_context_, batch_);
  }
  void eval(std::span<const EngineRows> rows) override {
    std::vector<SeqRows> seqs;
    seqs.reserve(rows.size());
    for (const EngineRows& r : rows)
      seqs.push_back({&static_cast<CpuSeq*>(r.seq)->cache, r.tokens, r.n, r.logits, false});
    pass_.eval(seqs);
  }

 private:
  KvShape shape_;
  KvSpec kv_;
  int batch_;
  ThreadPool pool_;
  ForwardPass pass_;
  size_t budget_ = 0, cap_ = 0;
  int max_context_ = 0;
};

}  // namespace

std::unique_ptr<StepEngine> cpu_engine(const Model& m, const SchedulerConfig& c) {
  return std::make_unique<CpuEngine>(m, c);
}

}  // namespace kvtax::serve
