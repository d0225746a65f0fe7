#pragma once
// Results are plain data: one RunRecord per run, one JSON line each, appended and synced to disk as soon
// as the run ends, so a killed sweep loses at most the run in flight. Reports and aggregates are made
// from these files alone.
//
// raw.jsonl holds two kinds of lines: {"type":"meta",...} once per sweep session (model, machine, build,
// sweep settings) and {"type":"run",...} per run.
#include <cstdio>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvtax::harness {

// Run kinds. recall: the all-facts question; binding: one single-fact question (index = fact);
// kld: the arm teacher-forced on the reference arm's answer; prefix_cold / prefix_warm: the prefix-reuse leg.
inline constexpr const char* kKindRecall = "recall";
inline constexpr const char* kKindBinding = "binding";
inline constexpr const char* kKindKld = "kld";
inline constexpr const char* kKindPrefixCold = "prefix_cold";
inline constexpr const char* kKindPrefixWarm = "prefix_warm";

// Failure classes: "" (ok), "oom" (allocation failure, or killed by the OOM killer), "other".
struct RunRecord {
  // identity
  std::string arm, kind;
  int64_t target = 0;  // target context tokens (prefix leg: the shared-prefix target)
  int pass = 0;        // 1-based; warm-up passes count separately and set `warmup`
  bool warmup = false;
  int index = 0;       // binding: fact index
  int session = 0;
  std::string started_at;  // UTC, ISO 8601
  // outcome
  std::string failure, failure_message;
  int context_tokens = 0, generated_tokens = 0, reused_prefix_tokens = 0;
  double ttft_s = 0, total_s = 0, wall_s = 0;
  std::optional<double> prefill_tok_s, decode_tok_s, itl_mean_s;
  std::vector<double> itl_s;
  size_t peak_rss = 0, kv_bytes = 0, scratch_peak = 0, capacity_tokens = 0;
  double bytes_per_token = 0;
  int recall_found = 0, recall_total = 0;
  std::vector<bool> recall_which;
  std::optional<bool> binding_correct;
  std::optional<bool> cache_hit;                       // prefix_warm: reuse verified
  std::optional<double> kld_mean, kld_max;
  int kld_positions = 0;
  std::string text;
  std::vector<int32_t> tokens;
  nlohmann::json extra;

  bool ok() const { return failure.empty(); }
  // Identity used by --resume: finished runs with the same key are skipped.
  std::string key() const;
};

nlohmann::json to_json(const RunRecord& r);
RunRecord record_from_json(const nlohmann::json& j);  // throws kvtax::Error naming the bad field

struct ResultsFile {
  std::vector<nlohmann::json> metas;  // in file order; the last one describes the latest session
  std::vector<RunRecord> runs;
  bool truncated_tail = false;        // the last line was cut off (a killed writer) and was ignored
};
// Reads raw.jsonl. A malformed line is an error unless it is the last line (a run cut off mid-write).
ResultsFile read_results(const std::string& path);
// Keys of finished (non-warm-up) runs; failed runs count as finished, they are not retried.
std::set<std::string> finished_keys(const ResultsFile& f);

// Appends lines to raw.jsonl: each line is flushed and fsync'ed before append() returns. Opening cuts
// off a partial last line left by a killed writer so the next line starts clean.
class ResultsWriter {
 public:
  explicit ResultsWriter(const std::string& path);
  ~ResultsWriter();
  ResultsWriter(const ResultsWriter&) = delete;
  ResultsWriter& operator=(const ResultsWriter&) = delete;
  void append(const nlohmann::json& line);

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
};

// Description of this machine and build, for the meta line.
nlohmann::json machine_info();
nlohmann::json build_info();
std::string utc_now_iso();

}  // namespace kvtax::harness
