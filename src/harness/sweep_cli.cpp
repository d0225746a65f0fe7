#include "harness/sweep_cli.h"

#include <cmath>
#include <cstdlib>

#include "core/error.h"

namespace kvtax::harness {
namespace {

std::string trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return std::string(s);
}

}  // namespace

std::vector<int64_t> parse_lengths(std::string_view s) {
  std::vector<int64_t> out;
  size_t pos = 0;
  if (trim(s).empty()) fail("--lengths: empty (expected e.g. 2k,8k,16k,32k)");
  while (pos <= s.size()) {
    const size_t comma = s.find(',', pos);
    std::string item = trim(s.substr(pos, comma == std::string_view::npos ? s.npos : comma - pos));
    pos = comma == std::string_view::npos ? s.size() + 1 : comma + 1;
    if (item.empty()) fail("--lengths '{}': empty item", s);
    double mult = 1;
    const char last = item.back();
    if (last == 'k' || last == 'K') mult = 1e3, item.pop_back();
    else if (last == 'm' || last == 'M') mult = 1e6, item.pop_back();
    char* end = nullptr;
    const double v = item.empty() ? NAN : std::strtod(item.c_str(), &end);
    if (item.empty() || end != item.c_str() + item.size() || !std::isfinite(v) || v <= 0)
      fail("--lengths '{}': '{}' is not a positive token count (e.g. 8k or 8000)", s, item);
    const double tokens = v * mult;
    if (tokens != std::floor(tokens) || tokens > double(int64_t(1) << 26))
      fail("--lengths '{}': {} is not a whole number of tokens up to 67108864", s, tokens);
    out.push_back(int64_t(tokens));
  }
  return out;
}

size_t parse_bytes(std::string_view s_in) {
  const std::string s = trim(s_in);
  char* end = nullptr;
  const double v = s.empty() ? NAN : std::strtod(s.c_str(), &end);
  if (s.empty() || end == s.c_str() || !std::isfinite(v) || v < 0)
    fail("size '{}' is not a byte count (e.g. 13.37GiB, 512MiB, 1000000)", s_in);
  const std::string unit = trim(end);
  double mult;
  if (unit.empty() || unit == "B") mult = 1;
  else if (unit == "KiB") mult = 1024.0;
  else if (unit == "MiB") mult = 1024.0 * 1024;
  else if (unit == "GiB") mult = 1024.0 * 1024 * 1024;
  else if (unit == "TiB") mult = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "KB" || unit == "kB") mult = 1e3;
  else if (unit == "MB") mult = 1e6;
  else if (unit == "GB") mult = 1e9;
  else if (unit == "TB") mult = 1e12;
  else fail("size '{}': unknown unit '{}' (B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)", s_in, unit);
  const double bytes = v * mult;
  if (bytes > 1.0e18) fail("size '{}' is too large", s_in);
  return size_t(std::llround(bytes));
}

