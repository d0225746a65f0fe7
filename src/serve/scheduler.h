#pragma once
// One engine worker behind a bounded FIFO: requests run one at a time, in arrival order, over one Session
// whose cache doubles as the prefix cache. A full queue refuses new work (429) instead of growing.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/thread_pool.h"
#include "engine/session.h"
#include "serve/api_request.h"
#include "serve/metrics.h"

namespace kvtax::serve {

// One request's generation, shared by the HTTP thread (reads text as it comes) and the engine worker.
class Job {
 public:
  std::vector<int32_t> prompt;
  int max_tokens = 16;
  SamplerOptions sampler;
  std::vector<std::string> stop;
  double t_arrival = 0;
  bool reuse = true;                // may take cached prefix tokens (when the server's prefix cache is on)
  std::atomic<bool> cancel{false};  // set by the HTTP side when the client goes away

  // HTTP side: waits up to timeout_s for new text or the end; returns the text produced since the last call.
  std::string take(double timeout_s, bool& done);
  // After done: the engine's statistics, or the error that stopped the job.
  const GenerateStats& stats() const { return stats_; }
  const std::optional<ApiError>& error() const { return error_; }

  // Engine side.
  void push(const std::string& text);
  void finish(const GenerateStats& st, std::optional<ApiError> err);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::string pending_;
  bool done_ = false;
  GenerateStats stats_;
  std::optional<ApiError> error_;
};

struct SchedulerConfig {
  KvSpec kv;
  int max_context = 4096;   // tokens one sequence may hold (prompt + answer)
  int batch = 512;          // prefill chunk
  int threads = 0;
  size_t queue_limit = 16;  // waiting requests beyond the running one
  bool prefix_cache = true;
};

class Scheduler {
 public:
  Scheduler(const Model& m, const SchedulerConfig& c, Metrics& metrics);
  ~Scheduler();
  // Queues a job; throws ApiError 429 when the queue is full, 503 once draining started.
  void submit(const std::shared_ptr<Job>& job);
  // Stops taking jobs, lets queued and running ones finish for up to grace_s, cancels the rest, joins.
  void drain(double grace_s);
  KvGauges gauges() const;
  int max_context() const { return cfg_.max_context; }
  size_t bytes_reserved() const { return reserved_; }

 private:
  void worker();
  void run(Job& job);

  const Model& model_;
  SchedulerConfig cfg_;
  Metrics& metrics_;
  ThreadPool pool_;
  Session session_;
  size_t reserved_ = 0;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::shared_ptr<Job> running_;
  bool stopping_ = false;
  std::atomic<size_t> kv_used_{0}, kv_active_{0};
  std::thread thread_;
};

}  // namespace kvtax::serve
