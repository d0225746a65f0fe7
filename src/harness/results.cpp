#include "harness/results.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>

#include "core/error.h"

namespace kvtax::harness {
namespace {

template <typename T>
nlohmann::json opt(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

template <typename T>
void get_opt(const nlohmann::json& j, const char* k, std::optional<T>& out) {
  if (j.contains(k) && !j.at(k).is_null()) out = j.at(k).get<T>();
}

template <typename T>
void get_if(const nlohmann::json& j, const char* k, T& out) {
  if (j.contains(k) && !j.at(k).is_null()) out = j.at(k).get<T>();
}

}  // namespace

std::string RunRecord::key() const { return fmt::format("{}|{}|{}|{}|{}", arm, kind, target, pass, index); }

nlohmann::json to_json(const RunRecord& r) {
  return {{"type", "run"},
          {"arm", r.arm},
          {"kind", r.kind},
          {"target", r.target},
          {"pass", r.pass},
          {"warmup", r.warmup},
          {"index", r.index},
          {"session", r.session},
          {"started_at", r.started_at},
          {"failure", r.failure},
          {"failure_message", r.failure_message},
          {"context_tokens", r.context_tokens},
          {"generated_tokens", r.generated_tokens},
          {"reused_prefix_tokens", r.reused_prefix_tokens},
          {"ttft_s", r.ttft_s},
          {"total_s", r.total_s},
          {"wall_s", r.wall_s},
          {"prefill_tok_s", opt(r.prefill_tok_s)},
          {"decode_tok_s", opt(r.decode_tok_s)},
          {"itl_mean_s", opt(r.itl_mean_s)},
          {"itl_s", r.itl_s},
          {"peak_rss", r.peak_rss},
          {"kv_bytes", r.kv_bytes},
          {"scratch_peak", r.scratch_peak},
          {"capacity_tokens", r.capacity_tokens},
          {"bytes_per_token", r.bytes_per_token},
          {"recall_found", r.recall_found},
          {"recall_total", r.recall_total},
          {"recall_which", r.recall_which},
          {"binding_correct", opt(r.binding_correct)},
          {"cache_hit", opt(r.cache_hit)},
          {"kld_mean", opt(r.kld_mean)},
          {"kld_max", opt(r.kld_max)},
          {"kld_positions", r.kld_positions},
          {"text", r.text},
          {"tokens", r.tokens},
          {"extra", r.extra}};
}

RunRecord record_from_json(const nlohmann::json& j) {
  try {
    RunRecord r;
    r.arm = j.at("arm").get<std::string>();
    r.kind = j.at("kind").get<std::string>();
    r.target = j.at("target").get<int64_t>();
    r.pass = j.at("pass").get<int>();
    get_if(j, "warmup", r.warmup);
    get_if(j, "index", r.index);
    get_if(j, "session", r.session);
    get_if(j, "started_at", r.started_at);
    get_if(j, "failure", r.failure);
    get_if(j, "failure_message", r.failure_message);
    get_if(j, "context_tokens", r.context_tokens);
    get_if(j, "generated_tokens", r.generated_tokens);
    get_if(j, "reused_prefix_tokens", r.reused_prefix_tokens);
    get_if(j, "ttft_s", r.ttft_s);
    get_if(j, "total_s", r.total_s);
    get_if(j, "wall_s", r.wall_s);
    get_opt(j, "prefill_tok_s", r.prefill_tok_s);
    get_opt(j, "decode_tok_s", r.decode_tok_s);
    get_opt(j, "itl_mean_s", r.itl_mean_s);
    get_if(j, "itl_s", r.itl_s);
    get_if(j, "peak_rss", r.peak_rss);
    get_if(j, "kv_bytes", r.kv_bytes);
    get_if(j, "scratch_peak", r.scratch_peak);
    get_if(j, "capacity_tokens", r.capacity_tokens);
    get_if(j, "bytes_per_token", r.bytes_per_token);
    get_if(j, "recall_found", r.recall_found);
    get_if(j, "recall_total", r.recall_total);
    get_if(j, "recall_which", r.recall_which);
    get_opt(j, "binding_correct", r.binding_correct);
    get_opt(j, "cache_hit", r.cache_hit);
    get_opt(j, "kld_mean", r.kld_mean);
    get_opt(j, "kld_max", r.kld_max);
    get_if(j, "kld_positions", r.kld_positions);
    get_if(j, "text", r.text);
    get_if(j, "tokens", r.tokens);
    if (j.contains("extra")) r.extra = j.at("extra");
    return r;
  } catch (const nlohmann::json::exception& e) {
    fail("run record: {}", e.what());
  }
}

ResultsFile read_results(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open results file {}: {}", path, std::strerror(errno));
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ResultsFile out;
  size_t pos = 0, line_no = 0;
  while (pos < content.size()) {
    size_t nl = content.find('\n', pos);
    const bool last = nl == std::string::npos || nl + 1 >= content.size();
    const bool unterminated = nl == std::string::npos;
    if (unterminated) nl = content.size();
    const std::string line = content.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
      const std::string type = j.at("type").get<std::string>();
      if (type == "meta") out.metas.push_back(std::move(j));
      else if (type == "run") out.runs.push_back(record_from_json(j));
      else fail("unknown line type '{}'", type);
    } catch (const std::exception& e) {
      // A writer killed mid-line leaves a partial last line: that run never finished, so drop it.
      if (last && unterminated) {
        out.truncated_tail = true;
        break;
      }
      fail("{} line {}: {}", path, line_no, e.what());
    }
  }
  return out;
}

std::set<std::string> finished_keys(const ResultsFile& f) {
  std::set<std::string> keys;
  for (const auto& r : f.runs)
    if (!r.warmup) keys.insert(r.key());
  return keys;
}

ResultsWriter::ResultsWriter(const std::string& path) : path_(path) {
  // Cut a partial last line (no trailing newline) so appended lines stay parseable.
  {
    std::ifstream in(path, std::ios::binary);
    if (in) {
      std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (!content.empty() && content.back() != '\n') {
        const size_t keep = content.rfind('\n') == std::string::npos ? 0 : content.rfind('\n') + 1;
        if (::truncate(path.c_str(), off_t(keep)) != 0)
          fail("cannot cut the partial last line of {}: {}", path, std::strerror(errno));
      }
    }
  }
  f_ = std::fopen(path.c_str(), "ab");
  if (!f_) fail("cannot open {} for appending: {}", path, std::strerror(errno));
}

ResultsWriter::~ResultsWriter() {
  if (f_) std::fclose(f_);
}

void ResultsWriter::append(const nlohmann::json& line) {
  const std::string s = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  if (std::fwrite(s.data(), 1, s.size(), f_) != s.size() || std::fflush(f_) != 0)
    fail("writing {}: {}", path_, std::strerror(errno));
  if (::fsync(::fileno(f_)) != 0 && errno != EINVAL) fail("syncing {}: {}", path_, std::strerror(errno));
}

std::string utc_now_iso() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace kvtax::harness
