// The device side of the server: one weight upload, a KV page pool of the whole budget, and one decoder per
// sequence slot. The device decoder evaluates one sequence per call, so a step runs its sequences one after
// another (no cross-sequence batching of the weight reads).
#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"
#include "engine/device.h"
#include "serve/scheduler.h"
#include "serve/step_engine.h"

namespace kvtax::serve {
namespace {

class DeviceSeq : public EngineSeq {
 public:
  explicit DeviceSeq(std::unique_ptr<DeviceDecoder> d) : dec(std::move(d)) {}
  size_t bytes_used() const override { return dec->kv_bytes_used(); }
  int n_past() const override { return dec->n_past(); }
  void clear() override { dec->reset(); }
  void truncate(int n) override { dec->truncate(n); }
  float* logits_row() override { return dec->logits_row(); }
  // The device keeps every token in one codec (no window or tiers), so any common prefix can be kept.
  int reusable(const std::vector<int32_t>& cached, const std::vector<int32_t>& prompt) const override {
    if (prompt.empty()) return 0;
    const size_t limit = std::min({cached.size(), prompt.size() - 1, size_t(dec->n_past())});
    size_t n = 0;
    while (n < limit && cached[n] == prompt[n]) ++n;
    return int(n);
  }
  std::unique_ptr<DeviceDecoder> dec;
};

class DeviceEngine : public StepEngine {
 public:
  DeviceEngine(DeviceBackend& dev, const SchedulerConfig& c) : dev_(dev), kv_(c.kv), batch_(c.batch) {
    const size_t want = c.kv_budget ? c.kv_budget : size_t(c.parallel) * dev.kv_bytes_for(kv_, size_t(c.max_context));
    pool_ = dev.kv_pool(kv_, want);
    budget_ = pool_->bytes();
    const size_t cap = pool_->capacity_tokens();
    if (cap < 2) fail("serve: a KV budget of {} bytes holds no sequence under KV spec {} on the device", want, kv_.str());
    max_context_ = int(std::min(cap, size_t(c.max_context)));
    const int n = std::min(max_context_, batch_);
    for (int i = 0; i < c.parallel; ++i) {
      auto d = dev.shared_decoder(kv_, max_context_, pool_);
      try {
        d->prepare(n);
      } catch (const DeviceOutOfMemory& e) {  // say which setting asked for it: the default --batch is larger here
        throw DeviceOutOfMemory(fmt::format("{} (serve: sequence {} of {}, each with prefill buffers of {} rows: a "
                                            "smaller --batch, --parallel or --kv-reserve needs less)",
                                            e.what(), i + 1, c.parallel, n));
      }
      picks_ = d->has_pick();
      seqs_.push_back(std::move(d));
    }
  }
  size_t budget() const override { return budget_; }
  int max_context() const override { return max_context_; }
  size_t bytes_needed(size_t tokens) const override { return pool_->bytes_for(tokens); }
  bool batched() const override { return false; }
  bool picks() const override { return picks_; }
  std::string describe() const override {
    return fmt::format("{}; KV cache: {} tokens in {:.3f} GiB ({}); sequences are stepped one after another",
                       dev_.describe(), pool_->capacity_tokens(), double(budget_) / (1ull << 30), kv_.str());
  }
  // The decoders were made (and their buffers allocated) at start; the scheduler takes them in turn.
  std::unique_ptr<EngineSeq> sequence() override {
    if (seqs_.empty()) fail("serve: the device engine made {} sequences at start; no more", handed_);
    ++handed_;
    auto s = std::make_unique<DeviceSeq>(std::move(seqs_.back()));
    seqs_.pop_back();
    return s;
  }
  void eval(std::span<const EngineRows> rows) override {
    for (const EngineRows& r : rows) {
      DeviceDecoder& d = *static_cast<DeviceSeq*>(r.seq)->dec;
      if (r.pick) *r.picked = d.eval_pick(r.tokens, r.n, *r.pick);
      else d.eval(r.tokens, r.n, r.logits);
    }
  }

 private:
  DeviceBackend& dev_;
  KvSpec kv_;
  int batch_;
  bool picks_ = false;
  std::shared_ptr<DeviceKvPool> pool_;
  std::vector<std::unique_ptr<DeviceDecoder>> seqs_;
  size_t budget_ = 0;
  int max_context_ = 0, handed_ = 0;
};

}  // namespace

std::unique_ptr<StepEngine> device_engine(DeviceBackend& dev, const SchedulerConfig& c) {
  return std::make_unique<DeviceEngine>(dev, c);
}

}  // namespace kvtax::serve
