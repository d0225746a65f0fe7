#include <gtest/gtest.h>

#include "core/error.h"
#include "harness/sweep_cli.h"

using namespace kvtax::harness;

namespace {

SweepOptions parse(std::vector<std::string> args) {
  CLI::App app;
  SweepCliArgs a;
  add_sweep_options(app, a);
  args.insert(args.begin(), "kvtax");
  std::vector<const char*> argv;
  for (auto& s : args) argv.push_back(s.c_str());
  app.parse(int(argv.size()), argv.data());
  return resolve_sweep_options(a);
}

}  // namespace

TEST(HarnessCli, Lengths) {
  EXPECT_EQ(parse_lengths("2k,8k,16k,32k"), (std::vector<int64_t>{2000, 8000, 16000, 32000}));
  EXPECT_EQ(parse_lengths("500, 1.5k,128K,1m"), (std::vector<int64_t>{500, 1500, 128000, 1000000}));
  for (const char* bad : {"", "2k,", "x", "0", "-2k", "1.0001k", "2kb", "100m"})
    EXPECT_THROW(parse_lengths(bad), kvtax::Error) << bad;
}

TEST(HarnessCli, Bytes) {
  EXPECT_EQ(parse_bytes("1000"), 1000u);
  EXPECT_EQ(parse_bytes("2KiB"), 2048u);
  EXPECT_EQ(parse_bytes("1.5 GiB"), size_t(1.5 * 1073741824.0));
  EXPECT_EQ(parse_bytes("8GB"), 8000000000u);
  for (const char* bad : {"", "GiB", "-1", "3 parsecs", "1e30"}) EXPECT_THROW(parse_bytes(bad), kvtax::Error) << bad;
}

TEST(HarnessCli, DefaultsAndOptions) {
  SweepOptions o = parse({"--arm", "f16", "--arm", "q4r,recent=1024", "--out", "d", "--lengths", "4k,64k", "--facts",
                          "8", "--placement", "spread", "--filler", "varied", "--no-binding", "--isolate", "process",
                          "--run-timeout", "60", "--reserve", "13.37GiB", "--seed", "9", "--resume", "--prefix-reuse"});
  EXPECT_EQ(o.arms.size(), 2u);
  EXPECT_EQ(o.arms[1].spec, "q4r,recent=1024");
  EXPECT_EQ(o.lengths, (std::vector<int64_t>{4000, 64000}));
  EXPECT_EQ(o.passes, 3);
  EXPECT_EQ(o.warmup, 1);
  EXPECT_EQ(o.transcript.facts.size(), 8u);
  EXPECT_EQ(o.transcript.placement.str(), "spread");
  EXPECT_EQ(o.transcript.filler, FillerKind::varied);
  EXPECT_FALSE(o.binding);
  EXPECT_TRUE(o.kld);
  EXPECT_EQ(o.isolate, Isolation::process);
  EXPECT_EQ(o.reserve_bytes, size_t(13.37 * 1073741824.0 + 0.5));
  EXPECT_TRUE(o.resume);
  EXPECT_TRUE(o.prefix_reuse);
  EXPECT_EQ(o.max_tokens, 64);
}

TEST(HarnessCli, SeedPresetAndOverrides) {
  SweepOptions o = parse({"--preset", "seed", "--out", "d"});
  ASSERT_EQ(o.arms.size(), 2u);
  EXPECT_EQ(o.arms[0].spec, "f16");
  EXPECT_EQ(o.arms[1].spec, "fp8");
  EXPECT_EQ(o.lengths, (std::vector<int64_t>{2000, 8000, 16000, 32000}));
  EXPECT_EQ(o.passes, 3);
  EXPECT_EQ(o.transcript.facts.size(), 5u);
  o = parse({"--preset", "seed", "--out", "d", "--passes", "5", "--lengths", "2k", "--arm", "q8"});
  EXPECT_EQ(o.passes, 5);
  EXPECT_EQ(o.lengths, (std::vector<int64_t>{2000}));
  ASSERT_EQ(o.arms.size(), 1u);
  EXPECT_EQ(o.arms[0].spec, "q8");
}

TEST(HarnessCli, InvalidValuesAreClearErrors) {
  auto msg = [](std::vector<std::string> args) {
    try {
      parse(args);
    } catch (const kvtax::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(msg({"--out", "d"}).find("no arms"), std::string::npos);
  EXPECT_NE(msg({"--arm", "f16"}).find("--out"), std::string::npos);
  EXPECT_NE(msg({"--arm", "f16", "--out", "d", "--preset", "fast"}).find("preset 'fast'"), std::string::npos);
  EXPECT_NE(msg({"--arm", "f16", "--out", "d", "--placement", "middle"}).find("placement 'middle'"), std::string::npos);
  EXPECT_NE(msg({"--arm", "f16", "--out", "d", "--isolate", "thread"}).find("isolate 'thread'"), std::string::npos);
  EXPECT_NE(msg({"--arm", "f16", "--out", "d", "--filler", "lorem"}).find("filler 'lorem'"), std::string::npos);
  EXPECT_NE(msg({"--arm", "f16,sinks=4", "--out", "d"}).find("window"), std::string::npos);
  EXPECT_NE(msg({"--arm", "f16", "--out", "d", "--passes", "0"}).find("passes"), std::string::npos);
  EXPECT_NE(msg({"--arm", "f16", "--out", "d", "--lengths", "2k,2k"}).find("twice"), std::string::npos);
  EXPECT_NE(msg({"--arm", "f16", "--out", "d", "--run-timeout", "5"}).find("--isolate process"), std::string::npos);
  EXPECT_NE(msg({"--arm", "f16", "--out", "d", "--facts", "500"}).find("facts"), std::string::npos);
  EXPECT_NE(msg({"--arm", "f16", "--out", "d", "--reserve", "lots"}).find("lots"), std::string::npos);
}
