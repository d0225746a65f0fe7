#pragma once
// The sweep: arms x target lengths x passes, against one Runner.
//
// Protocol (as the original measurement): warm-up pass(es) recorded but never aggregated, then `passes`
// recorded passes; each pass visits the lengths in a seeded-shuffled order; within a length every arm
// runs back to back, the first (reference) arm first. Each (arm, length) does the recall question, then
// the binding questions, then (non-reference arms) a teacher-forced run on the reference answer for KLD.
// Every run is isolated: the runner is asked not to reuse state, and with Isolation::process it runs in
// its own child process. The optional prefix-reuse leg follows the passes.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "harness/aggregate.h"
#include "harness/arm.h"
#include "harness/isolate.h"
#include "harness/runner.h"
#include "harness/transcript.h"

namespace kvtax::harness {

struct SweepOptions {
  std::vector<Arm> arms;                 // the first is the reference for KLD and % change
  std::vector<int64_t> lengths;          // target tokens of the templated recall prompt
  int passes = 3;
  int warmup = 1;                        // discarded warm-up passes
  uint64_t seed = 0;                     // length order per pass (and facts / varied filler)
  TranscriptSpec transcript;             // facts, placement, filler
  int max_tokens = 64;
  bool binding = true;
  int binding_limit = 0;                 // 0: one binding question per fact; n: the first n facts
  int binding_max_tokens = 16;
  bool kld = true;                       // teacher-forced KLD of each arm against the first
  int kld_top_k = 0;                     // 0: full distributions
  Isolation isolate = Isolation::none;
  double run_timeout_s = 0;              // process isolation only; 0: none
  size_t reserve_bytes = 0;              // capacity is reported for this KV reservation
  bool prefix_reuse = false;             // the cold vs warm prefix-cache leg
  int prefix_tokens = 500;
  int prefix_passes = 4;
  std::string out_dir;
  bool resume = false;
  bool progress = true;                  // progress on stderr

  // Throws kvtax::Error on an invalid combination (no arms, bad counts...).
  void validate() const;
  nlohmann::json to_json() const;        // recorded in the meta line
};

struct SweepReport {
  int planned = 0, executed = 0, skipped = 0, failed = 0;
  Aggregates aggregates;
};

// Runs the sweep, appending to out_dir/raw.jsonl and writing aggregate.{jsonl,csv} and the summary table
// (to `summary`, if not null) at the end. `log` receives progress (a bar on a TTY, else a line per run).
SweepReport run_sweep(Runner& runner, const SweepOptions& opt, std::FILE* log = stderr, std::FILE* summary = stdout);

// The recorded metrics of one run, from the request's outcome (exposed for tests).
RunRecord make_record(const Outcome& o, const std::vector<Fact>& facts);

}  // namespace kvtax::harness
