#include "serve/scheduler.h"

#include <chrono>
#include <new>

#include "core/error.h"
#include "core/timer.h"

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

Scheduler::Scheduler(const Model& m, const SchedulerConfig& c, Metrics& metrics)
    : model_(m), cfg_(c), metrics_(metrics), pool_(c.threads), session_(m, c.kv, c.max_context, c.batch, pool_) {
  reserved_ = session_.cache().bytes_reserved();
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
    cv_.wait_for(lk, std::chrono::duration<double>(grace_s), [&] { return queue_.empty() && !running_; });
    for (auto& j : queue_) j->cancel = true;
    if (running_) running_->cancel = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

KvGauges Scheduler::gauges() const {
  KvGauges g;
  g.bytes_used = kv_used_;
  g.bytes_active = kv_active_;
  g.bytes_reserved = reserved_;
  g.capacity_tokens = size_t(cfg_.max_context);
  std::lock_guard lk(mu_);
  g.queue_depth = queue_.size();
  g.running = running_ ? 1 : 0;
  g.queue_limit = cfg_.queue_limit;
  return g;
}

void Scheduler::worker() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and nothing left
      job = queue_.front();
      queue_.pop_front();
      running_ = job;
    }
    run(*job);
    {
      std::lock_guard lk(mu_);
      running_.reset();
    }
    cv_.notify_all();
  }
}

void Scheduler::run(Job& job) {
  GenerateStats st;
  std::optional<ApiError> err;
  if (job.cancel) {
    st.stop_reason = "cancel";
    job.finish(st, std::nullopt);
    metrics_.cancelled();
    return;
  }
  const double t_start = now_seconds();
  GenerateOptions o;
  o.max_tokens = job.max_tokens;
  o.prefill_chunk = cfg_.batch;
  o.sampler = job.sampler;
  o.stop = job.stop;
  o.cancel = &job.cancel;
  o.on_text = [&](const std::string& s) {
    kv_used_ = kv_active_ = session_.cache().bytes_used();
    job.push(s);
    return !job.cancel.load();
  };
  try {
    st = session_.generate(job.prompt, o, cfg_.prefix_cache && job.reuse).stats;
  } catch (const std::bad_alloc&) {
    err = ApiError(503, "server_error", "out of memory while generating");
  } catch (const std::exception& e) {
    err = ApiError(500, "server_error", e.what());
  }
  // A cancelled request frees its KV; without the prefix cache nothing outlives a request.
  if (err || st.stop_reason == "cancel" || !cfg_.prefix_cache) session_.reset();
  kv_used_ = session_.cache().bytes_used();
  kv_active_ = 0;
  if (!err && st.stop_reason != "cancel") {
    metrics_.tokens(st.prompt_tokens, st.cached_tokens, st.generated_tokens);
    if (st.generated_tokens > 0) metrics_.ttft(t_start - job.t_arrival + st.ttft_s);
    for (double g : st.itl_s) metrics_.itl(g);
  }
  if (st.stop_reason == "cancel") metrics_.cancelled();
  job.finish(st, std::move(err));
}

}  // namespace kvtax::serve
