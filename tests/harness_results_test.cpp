#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "harness/aggregate.h"
#include "harness/results.h"

using namespace kvtax::harness;
namespace fs = std::filesystem;

namespace {

fs::path temp_file(const std::string& name) {
  return fs::temp_directory_path() / ("kvtax_results_" + name + "_" + std::to_string(::getpid()));
}

RunRecord rec(const std::string& arm, int64_t target, int pass, double decode, int ctx, double itl) {
  RunRecord r;
  r.arm = arm, r.kind = kKindRecall, r.target = target, r.pass = pass;
  r.decode_tok_s = decode;
  r.context_tokens = ctx;
  r.itl_mean_s = itl;
  r.capacity_tokens = arm == "f16" ? 1000 : 2000;
  r.recall_total = 2;
  r.recall_found = 2;
  r.recall_which = {true, true};
  return r;
}

}  // namespace

TEST(HarnessResults, RecordJsonRoundTrip) {
  RunRecord r = rec("q4r,recent=1024", 8000, 2, 41.5, 8025, 0.024);
  r.kind = kKindBinding;
  r.index = 3;
  r.binding_correct = true;
  r.kld_mean = 0.01;
  r.itl_s = {0.02, 0.03};
  r.tokens = {1, 2, 3};
  r.text = "QX-4471 \"quoted\"\n";
  r.failure = "oom";
  r.failure_message = "allocation failed";
  r.peak_rss = size_t(9) << 30;
  const RunRecord b = record_from_json(nlohmann::json::parse(to_json(r).dump()));
  EXPECT_EQ(to_json(b), to_json(r));
  EXPECT_EQ(b.key(), "q4r,recent=1024|binding|8000|2|3");
  EXPECT_FALSE(b.prefill_tok_s);
  EXPECT_THROW(record_from_json(nlohmann::json{{"type", "run"}, {"arm", "f16"}}), kvtax::Error);
  EXPECT_THROW(record_from_json(nlohmann::json{{"arm", 3}, {"kind", "recall"}, {"target", 1}, {"pass", 1}}), kvtax::Error);
}

TEST(HarnessResults, WriterSyncsLinesAndReaderToleratesOnlyATruncatedTail) {
  const fs::path p = temp_file("rw");
  fs::remove(p);
  {
    ResultsWriter w(p.string());
    w.append({{"type", "meta"}, {"session", 1}});
    w.append(to_json(rec("f16", 2000, 1, 40, 2073, 0.025)));
    w.append(to_json(rec("f16", 2000, 2, 42, 2073, 0.024)));
  }
  ResultsFile f = read_results(p.string());
  EXPECT_EQ(f.metas.size(), 1u);
  EXPECT_EQ(f.runs.size(), 2u);
  EXPECT_FALSE(f.truncated_tail);
  // Kill mid-line: the partial last line is ignored, then cut when a writer reopens the file.
  { std::ofstream(p, std::ios::app) << R"({"type":"run","arm":"f16","kind":"rec)"; }
  f = read_results(p.string());
  EXPECT_TRUE(f.truncated_tail);
  EXPECT_EQ(f.runs.size(), 2u);
  {
    ResultsWriter w(p.string());
    w.append(to_json(rec("f16", 2000, 3, 41, 2073, 0.024)));
  }
  f = read_results(p.string());
  EXPECT_FALSE(f.truncated_tail);
  EXPECT_EQ(f.runs.size(), 3u);
  EXPECT_EQ(finished_keys(f).size(), 3u);
  // A bad line in the middle is an error naming the line.
  const fs::path q = temp_file("bad");
  { std::ofstream(q) << "{\"type\":\"meta\"}\nnot json\n" << to_json(rec("f16", 1, 1, 1, 1, 1)).dump() << "\n"; }
  try {
    read_results(q.string());
    FAIL();
  } catch (const kvtax::Error& e) {
    EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos) << e.what();
  }
  { std::ofstream(q) << "{\"type\":\"other\"}\n{}\n"; }
  EXPECT_THROW(read_results(q.string()), kvtax::Error);
  EXPECT_THROW(read_results((temp_file("missing")).string()), kvtax::Error);
  fs::remove(p);
  fs::remove(q);
}

