#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>

#include "core/error.h"
#include "harness/report.h"
#include "harness/svg_chart.h"
#include "harness/sweep.h"
#include "harness_fake_runner.h"

using namespace kvtax::harness;
namespace fs = std::filesystem;

namespace {

const fs::path kFixture = fs::path(KVTAX_SOURCE_DIR) / "tests/data/harness_results";

size_t count_of(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

// The committed fixture is the output of this sweep of the fake runner (synthetic numbers, real format).
// Regenerate with KVTAX_REGENERATE_FIXTURES=1 after changing the results format.
TEST(HarnessReport, RegenerateFixture) {
  if (!std::getenv("KVTAX_REGENERATE_FIXTURES")) GTEST_SKIP() << "set KVTAX_REGENERATE_FIXTURES=1 to rewrite " << kFixture;
  fs::remove(kFixture / "raw.jsonl");
  fake::FakeRunner runner;
  SweepOptions o;
  o.arms = parse_arms({"f16", "q8,oom_above=10000", "q4r,recent=1024", "f16,window=1500,sinks=4"});
  o.lengths = {1000, 2000, 4000, 16000};
  o.passes = 2;
  o.warmup = 1;
  o.binding_limit = 2;
  o.prefix_reuse = true;
  o.prefix_passes = 2;
  o.out_dir = kFixture.string();
  o.progress = false;
  run_sweep(runner, o, nullptr, nullptr);
}

TEST(HarnessReport, SvgHelpers) {
  EXPECT_EQ(nice_ticks(0, 10, 5), (std::vector<double>{0, 2, 4, 6, 8, 10}));
  EXPECT_EQ(nice_ticks(0, 0.9, 4), (std::vector<double>{0, 0.25, 0.5, 0.75, 1.0}));
  EXPECT_EQ(short_count(2000), "2k");
  EXPECT_EQ(short_count(131072), "131.1k");
  EXPECT_EQ(short_count(1500000), "1.5M");
  EXPECT_EQ(html_escape("<a href=\"x\">&'"), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;");
  LineChart empty;
  empty.title = "Nothing";
  EXPECT_NE(line_chart_svg(empty).find("no data"), std::string::npos);
  LineChart c;
  c.title = "T <1>";
  c.log_x = true;
  c.series.push_back({"arm<x>", {{1000, 1}, {2000, NAN}, {0, 5}, {8000, 3}}, {}, {"a", "b", "c", "d"}});
  const std::string svg = line_chart_svg(c);
  EXPECT_NE(svg.find("T &lt;1&gt;"), std::string::npos);
  EXPECT_NE(svg.find("arm&lt;x&gt;"), std::string::npos);
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(count_of(svg, "<circle"), 2u);  // NaN and x <= 0 on a log axis are skipped
  EXPECT_NE(svg.find(">5k<"), std::string::npos);  // 1-2-5 ticks on the log axis
}

TEST(HarnessReport, RendersFixtureSelfContained) {
  if (!fs::exists(kFixture / "raw.jsonl")) GTEST_SKIP() << "fixture missing: " << kFixture;
  const ResultsFile f = read_results((kFixture / "raw.jsonl").string());
  const Aggregates a = aggregate(f);
  ASSERT_EQ(a.arms.size(), 4u);
  const std::string html = render_report_html(f, a);
  for (const char* title : {"Decode speed vs context", "Decode change vs f16", "Time to first token vs context",
                            "Inter-token latency slope", "Peak memory vs context", "Recall of planted facts vs context",
                            "Binding recall vs context", "KL divergence vs f16", "Which facts were recalled",
                            "Prefix reuse", "Run metadata"})
    EXPECT_NE(html.find(title), std::string::npos) << title;
  EXPECT_EQ(count_of(html, "<svg"), count_of(html, "</svg>"));
  EXPECT_GE(count_of(html, "<svg"), 9u);
  EXPECT_NE(html.find("cap x2"), std::string::npos);           // capacity ratio annotation
  EXPECT_NE(html.find("f16,window=1500,sinks=4"), std::string::npos);
  EXPECT_NE(html.find("class=\"miss\""), std::string::npos);   // the window arm loses early facts
  EXPECT_NE(html.find("Failed runs"), std::string::npos);       // q8 runs out of memory at 16k
  EXPECT_NE(html.find("(log scale)"), std::string::npos);
  // Self-contained: no scripts, no external references.
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("src="), std::string::npos);
  EXPECT_EQ(html.find("href="), std::string::npos);
  EXPECT_EQ(count_of(html, "://"), count_of(html, "http://www.w3.org/2000/svg"));
}

TEST(HarnessReport, CliWritesReportAndRejectsMissingDir) {
  if (!fs::exists(kFixture / "raw.jsonl")) GTEST_SKIP() << "fixture missing: " << kFixture;
  const fs::path out = fs::temp_directory_path() / ("kvtax_report_" + std::to_string(::getpid()) + ".html");
  const std::string cmd = std::string(KVTAX_BINARY) + " report " + kFixture.string() + " -o " + out.string() + " > /dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const std::string html = slurp(out);
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_NE(html.find("</html>"), std::string::npos);
  fs::remove(out);
  const fs::path err = fs::temp_directory_path() / ("kvtax_report_err_" + std::to_string(::getpid()));
  const std::string bad = std::string(KVTAX_BINARY) + " report /nonexistent/kvtax_dir 2> " + err.string();
  EXPECT_NE(std::system(bad.c_str()), 0);
  EXPECT_NE(slurp(err).find("holds no results"), std::string::npos);
  fs::remove(err);
  EXPECT_THROW(write_report("/nonexistent/kvtax_dir", ""), kvtax::Error);
}
