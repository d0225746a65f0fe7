#pragma once
// The engine side of `kvtax serve`: a bounded FIFO in front of continuous batching over several sequences.
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

#include "engine/generate.h"
#include "engine/session.h"
#include "serve/api_request.h"
#include "serve/metrics.h"
#include "serve/step_engine.h"

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
  int batch = 512;          // tokens per engine step: one per decoding sequence, the rest for prefill chunks
  int threads = 0;
  int parallel = 4;         // sequences decoded together (each step reads the weights once for all of them)
  // KV bytes all sequences together may hold (running ones and the prefix cache). 0: parallel times one
  // full context, so a request never waits for KV, only for a free sequence.
  size_t kv_budget = 0;
  size_t queue_limit = 16;  // waiting requests beyond the running ones
  bool prefix_cache = true;
};

// Continuous batching over one engine worker (a StepEngine: the CPU ForwardPass, or a device). Up to `parallel` sequences run at once; every step decodes
// one token for each of them in one engine step (on the CPU ONE ForwardPass call; a device steps them one
// after another), together with a prefill chunk of a newly admitted one, so running streams keep flowing
// while a long prompt is read. Requests wait in a bounded FIFO (429 when
// full) for a free sequence and for KV: a request is admitted with the KV bytes its prompt + max_tokens can
// need at most, when the budget minus what running sequences were admitted with (and, after evicting idle
// prefix caches, nothing else) has room; the queue head waits otherwise, and later requests wait behind it.
// Finished sequences keep their KV as a prefix cache until the budget or a new request needs the room;
// cancelled, failed or (without the prefix cache) finished ones free it at once.
class Scheduler {
 public:
  // device null: the CPU engine; otherwise that backend (it must outlive the scheduler).
  Scheduler(const Model& m, const SchedulerConfig& c, Metrics& metrics, DeviceBackend* device = nullptr);
  ~Scheduler();
  // Queues a job; throws ApiError 429 when the queue is full, 503 once draining started.
  void submit(const std::shared_ptr<Job>& job);
  // Stops taking jobs, lets queued and running ones finish for up to grace_s, cancels the rest, joins.
  void drain(double grace_s);
  KvGauges gauges() const;
  int max_context() const { return cfg_.max_context; }
  size_t bytes_reserved() const { return budget_; }
  const StepEngine& engine() const { return *engine_; }

 private:
  struct Slot;
  void worker();
  void admit();                      // worker, under mu_: queue head(s) into free slots while KV allows
  bool start(Slot& slot, const std::shared_ptr<Job>& job);
  void step();                       // worker: one ForwardPass over every running sequence
  void complete(Slot& slot, std::optional<ApiError> err);
  size_t need_bytes(const Job& job) const;
  void update_gauges();

  const Model& model_;
  SchedulerConfig cfg_;
  Metrics& metrics_;
  std::unique_ptr<StepEngine> engine_;
  size_t budget_ = 0;
  std::vector<std::unique_ptr<Slot>> slots_;  // worker thread only
  uint64_t clock_ = 0;                        // admission order / LRU stamp

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::vector<std::shared_ptr<Job>> running_;
  bool stopping_ = false;
  std::atomic<size_t> kv_used_{0}, kv_active_{0}, kv_admitted_{0};
  std::thread thread_;
};

}  // namespace kvtax::serve
