#include "serve/scheduler.h"

#include <chrono>
#include <new>
#include <optional>

#include "core/error.h"
#include "core/timer.h"
#include "engine/device.h"
#include "engine/session.h"

#include <algorithm>

#include <fmt/format.h>

namespace kvtax::serve {

std::string Job::take(double timeout_s, bool& done) {
  std::unique_lock lk(mu_);
  cv_.wait_for(lk, std::chrono::duration<double>(timeout_s), [&] { return done_ || !pending_.empty(); });
  std::string out;
  out.swap(pending_);
  done = done_ && pending_.empty();
  return out;
}

void Job::push(const std::string& text) {
  {
    std::lock_guard lk(mu_);
    pending_ += text;
  }
  cv_.notify_all();
}

void Job::finish(const GenerateStats& st, std::optional<ApiError> err) {
  {
    std::lock_guard lk(mu_);
    stats_ = st;
    error_ = std::move(err);
    done_ = true;
  }
  cv_.notify_all();
}

// One sequence the engine can run: its own KV cache (and the tokens it holds, the prefix cache) and, while
// a request runs on it, that request's generation.
struct Scheduler::Slot {
  std::unique_ptr<EngineSeq> cache;
  std::vector<int32_t> tokens;  // token at each committed cache position
  std::shared_ptr<Job> job;     // null when idle
  std::unique_ptr<Generation> gen;
  size_t need = 0;              // KV bytes the running request was admitted with
  uint64_t stamp = 0;           // admission order while running; last use while idle
  double t_start = 0;
  std::optional<int32_t> picked;  // the engine's pick of this step's token, where it picks (EngineRows::pick)
};

Scheduler::Scheduler(const Model& m, const SchedulerConfig& c, Metrics& metrics, DeviceBackend* device)
    : model_(m), cfg_(c), metrics_(metrics) {
  if (cfg_.parallel < 1) fail("serve: --parallel must be >= 1, got {}", cfg_.parallel);
  if (cfg_.batch < cfg_.parallel)
    fail("serve: the step of {} tokens (--batch) cannot hold one token for each of {} sequences (--parallel)",
         cfg_.batch, cfg_.parallel);
  engine_ = device ? device_engine(*device, cfg_) : cpu_engine(m, cfg_);
  budget_ = engine_->budget();
  cfg_.max_context = engine_->max_context();
  for (int i = 0; i < cfg_.parallel; ++i) {
    auto s = std::make_unique<Slot>();
    s->cache = engine_->sequence();
    slots_.push_back(std::move(s));
  }
  thread_ = std::thread([this] { worker(); });
}

Scheduler::~Scheduler() { drain(0); }

void Scheduler::submit(const std::shared_ptr<Job>& job) {
  {
    std::lock_guard lk(mu_);
    if (stopping_) throw ApiError(503, "server_error", "the server is shutting down");
    if (queue_.size() >= cfg_.queue_limit)
      throw ApiError(429, "rate_limit_exceeded",
                     "too many requests waiting (" + std::to_string(cfg_.queue_limit) + "); retry later");
    queue_.push_back(job);
  }
  cv_.notify_all();
}

void Scheduler::drain(double grace_s) {
  {
    std::unique_lock lk(mu_);
    stopping_ = true;
    cv_.notify_all();
    cv_.wait_for(lk, std::chrono::duration<double>(grace_s), [&] { return queue_.empty() && running_.empty(); });
    for (auto& j : queue_) j->cancel = true;
    for (auto& j : running_) j->cancel = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

KvGauges Scheduler::gauges() const {
  KvGauges g;
  g.bytes_used = kv_used_;
  g.bytes_active = kv_active_;
  g.bytes_admitted = kv_admitted_;
  g.bytes_reserved = budget_;
  g.capacity_tokens = size_t(cfg_.max_context);
  g.parallel = size_t(cfg_.parallel);
  g.batched_engine = engine_->batched();
  std::lock_guard lk(mu_);
  g.queue_depth = queue_.size();
  g.running = running_.size();
  g.queue_limit = cfg_.queue_limit;
  return g;
}

size_t Scheduler::need_bytes(const Job& job) const {
  const size_t tokens = std::min(job.prompt.size() + size_t(std::max(job.max_tokens, 0)), size_t(cfg_.max_context));
  return engine_->bytes_needed(tokens);
}

void Scheduler::update_gauges() {
  size_t used = 0, active = 0, admitted = 0;
  for (const auto& s : slots_) {
    used += s->cache->bytes_used();
    if (s->job) active += s->cache->bytes_used(), admitted += s->need;
  }
  kv_used_ = used;
  kv_active_ = active;
  kv_admitted_ = admitted;
}

void Scheduler::worker() {
  for (;;) {
    {
      std::unique_lock lk(mu_);
      admit();
      if (running_.empty()) {
        if (stopping_ && queue_.empty()) return;
        cv_.wait(lk, [&] { return stopping_ || !queue_.empty(); });
        continue;
      }
    }
    step();
  }
}

void Scheduler::admit() {
  while (!queue_.empty()) {
    const std::shared_ptr<Job> job = queue_.front();
    if (job->cancel) {  // gone before it started
      queue_.pop_front();
      GenerateStats st;
      st.stop_reason = "cancel";
      metrics_.cancelled();
      job->finish(st, std::nullopt);
      continue;
    }
    // The idle slot that serves this prompt best: the longest reusable prefix, else the least recently used.
    Slot* best = nullptr;
    int best_keep = -1;
    size_t held = 0;  // KV that running requests were admitted with plus what idle caches hold
    for (auto& s : slots_) {
      if (s->job) {
        held += s->need;
        continue;
      }
      held += s->cache->bytes_used();
      const int keep = cfg_.prefix_cache && job->reuse ? s->cache->reusable(s->tokens, job->prompt) : 0;
      if (!best || keep > best_keep || (keep == best_keep && s->stamp < best->stamp)) best = s.get(), best_keep = keep;
    }
    if (!best) return;  // every sequence is running
    // Room for the request: the budget less what others hold; idle prefix caches go, oldest first, if needed.
    const size_t need = need_bytes(*job);
    size_t others = held - best->cache->bytes_used();
    while (others + need > budget_) {
      Slot* victim = nullptr;
      for (auto& s : slots_)
        if (!s->job && s.get() != best && s->cache->bytes_used() > 0 && (!victim || s->stamp < victim->stamp))
          victim = s.get();
      if (!victim) break;
      others -= victim->cache->bytes_used();
      victim->cache->clear();
      victim->tokens.clear();
    }
    if (others + need > budget_) {
      if (!running_.empty()) return;  // the head waits for running requests to free KV
      // Nothing runs and nothing is cached: it can never fit (submit's context check should have said so).
      queue_.pop_front();
      job->finish(GenerateStats{}, ApiError(400, "invalid_request_error",
                                            fmt::format("the request needs {} KV bytes; the budget is {}", need, budget_),
                                            "max_tokens", "context_length_exceeded"));
      continue;
    }
    queue_.pop_front();
    best->need = need;
    if (start(*best, job)) running_.push_back(job);
  }
}

bool Scheduler::start(Slot& slot, const std::shared_ptr<Job>& job) {
  const int keep = cfg_.prefix_cache && job->reuse ? slot.cache->reusable(slot.tokens, job->prompt) : 0;
  GenerateOptions o;
  o.max_tokens = job->max_tokens;
  o.prefill_chunk = cfg_.batch;
  o.sampler = job->sampler;
  o.stop = job->stop;
  o.cancel = &job->cancel;
  o.cached_prefix = keep;
  Job* j = job.get();
  o.on_text = [j](const std::string& s) {
    j->push(s);
    return !j->cancel.load();
  };
  try {
    slot.cache->truncate(keep);
    slot.tokens.resize(size_t(keep));
    slot.gen = std::make_unique<Generation>(model_.tokenizer(), int(model_.config().n_vocab), job->prompt, o, keep,
                                            cfg_.max_context);
    slot.gen->use_logits_row(slot.cache->logits_row());
  } catch (const std::exception& e) {
    slot.cache->clear();
    slot.tokens.clear();
    slot.need = 0;
    job->finish(GenerateStats{}, ApiError(400, "invalid_request_error", e.what()));
    return false;
  }
  slot.job = job;
  slot.stamp = ++clock_;
  slot.t_start = now_seconds();
  return true;
}

void Scheduler::step() {
  // Every decoding sequence gets its token; prefills, oldest first, share what is left of the step.
  std::vector<Slot*> order;
  for (auto& s : slots_)
    if (s->job) order.push_back(s.get());
  std::stable_sort(order.begin(), order.end(), [](const Slot* a, const Slot* b) {
    if (a->gen->prefilling() != b->gen->prefilling()) return !a->gen->prefilling();
    return a->stamp < b->stamp;
  });
  std::vector<EngineRows> rows;
  std::vector<Slot*> in, finished;
  int budget = cfg_.batch;
  for (Slot* s : order) {
    if (budget <= 0) break;
    const auto t = s->gen->next(budget);
    if (t.empty()) {  // cancelled before its next prefill chunk
      finished.push_back(s);
      continue;
    }
    const std::optional<TokenPick> pick = engine_->picks() ? s->gen->pick() : std::nullopt;
    s->picked = pick ? std::optional<int32_t>(kNoPick) : std::nullopt;
    rows.push_back({s->cache.get(), t.data(), int(t.size()), s->gen->logits(), pick, pick ? &*s->picked : nullptr});
    in.push_back(s);
    budget -= int(t.size());
  }
  if (!rows.empty()) {
    metrics_.step(int(rows.size()), cfg_.batch - budget);
    try {
      engine_->eval(rows);
    } catch (const std::bad_alloc&) {
      for (Slot* s : in) complete(*s, ApiError(503, "server_error", "out of memory while generating"));
      in.clear();
    } catch (const DeviceOutOfMemory& e) {
      for (Slot* s : in) complete(*s, ApiError(503, "server_error", std::string("out of device memory: ") + e.what()));
      in.clear();
    } catch (const std::exception& e) {
      for (Slot* s : in) complete(*s, ApiError(500, "server_error", e.what()));
      in.clear();
    }
  }
  for (Slot* s : in) {
    try {  // a sequence whose logits came out NaN fails alone (Generation::sample)
      if (s->picked) s->gen->advance(*s->picked);
      else s->gen->advance();
    } catch (const std::exception& e) {
      complete(*s, ApiError(500, "server_error", e.what()));
      continue;
    }
    if (s->gen->done()) finished.push_back(s);
  }
  for (Slot* s : finished) complete(*s, std::nullopt);
  update_gauges();
}

void Scheduler::complete(Slot& slot, std::optional<ApiError> err) {
  const std::shared_ptr<Job> job = std::move(slot.job);
  GenerateOutput out = slot.gen->take_output();
  slot.gen.reset();
  const GenerateStats& st = out.stats;
  const bool cancelled = st.stop_reason == "cancel";
  // A cancelled or failed request frees its KV; without the prefix cache nothing outlives a request.
  if (err || cancelled || !cfg_.prefix_cache) {
    slot.cache->clear();
    slot.tokens.clear();
  } else {
    cached_after(slot.tokens, job->prompt, out.tokens, slot.cache->n_past());
  }
  slot.need = 0;
  slot.stamp = ++clock_;
  if (!err && !cancelled) {
    metrics_.tokens(st.prompt_tokens, st.cached_tokens, st.generated_tokens);
    if (st.generated_tokens > 0) metrics_.ttft(slot.t_start - job->t_arrival + st.ttft_s);
    for (double g : st.itl_s) metrics_.itl(g);
  }
  if (cancelled) metrics_.cancelled();
  update_gauges();
  {
    std::lock_guard lk(mu_);
    std::erase(running_, job);
  }
  job->finish(st, std::move(err));
  cv_.notify_all();
}

}  // namespace kvtax::serve
