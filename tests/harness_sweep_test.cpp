#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "core/error.h"
#include "harness/results.h"
#include "harness/sweep.h"
#include "harness_fake_runner.h"

using namespace kvtax::harness;
using kvtax::harness::fake::FakeRunner;
namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("kvtax_harness_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  return d;
}

SweepOptions small_options(const fs::path& out) {
  SweepOptions o;
  o.arms = parse_arms({"f16", "fp8"});
  o.lengths = {2000, 6000};
  o.passes = 2;
  o.warmup = 1;
  o.seed = 3;
  o.out_dir = out.string();
  o.progress = false;
  return o;
}

std::vector<std::string> lines_of(const fs::path& p) {
  std::ifstream in(p);
  std::vector<std::string> v;
  for (std::string l; std::getline(in, l);) v.push_back(l);
  return v;
}

}  // namespace

TEST(HarnessSweep, RecordsEveryRunAndAggregates) {
  const fs::path dir = fresh_dir("full");
  FakeRunner runner;
  const SweepOptions o = small_options(dir);
  const SweepReport rep = run_sweep(runner, o, nullptr, nullptr);
  // warm-up: 2 lengths x 2 arms recall; recorded: 2 passes x 2 lengths x (2 arms x (1 recall + 5 binding) + 1 kld)
  EXPECT_EQ(rep.planned, 4 + 2 * 2 * (2 * 6 + 1));
  EXPECT_EQ(rep.executed, rep.planned);
  EXPECT_EQ(rep.failed, 0);
  const ResultsFile f = read_results((dir / "raw.jsonl").string());
  ASSERT_EQ(f.metas.size(), 1u);
  EXPECT_EQ(f.metas[0]["model"]["name"], "fake");
  EXPECT_TRUE(f.metas[0]["machine"].contains("cpu"));
  EXPECT_TRUE(f.metas[0]["build"].contains("git"));
  EXPECT_EQ(f.runs.size(), size_t(rep.planned));
  int warm = 0;
  for (const auto& r : f.runs) warm += r.warmup;
  EXPECT_EQ(warm, 4);
  // Within a length the reference arm runs first and the KLD run follows the other arm.
  for (size_t i = 0; i + 1 < f.runs.size(); ++i) {
    if (f.runs[i].kind == kKindKld) {
      EXPECT_EQ(f.runs[i].arm, "fp8");
    }
  }

  const Aggregates& a = rep.aggregates;
  ASSERT_EQ(a.arms, (std::vector<std::string>{"f16", "fp8"}));
  ASSERT_EQ(a.cells.size(), 4u);
  for (const auto& c : a.cells) {
    EXPECT_EQ(c.ok, 2);
    EXPECT_EQ(c.expected, 2);
    EXPECT_EQ(*c.recall_found.median, 5);
    EXPECT_EQ(c.binding_correct, 10);
    EXPECT_EQ(c.binding_asked, 10);
    EXPECT_GE(*c.metrics.at("context_tokens").median, double(c.target));
  }
  const Cell* f16 = find_cell(a, "f16", 6000);
  const Cell* fp8 = find_cell(a, "fp8", 6000);
  ASSERT_TRUE(f16 && fp8);
  // Synthetic timings: ITL = 1 ms + slope * context, so decode tok/s and the fitted slope are exact. The fake
  // charges for recorded distributions, so these also fail if the reference's timed run records them.
  const double ctx = *f16->metrics.at("context_tokens").median;
  EXPECT_NEAR(*f16->metrics.at("decode_tok_s").median, 1.0 / (1e-3 + 1e-8 * ctx), 1e-6);
  const double expect_change = ((1e-3 + 1e-8 * ctx) / (1e-3 + 0.5e-8 * ctx) - 1) * 100;
  EXPECT_NEAR(*fp8->decode_change_pct, expect_change, 1e-6);
  EXPECT_NEAR(*fp8->capacity_ratio, 2.0, 1e-9);
  EXPECT_FALSE(f16->kld_mean.median);
  ASSERT_TRUE(fp8->kld_mean.median);
  EXPECT_GT(*fp8->kld_mean.median, 1e-4);
  ASSERT_EQ(a.fits.size(), 2u);
  EXPECT_NEAR(a.fits[0].itl->slope, 1e-8, 1e-14);
  EXPECT_NEAR(a.fits[1].itl->slope, 0.5e-8, 1e-14);
  EXPECT_TRUE(fs::exists(dir / "aggregate.jsonl"));
  EXPECT_EQ(lines_of(dir / "aggregate.csv").size(), 5u);
  fs::remove_all(dir);
}

