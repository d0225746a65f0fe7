#pragma once
// Aggregation of raw run records: per arm x target length, over recorded (non-warm-up) runs that did
// not fail: median/min/max of each metric, recall, binding recall, KLD, change vs the first arm; per arm
// a least-squares line of inter-token latency against context length; the prefix-reuse leg's pairs.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "harness/results.h"
#include "harness/stats.h"

namespace kvtax::harness {

// Capacity in tokens for tables; a runner reports SIZE_MAX when the policy's memory plateaus (window).
inline std::string capacity_str(const std::optional<double>& v) {
  if (!v) return "-";
  return *v >= 9.0e15 ? std::string("unbounded") : fmt::format("{:.0f}", *v);
}

struct Summary {
  std::optional<double> median, min, max;
  int n = 0;
};
Summary summarize(const std::vector<double>& v);

// Metrics summarised per cell, in this order in the CSV.
const std::vector<std::string>& cell_metric_names();

struct Cell {
  std::string arm;
  int64_t target = 0;
  int expected = 0, ok = 0, oom = 0, other = 0;       // recall runs
  std::map<std::string, Summary> metrics;             // by cell_metric_names()
  Summary recall_found;                               // facts found per ok run
  int recall_total = 0;                               // facts planted
  std::vector<int> fact_found_runs;                   // per fact: ok runs that found it
  int binding_asked = 0, binding_correct = 0;         // over ok binding runs
  std::vector<int> binding_fact_correct, binding_fact_asked;  // per fact
  Summary kld_mean;                                   // nats/position, kld runs vs the first arm
  std::optional<double> decode_change_pct;            // median decode tok/s vs the first arm, in %
  std::optional<double> capacity_ratio;               // capacity_tokens vs the first arm
};

struct ArmFit {
  std::string arm;
  std::optional<LineFit> itl;  // seconds per token of context (slope) and at zero context (intercept)
};

struct PrefixCell {
  std::string arm;
  int64_t prefix_target = 0;
  int pairs = 0, verified = 0;        // passes with both runs ok; of those, with a verified cache hit
  int same_output = 0;                // pairs whose warm answer equals the cold one
  Summary cold_ttft, warm_ttft, saving_s;  // saving: paired cold - warm TTFT over verified pairs
  Summary reused_tokens;
};

struct Aggregates {
  std::vector<std::string> arms;      // first arm first (the reference)
  std::vector<std::string> fact_names;
  std::vector<Cell> cells;            // arm-major, targets ascending
  std::vector<ArmFit> fits;
  std::vector<PrefixCell> prefix;
  nlohmann::json meta;                // the latest meta line
  int truncated_lines = 0;
};

Aggregates aggregate(const ResultsFile& f);
const Cell* find_cell(const Aggregates& a, const std::string& arm, int64_t target);

nlohmann::json to_json(const Cell& c);
// Writes aggregate.jsonl (cells, then fits, then prefix rows) and aggregate.csv (cells) into dir.
void write_aggregates(const Aggregates& a, const std::string& dir);
// A plain-text table for the terminal.
std::string summary_table(const Aggregates& a);

}  // namespace kvtax::harness
