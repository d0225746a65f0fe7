#include "serve/metrics.h"

#include <fmt/format.h>

namespace kvtax::serve {

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  counts_[i]++;
  sum_ += v;
  count_++;
}

std::string Histogram::render(const std::string& name) const {
  std::string out;
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds_[i], cum);
  }
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, count_, name, sum_, name, count_);
  return out;
}

Metrics::Metrics()
    : ttft_({0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}),
      itl_({0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}) {}

void Metrics::request(const std::string& endpoint, int status) {
  std::lock_guard lk(mu_);
  requests_[{endpoint, status}]++;
}

void Metrics::tokens(int prompt, int cached, int generated) {
  std::lock_guard lk(mu_);
  prompt_ += uint64_t(prompt);
  cached_ += uint64_t(cached);
  generated_ += uint64_t(generated);
}

void Metrics::ttft(double s) {
  std::lock_guard lk(mu_);
  ttft_.observe(s);
}

void Metrics::itl(double s) {
  std::lock_guard lk(mu_);
  itl_.observe(s);
}

void Metrics::cancelled() {
  std::lock_guard lk(mu_);
  cancelled_++;
}

void Metrics::step(int sequences, int rows) {
  std::lock_guard lk(mu_);
  steps_++;
  step_seqs_ += uint64_t(sequences);
  step_rows_ += uint64_t(rows);
  batched_steps_ += sequences > 1;
}

std::string Metrics::render(const KvGauges& g) const {
  std::lock_guard lk(mu_);
  std::string o;
  o += "# HELP kvtax_requests_total HTTP requests by endpoint and status.\n# TYPE kvtax_requests_total counter\n";
  for (const auto& [k, n] : requests_)
    o += fmt::format("kvtax_requests_total{{endpoint=\"{}\",status=\"{}\"}} {}\n", k.first, k.second, n);
  o += fmt::format(
      "# HELP kvtax_prompt_tokens_total Prompt tokens of completed generations.\n# TYPE kvtax_prompt_tokens_total counter\n"
      "kvtax_prompt_tokens_total {}\n"
      "# HELP kvtax_prompt_tokens_cached_total Prompt tokens served from the prefix cache.\n"
      "# TYPE kvtax_prompt_tokens_cached_total counter\nkvtax_prompt_tokens_cached_total {}\n"
      "# HELP kvtax_generation_tokens_total Generated tokens.\n# TYPE kvtax_generation_tokens_total counter\n"
      "kvtax_generation_tokens_total {}\n"
      "# HELP kvtax_requests_cancelled_total Generations stopped because the client went away.\n"
      "# TYPE kvtax_requests_cancelled_total counter\nkvtax_requests_cancelled_total {}\n",
      prompt_, cached_, generated_, cancelled_);
  o += fmt::format(
      "# HELP kvtax_engine_steps_total Engine steps (one token for each decoding sequence, plus prefill chunks).\n"
      "# TYPE kvtax_engine_steps_total counter\nkvtax_engine_steps_total {}\n"
      "# HELP kvtax_engine_batched_steps_total Engine steps that ran more than one sequence.\n"
      "# TYPE kvtax_engine_batched_steps_total counter\nkvtax_engine_batched_steps_total {}\n"
      "# HELP kvtax_engine_step_sequences_total Sequences summed over engine steps.\n"
      "# TYPE kvtax_engine_step_sequences_total counter\nkvtax_engine_step_sequences_total {}\n"
      "# HELP kvtax_engine_step_tokens_total Tokens (decode and prefill) summed over engine steps.\n"
      "# TYPE kvtax_engine_step_tokens_total counter\nkvtax_engine_step_tokens_total {}\n",
      steps_, batched_steps_, step_seqs_, step_rows_);
  o += "# HELP kvtax_time_to_first_token_seconds Request arrival to first generated token (queue wait included).\n"
       "# TYPE kvtax_time_to_first_token_seconds histogram\n";
  o += ttft_.render("kvtax_time_to_first_token_seconds");
  o += "# HELP kvtax_inter_token_latency_seconds Gap between consecutive generated tokens.\n"
       "# TYPE kvtax_inter_token_latency_seconds histogram\n";
  o += itl_.render("kvtax_inter_token_latency_seconds");
  o += fmt::format(
      "# HELP kvtax_kv_bytes_used KV cache bytes held (running requests and the prefix cache).\n"
      "# TYPE kvtax_kv_bytes_used gauge\nkvtax_kv_bytes_used {}\n"
      "# HELP kvtax_kv_bytes_active KV cache bytes held by running requests.\n"
      "# TYPE kvtax_kv_bytes_active gauge\nkvtax_kv_bytes_active {}\n"
      "# HELP kvtax_kv_bytes_admitted KV bytes running requests were admitted with (their prompt + max_tokens).\n"
      "# TYPE kvtax_kv_bytes_admitted gauge\nkvtax_kv_bytes_admitted {}\n"
      "# HELP kvtax_kv_bytes_reserved KV budget shared by every sequence.\n# TYPE kvtax_kv_bytes_reserved gauge\n"
      "kvtax_kv_bytes_reserved {}\n"
      "# HELP kvtax_kv_capacity_tokens Tokens one sequence may hold within the reservation and context.\n"
      "# TYPE kvtax_kv_capacity_tokens gauge\nkvtax_kv_capacity_tokens {}\n"
      "# HELP kvtax_queue_depth Requests waiting for the engine.\n# TYPE kvtax_queue_depth gauge\n"
      "kvtax_queue_depth {}\n"
      "# HELP kvtax_queue_limit Requests that may wait before new ones get 429.\n# TYPE kvtax_queue_limit gauge\n"
      "kvtax_queue_limit {}\n"
      "# HELP kvtax_requests_running Requests the engine is generating for.\n# TYPE kvtax_requests_running gauge\n"
      "kvtax_requests_running {}\n"
      "# HELP kvtax_parallel_limit Sequences the engine decodes together.\n# TYPE kvtax_parallel_limit gauge\n"
      "kvtax_parallel_limit {}\n"
      "# HELP kvtax_engine_batched 1 when an engine step runs its sequences in one forward pass, 0 when one after "
      "another (the device).\n# TYPE kvtax_engine_batched gauge\nkvtax_engine_batched {}\n",
      g.bytes_used, g.bytes_active, g.bytes_admitted, g.bytes_reserved, g.capacity_tokens, g.queue_depth,
      g.queue_limit, g.running, g.parallel, g.batched_engine ? 1 : 0);
  return o;
}

}  // namespace kvtax::serve