TEST(HarnessSweep, LengthOrderIsShuffledPerPassAndSeeded) {
  const fs::path dir = fresh_dir("order");
  FakeRunner runner;
  SweepOptions o = small_options(dir);
  o.arms = parse_arms({"f16"});
  o.lengths = {1000, 2000, 3000, 4000, 5000, 6000};
  o.passes = 4;
  o.warmup = 0;
  o.binding = false;
  run_sweep(runner, o, nullptr, nullptr);
  const ResultsFile f = read_results((dir / "raw.jsonl").string());
  std::map<int, std::vector<int64_t>> order;
  for (const auto& r : f.runs) order[r.pass].push_back(r.target);
  ASSERT_EQ(order.size(), 4u);
  bool some_differ = false;
  for (int p = 2; p <= 4; ++p) some_differ |= order[p] != order[1];
  EXPECT_TRUE(some_differ);
  for (auto& [p, v] : order) {
    std::sort(v.begin(), v.end());
    EXPECT_EQ(v, o.lengths);
  }
  fs::remove_all(dir);
}

TEST(HarnessSweep, ResumeAfterKillSkipsFinishedRuns) {
  const fs::path full = fresh_dir("resume_full"), cut = fresh_dir("resume_cut");
  FakeRunner r1;
  run_sweep(r1, small_options(full), nullptr, nullptr);
  const auto all = lines_of(full / "raw.jsonl");
  // Simulated kill: the meta, the warm-up, 12 recorded runs, and half of the next line.
  fs::create_directories(cut);
  {
    std::ofstream out(cut / "raw.jsonl", std::ios::binary);
    for (size_t i = 0; i < 1 + 4 + 12; ++i) out << all[i] << "\n";
    out << all[17].substr(0, all[17].size() / 2);
  }
  EXPECT_TRUE(read_results((cut / "raw.jsonl").string()).truncated_tail);
  FakeRunner r2;
  SweepOptions o = small_options(cut);
  EXPECT_THROW(run_sweep(r2, o, nullptr, nullptr), kvtax::Error);  // exists, no --resume
  o.resume = true;
  const SweepReport rep = run_sweep(r2, o, nullptr, nullptr);
  const int recorded_total = 2 * 2 * (2 * 6 + 1);
  EXPECT_EQ(rep.skipped, 12);
  EXPECT_EQ(rep.executed, recorded_total - 12 + 4);  // the rest, plus a fresh warm-up pass
  const ResultsFile f = read_results((cut / "raw.jsonl").string());
  EXPECT_FALSE(f.truncated_tail);
  EXPECT_EQ(f.metas.size(), 2u);
  std::set<std::string> keys;
  int recorded = 0;
  for (const auto& r : f.runs)
    if (!r.warmup) keys.insert(r.key()), ++recorded;
  EXPECT_EQ(recorded, recorded_total);
  EXPECT_EQ(int(keys.size()), recorded_total);
  // Same aggregates as the uninterrupted sweep (KLD included: the reference was rebuilt from raw.jsonl).
  const Aggregates a = aggregate(f), b = aggregate(read_results((full / "raw.jsonl").string()));
  ASSERT_EQ(a.cells.size(), b.cells.size());
  for (size_t i = 0; i < a.cells.size(); ++i) {
    EXPECT_EQ(to_json(a.cells[i]).dump(), to_json(b.cells[i]).dump());
  }
  // Resuming a finished sweep runs nothing, not even a warm-up.
  FakeRunner r3;
  const SweepReport again = run_sweep(r3, o, nullptr, nullptr);
  EXPECT_EQ(again.executed, 0);
  EXPECT_EQ(r3.generate_calls, 0);
  // Resuming with different facts is refused.
  o.transcript.facts = random_facts(3, 1);
  EXPECT_THROW(run_sweep(r3, o, nullptr, nullptr), kvtax::Error);
  fs::remove_all(full);
  fs::remove_all(cut);
}

TEST(HarnessSweep, ProcessIsolationTurnsCrashesIntoFailureRows) {
  const fs::path dir = fresh_dir("isolate");
  FakeRunner runner;
  SweepOptions o = small_options(dir);
  o.arms = parse_arms({"f16", "crash", "oom", "sigkill"});
  o.lengths = {1500};
  o.passes = 1;
  o.warmup = 0;
  o.binding_limit = 1;
  o.isolate = Isolation::process;
  const SweepReport rep = run_sweep(runner, o, nullptr, nullptr);
  EXPECT_EQ(runner.generate_calls, 0);  // every run happened in a child
  const ResultsFile f = read_results((dir / "raw.jsonl").string());
  std::map<std::string, const RunRecord*> recall;
  for (const auto& r : f.runs)
    if (r.kind == kKindRecall) recall[r.arm] = &r;
  ASSERT_EQ(recall.size(), 4u);
  EXPECT_TRUE(recall["f16"]->ok());
  EXPECT_EQ(recall["f16"]->recall_found, 5);
  EXPECT_EQ(recall["crash"]->failure, "other");
  EXPECT_NE(recall["crash"]->failure_message.find("signal 6"), std::string::npos) << recall["crash"]->failure_message;
  EXPECT_EQ(recall["oom"]->failure, "oom");
  EXPECT_NE(recall["oom"]->failure_message.find("bad_alloc"), std::string::npos);
  EXPECT_EQ(recall["sigkill"]->failure, "oom");
  const Cell* c = find_cell(rep.aggregates, "crash", 1500);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->ok, 0);
  EXPECT_EQ(c->other, 1);
  EXPECT_EQ(find_cell(rep.aggregates, "oom", 1500)->oom, 1);
  EXPECT_EQ(find_cell(rep.aggregates, "f16", 1500)->ok, 1);
  fs::remove_all(dir);
}