void add_sweep_options(CLI::App& app, SweepCliArgs& a) {
  app.add_option("--arm", a.arms, "KV arm: CODEC[,window=N,sinks=N|,recent=N] (repeat; the first is the reference)");
  app.add_option("--lengths", a.lengths, "Target prompt tokens, comma-separated; k = 1000 (default 2k,8k,16k,32k)");
  app.add_option("--passes", a.passes, "Recorded passes (default 3)");
  app.add_option("--warmup", a.warmup, "Discarded warm-up passes (default 1)");
  app.add_option("--seed", a.seed, "Seed for the length order per pass, random facts and varied filler");
  app.add_option("--facts", a.facts, "Plant N random facts instead of the five vault codes");
  app.add_option("--placement", a.placement, "Fact placement: early | spread | late | depth=P (percent)");
  app.add_option("--filler", a.filler, "Filler: repeat (one paragraph verbatim) | varied");
  app.add_flag("--binding,!--no-binding", a.binding, "Ask one single-fact question per fact (default on)");
  app.add_option("--binding-limit", a.binding_limit, "Ask binding questions for the first N facts only (0: all)");
  app.add_option("--max-tokens", a.max_tokens, "New tokens for the recall question (default 64)");
  app.add_option("--binding-max-tokens", a.binding_max_tokens, "New tokens for a binding question (default 16)");
  app.add_flag("--kld,!--no-kld", a.kld, "KL divergence of each arm vs the first, teacher-forced (default on)");
  app.add_option("--kld-top-k", a.kld_top_k, "Compare the top K log-probs only (0: full distributions)");
  app.add_option("--isolate", a.isolate, "none | process (each run in a child: crashes become failure rows)");
  app.add_option("--run-timeout", a.run_timeout_s, "With --isolate process: kill a run after this many seconds");
  app.add_option("--reserve", a.reserve, "KV reservation to report capacity for (e.g. 13.37GiB)");
  app.add_option("--out", a.out, "Results directory (raw.jsonl, aggregate.jsonl, aggregate.csv)");
  app.add_flag("--resume", a.resume, "Continue the sweep in --out, skipping finished runs");
  app.add_option("--preset", a.preset, "seed: 2k/8k/16k/32k, 3 passes, arms f16 vs fp8 (explicit options win)");
  app.add_flag("--prefix-reuse", a.prefix_reuse, "Add the cold vs warm prefix-cache leg");
  app.add_option("--prefix-tokens", a.prefix_tokens, "Shared prefix size for --prefix-reuse (default 500)");
  app.add_option("--prefix-passes", a.prefix_passes, "Passes of the prefix-reuse leg (default 4)");
  app.add_flag("--quiet", a.quiet, "No progress output");
}

SweepOptions resolve_sweep_options(const SweepCliArgs& a) {
  SweepOptions o;
  std::vector<std::string> arms = a.arms;
  std::string lengths = a.lengths;
  int passes = a.passes, warmup = a.warmup;
  if (!a.preset.empty()) {
    if (a.preset != "seed") fail("--preset '{}' is unknown (known: seed)", a.preset);
    if (arms.empty()) arms = {"f16", "fp8"};
    if (lengths.empty()) lengths = "2k,8k,16k,32k";
    if (passes < 0) passes = 3;
    if (warmup < 0) warmup = 1;
  }
  if (arms.empty()) fail("no arms: give --arm (e.g. --arm f16 --arm q8) or --preset seed");
  o.arms = parse_arms(arms);
  o.lengths = parse_lengths(lengths.empty() ? "2k,8k,16k,32k" : lengths);
  o.passes = passes < 0 ? 3 : passes;
  o.warmup = warmup < 0 ? 1 : warmup;
  o.seed = a.seed;
  if (a.facts < 0) fail("--facts {} is negative", a.facts);
  o.transcript.facts = a.facts == 0 ? default_facts() : random_facts(a.facts, a.seed);
  o.transcript.placement = Placement::parse(a.placement);
  o.transcript.filler = parse_filler(a.filler);
  o.transcript.seed = a.seed;
  o.binding = a.binding;
  o.binding_limit = a.binding_limit;
  o.max_tokens = a.max_tokens;
  o.binding_max_tokens = a.binding_max_tokens;
  o.kld = a.kld;
  o.kld_top_k = a.kld_top_k;
  o.isolate = parse_isolation(a.isolate);
  o.run_timeout_s = a.run_timeout_s;
  if (o.run_timeout_s > 0 && o.isolate != Isolation::process)
    fail("--run-timeout needs --isolate process (a run in this process cannot be stopped safely)");
  o.reserve_bytes = a.reserve.empty() ? 0 : parse_bytes(a.reserve);
  o.out_dir = a.out;
  o.resume = a.resume;
  o.prefix_reuse = a.prefix_reuse;
  o.prefix_tokens = a.prefix_tokens;
  o.prefix_passes = a.prefix_passes;
  o.progress = !a.quiet;
  o.validate();
  return o;
}

}  // namespace kvtax::harness