TEST(HarnessResults, AggregationMath) {
  ResultsFile f;
  f.metas.push_back({{"type", "meta"}, {"sweep", {{"arms", {"f16", "fp8"}}, {"passes", 3}}}});
  // f16 at two lengths, three passes; fp8 with one OOM and one other failure at 32000.
  for (int p = 1; p <= 3; ++p) {
    f.runs.push_back(rec("f16", 2000, p, 40 + p, 2073, 0.02 + 0.001 * p));
    f.runs.push_back(rec("f16", 32000, p, 28 + p, 32025, 0.03 + 0.001 * p));
    f.runs.push_back(rec("fp8", 2000, p, 44 + p, 2073, 0.02));
  }
  f.runs.push_back(rec("fp8", 32000, 1, 36, 32025, 0.028));
  RunRecord oom = rec("fp8", 32000, 2, 0, 0, 0);
  oom.failure = "oom";
  f.runs.push_back(oom);
  RunRecord other = rec("fp8", 32000, 3, 0, 0, 0);
  other.failure = "other";
  f.runs.push_back(other);
  RunRecord warm = rec("fp8", 32000, 1, 999, 32025, 9);
  warm.warmup = true;
  f.runs.push_back(warm);
  RunRecord kld = rec("fp8", 2000, 1, 0, 2073, 0);
  kld.kind = kKindKld;
  kld.kld_mean = 0.02;
  f.runs.push_back(kld);
  RunRecord b1 = rec("fp8", 2000, 1, 0, 2073, 0);
  b1.kind = kKindBinding, b1.index = 1, b1.binding_correct = false;
  f.runs.push_back(b1);
  b1.index = 0, b1.binding_correct = true;
  f.runs.push_back(b1);

  const Aggregates a = aggregate(f);
  ASSERT_EQ(a.cells.size(), 4u);
  const Cell* c = find_cell(a, "f16", 2000);
  EXPECT_EQ(c->ok, 3);
  EXPECT_EQ(c->expected, 3);
  EXPECT_DOUBLE_EQ(*c->metrics.at("decode_tok_s").median, 42);
  EXPECT_DOUBLE_EQ(*c->metrics.at("decode_tok_s").min, 41);
  EXPECT_DOUBLE_EQ(*c->metrics.at("decode_tok_s").max, 43);
  const Cell* d = find_cell(a, "fp8", 32000);
  EXPECT_EQ(d->ok, 1);
  EXPECT_EQ(d->oom, 1);
  EXPECT_EQ(d->other, 1);
  EXPECT_EQ(d->expected, 3);
  EXPECT_DOUBLE_EQ(*d->metrics.at("decode_tok_s").median, 36);  // warm-up and failures excluded
  EXPECT_NEAR(*d->decode_change_pct, (36.0 / 30.0 - 1) * 100, 1e-9);
  EXPECT_NEAR(*d->capacity_ratio, 2.0, 1e-12);
  const Cell* e = find_cell(a, "fp8", 2000);
  EXPECT_NEAR(*e->kld_mean.median, 0.02, 1e-12);
  EXPECT_EQ(e->binding_asked, 2);
  EXPECT_EQ(e->binding_correct, 1);
  EXPECT_EQ(e->binding_fact_correct, (std::vector<int>{1, 0}));
  EXPECT_EQ(e->fact_found_runs, (std::vector<int>{3, 3}));
  // ITL slope from the per-length medians: f16 (2073, 0.022), (32025, 0.032).
  EXPECT_NEAR(a.fits[0].itl->slope, 0.01 / (32025 - 2073), 1e-15);
  EXPECT_NEAR(a.fits[0].itl->intercept, 0.022 - 2073 * 0.01 / (32025 - 2073), 1e-12);
  const std::string table = summary_table(a);
  EXPECT_NE(table.find("+20.0%"), std::string::npos) << table;
  EXPECT_NE(table.find("ITL slope f16"), std::string::npos);
}

TEST(HarnessResults, WritesAggregateFiles) {
  ResultsFile f;
  f.runs.push_back(rec("f16", 2000, 1, 40, 2073, 0.02));
  RunRecord r = rec("a,b=\"x\"", 2000, 1, 40, 2073, 0.02);
  f.runs.push_back(r);
  const Aggregates a = aggregate(f);
  const fs::path d = temp_file("aggdir");
  fs::create_directories(d);
  write_aggregates(a, d.string());
  std::ifstream csv(d / "aggregate.csv");
  std::string header, row1, row2;
  std::getline(csv, header), std::getline(csv, row1), std::getline(csv, row2);
  EXPECT_EQ(header.rfind("arm,target,expected,ok,oom,other,context_tokens_median", 0), 0u);
  EXPECT_EQ(row1.rfind("f16,2000,1,1,0,0,2073,2073,2073", 0), 0u) << row1;
  EXPECT_EQ(row2.rfind("\"a,b=\"\"x\"\"\",2000", 0), 0u) << row2;
  std::ifstream jl(d / "aggregate.jsonl");
  int cells = 0, fits = 0;
  for (std::string l; std::getline(jl, l);) {
    const auto j = nlohmann::json::parse(l);
    cells += j["type"] == "cell";
    fits += j["type"] == "fit";
  }
  EXPECT_EQ(cells, 2);
  EXPECT_EQ(fits, 2);
  fs::remove_all(d);
}