TEST(HarnessSweep, InProcessBadAllocIsAnOomRow) {
  const fs::path dir = fresh_dir("inproc");
  FakeRunner runner;
  SweepOptions o = small_options(dir);
  o.arms = parse_arms({"f16", "oom"});
  o.lengths = {1500};
  o.passes = 1;
  o.warmup = 0;
  o.binding = false;
  const SweepReport rep = run_sweep(runner, o, nullptr, nullptr);
  EXPECT_EQ(find_cell(rep.aggregates, "oom", 1500)->oom, 1);
  // The KLD run of the failed arm is itself a failed run, not a crash of the sweep.
  EXPECT_EQ(rep.failed, 2);
  fs::remove_all(dir);
}

TEST(HarnessSweep, RotatingWindowLosesEarlyFacts) {
  const fs::path dir = fresh_dir("window");
  FakeRunner runner;
  SweepOptions o = small_options(dir);
  o.arms = parse_arms({"f16", "f16,window=1500,sinks=4"});
  o.lengths = {1000, 4000};
  o.passes = 1;
  o.warmup = 0;
  o.kld = false;
  const SweepReport rep = run_sweep(runner, o, nullptr, nullptr);
  EXPECT_EQ(*find_cell(rep.aggregates, "f16,window=1500,sinks=4", 1000)->recall_found.median, 5);
  EXPECT_EQ(*find_cell(rep.aggregates, "f16,window=1500,sinks=4", 4000)->recall_found.median, 0);
  EXPECT_EQ(find_cell(rep.aggregates, "f16,window=1500,sinks=4", 4000)->binding_correct, 0);
  EXPECT_EQ(*find_cell(rep.aggregates, "f16", 4000)->recall_found.median, 5);
  fs::remove_all(dir);
}

TEST(HarnessSweep, RefusedArmFailsBeforeAnyRun) {
  const fs::path dir = fresh_dir("refuse");
  FakeRunner runner;
  SweepOptions o = small_options(dir);
  o.arms = parse_arms({"f16", "tq9"});
  try {
    run_sweep(runner, o, nullptr, nullptr);
    FAIL() << "expected an error";
  } catch (const kvtax::Error& e) {
    EXPECT_NE(std::string(e.what()).find("tq9"), std::string::npos);
  }
  EXPECT_EQ(runner.generate_calls, 0);
  EXPECT_FALSE(fs::exists(dir / "raw.jsonl"));
  fs::remove_all(dir);
}

TEST(HarnessSweep, PrefixReuseLegVerifiesHits) {
  const fs::path dir = fresh_dir("prefix");
  FakeRunner runner;
  SweepOptions o = small_options(dir);
  o.arms = parse_arms({"f16"});
  o.lengths = {1000};
  o.passes = 1;
  o.warmup = 0;
  o.binding = false;
  o.prefix_reuse = true;
  const SweepReport rep = run_sweep(runner, o, nullptr, nullptr);
  ASSERT_EQ(rep.aggregates.prefix.size(), 1u);
  const PrefixCell& p = rep.aggregates.prefix[0];
  EXPECT_EQ(p.pairs, 4);
  EXPECT_EQ(p.verified, 4);
  EXPECT_GE(*p.reused_tokens.median, 450);
  // The fake's prefill costs 20 us per token not served from the cache.
  EXPECT_NEAR(*p.saving_s.median, 2e-5 * *p.reused_tokens.median, 1e-9);
  // Order alternates: pass 1 cold first, pass 2 warm first.
  const ResultsFile f = read_results((dir / "raw.jsonl").string());
  std::vector<std::string> kinds;
  for (const auto& r : f.runs)
    if (r.kind.rfind("prefix", 0) == 0 && r.pass <= 2) kinds.push_back(r.kind);
  EXPECT_EQ(kinds, (std::vector<std::string>{kKindPrefixCold, kKindPrefixWarm, kKindPrefixWarm, kKindPrefixCold}));
  fs::remove_all(dir);
}

