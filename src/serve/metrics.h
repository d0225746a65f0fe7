#pragma once
// Server counters and latency histograms, rendered as Prometheus text (exposition format 0.0.4).
#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace kvtax::serve {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}
  void observe(double v);
  // Lines "name_bucket{le=...} n", "name_sum", "name_count" (cumulative buckets, +Inf last).
  std::string render(const std::string& name) const;
  uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  double sum_ = 0;
  uint64_t count_ = 0;
};

// Gauges the engine side reports when /metrics is read.
struct KvGauges {
  size_t bytes_used = 0, bytes_active = 0, bytes_admitted = 0, bytes_reserved = 0, capacity_tokens = 0;
  size_t queue_depth = 0, running = 0, queue_limit = 0, parallel = 0;
  bool batched_engine = true;  // a step is one forward pass over its sequences (false: one after another)
};

class Metrics {
 public:
  Metrics();
  void request(const std::string& endpoint, int status);
  void tokens(int prompt, int cached, int generated);
  void ttft(double s);
  void itl(double s);
  void cancelled();
  void step(int sequences, int rows);  // one engine step: sequences batched, token rows evaluated
  std::string render(const KvGauges& g) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  uint64_t prompt_ = 0, cached_ = 0, generated_ = 0, cancelled_ = 0;
  uint64_t steps_ = 0, step_seqs_ = 0, step_rows_ = 0, batched_steps_ = 0;
  Histogram ttft_, itl_;
};

}  // namespace kvtax::serve