TEST(HarnessSweep, ProgressLinesAndSummaryTable) {
  const fs::path dir = fresh_dir("progress");
  FakeRunner runner;
  SweepOptions o = small_options(dir);
  o.lengths = {1000, 3000};
  o.passes = 1;
  o.warmup = 0;
  o.binding = false;
  o.progress = true;
  std::FILE* log = std::tmpfile();
  std::FILE* sum = std::tmpfile();
  ASSERT_TRUE(log && sum);
  run_sweep(runner, o, log, sum);
  auto read_all = [](std::FILE* f) {
    std::rewind(f);
    std::string s;
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) s.append(buf, n);
    std::fclose(f);
    return s;
  };
  const std::string l = read_all(log), s = read_all(sum);
  // Not a terminal: one line per run with a count and an ETA, no carriage returns.
  EXPECT_NE(l.find("transcript for 1000 tokens"), std::string::npos) << l;
  EXPECT_NE(l.find("[1/6] f16 "), std::string::npos) << l;
  EXPECT_NE(l.find("/6] fp8 1000 pass 1 kld: ok"), std::string::npos) << l;
  EXPECT_NE(l.find("[6/6]"), std::string::npos) << l;
  EXPECT_NE(l.find("ETA"), std::string::npos);
  EXPECT_EQ(l.find('\r'), std::string::npos);
  EXPECT_NE(s.find("decode t/s"), std::string::npos) << s;
  EXPECT_NE(s.find("fp8"), std::string::npos);
  EXPECT_NE(s.find("ITL slope f16"), std::string::npos);
  fs::remove_all(dir);
}

TEST(HarnessSweep, RunTimeoutKillsAStuckChild) {
  const fs::path dir = fresh_dir("timeout");
  FakeRunner runner;
  SweepOptions o = small_options(dir);
  o.arms = parse_arms({"f16", "hang"});
  o.lengths = {1000};
  o.passes = 1;
  o.warmup = 0;
  o.binding = false;
  o.kld = false;
  o.isolate = Isolation::process;
  o.run_timeout_s = 0.3;
  const SweepReport rep = run_sweep(runner, o, nullptr, nullptr);
  const Cell* c = find_cell(rep.aggregates, "hang", 1000);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->other, 1);
  const ResultsFile f = read_results((dir / "raw.jsonl").string());
  bool found = false;
  for (const auto& r : f.runs)
    if (r.arm == "hang") {
      found = true;
      EXPECT_NE(r.failure_message.find("timed out"), std::string::npos) << r.failure_message;
      EXPECT_LT(r.wall_s, 5.0);
    }
  EXPECT_TRUE(found);
  EXPECT_EQ(find_cell(rep.aggregates, "f16", 1000)->ok, 1);
  fs::remove_all(dir);
}

TEST(HarnessSweep, BindingLimitAndTopKKld) {
  const fs::path dir = fresh_dir("topk");
  FakeRunner runner;
  SweepOptions o = small_options(dir);
  o.lengths = {1000};
  o.passes = 1;
  o.warmup = 0;
  o.binding_limit = 2;
  o.kld_top_k = 4;  // the fake returns full distributions; the harness handles either
  const SweepReport rep = run_sweep(runner, o, nullptr, nullptr);
  EXPECT_EQ(find_cell(rep.aggregates, "f16", 1000)->binding_asked, 2);
  ASSERT_TRUE(find_cell(rep.aggregates, "fp8", 1000)->kld_mean.median);
  EXPECT_GT(*find_cell(rep.aggregates, "fp8", 1000)->kld_mean.median, 0);
  fs::remove_all(dir);
}

TEST(HarnessSweep, OomAtLengthIsRecordedApart) {
  const fs::path dir = fresh_dir("oomlen");
  FakeRunner runner;
  SweepOptions o = small_options(dir);
  o.arms = parse_arms({"f16", "q8,oom_above=3000"});
  o.lengths = {1000, 4000};
  o.passes = 2;
  o.warmup = 0;
  o.binding = false;
  const SweepReport rep = run_sweep(runner, o, nullptr, nullptr);
  const Cell* lo = find_cell(rep.aggregates, "q8,oom_above=3000", 1000);
  const Cell* hi = find_cell(rep.aggregates, "q8,oom_above=3000", 4000);
  EXPECT_EQ(lo->ok, 2);
  EXPECT_EQ(hi->ok, 0);
  EXPECT_EQ(hi->oom, 2);
  EXPECT_EQ(hi->expected, 2);
  EXPECT_FALSE(hi->metrics.at("decode_tok_s").median);
  EXPECT_FALSE(hi->decode_change_pct);
  fs::remove_all(dir);
}
