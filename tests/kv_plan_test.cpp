#include <gtest/gtest.h>

#include <filesystem>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_test_util.h"
#include "core/error.h"
#include "kv/plan.h"

namespace kvtax {
namespace {

TEST(KvPlan, ParseSize) {
  EXPECT_EQ(parse_size("16GiB"), size_t(16) << 30);
  EXPECT_EQ(parse_size("512MiB"), size_t(512) << 20);
  EXPECT_EQ(parse_size("2GB"), size_t(2000000000));
  EXPECT_EQ(parse_size("1.5KiB"), size_t(1536));
  EXPECT_EQ(parse_size("100"), size_t(100));
  for (const char* bad : {"", "GiB", "-1GiB", "12XB", "nan", "1e30GiB"}) EXPECT_THROW(parse_size(bad), Error) << bad;
}

TEST(KvPlan, Llama8BPairs) {
  const KvShape sh{32, 8, 128};
  const auto rows = plan_kv(sh, size_t(16) << 30);
  EXPECT_EQ(rows.size(), size_t(kv::kNumCodecs * kv::kNumCodecs));
  bool seen = false;
  for (const auto& r : rows) {
    if (r.k == "f16" && r.v == "f16") {
      seen = true;
      EXPECT_DOUBLE_EQ(r.bytes_per_token, 131072.0);  // 128 KiB, ANCHORS.md
      EXPECT_EQ(r.tokens, 131072u - 256u);           // block padding costs one block at exactly 16 GiB
    }
    if (r.k == "q4" && r.v == "q4") {
      EXPECT_DOUBLE_EQ(r.bytes_per_token, 36864.0);  // 36 KiB at 4.5 bits
    }
    if (r.k == "q8" && r.v == "q4") {
      EXPECT_DOUBLE_EQ(r.bytes_per_token, 32.0 * 8 * (136 + 72));
    }
    EXPECT_GT(r.tokens, 0u);
  }
  EXPECT_TRUE(seen);
}

TEST(KvPlan, WindowPlateauAndHeadDimFilter) {
  const KvShape sh{2, 2, 96};  // not a power of two: rotated codecs drop out
  const auto rows = plan_kv(sh, size_t(1) << 30, KvPolicy{4096, 4, 0});
  for (const auto& r : rows) {
    EXPECT_NE(r.k, "tq4");
    EXPECT_NE(r.v, "q4r");
    EXPECT_EQ(r.tokens, std::numeric_limits<size_t>::max()) << r.k << "/" << r.v;  // plateau fits in 1 GiB
    EXPECT_GT(r.plateau_bytes, 0u);
  }
  EXPECT_EQ(rows.size(), size_t(6 * 6));
}

}  // namespace
}  // namespace kvtax

namespace kvtax {
namespace {

std::string run_capture(const std::string& args, int* rc) {
  const testing::CliRun r = testing::run_kvtax(args);
  *rc = r.status;
  return r.out;
}

TEST(KvPlanCli, StoriesJson) {
  const std::string model = std::string(KVTAX_SHARED_DIR) + "/fixtures/stories260K.gguf";
  if (!std::filesystem::exists(model)) GTEST_SKIP() << "../shared absent: " << model;
  int rc = 0;
  const std::string out = run_capture("plan -m " + model + " --reserve 64MiB --json", &rc);
  ASSERT_EQ(rc, 0) << out;
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["n_layers"], 5);
  EXPECT_EQ(j["n_kv_heads"], 4);
  EXPECT_EQ(j["head_dim"], 8);
  // head_dim 8: q8/q4/q4r (32-value blocks) drop out; f32 f16 bf16 fp8 tq4 tq3 remain.
  EXPECT_EQ(j["pairs"].size(), 36u);
  for (const auto& p : j["pairs"]) {
    if (p["k"] == "f16" && p["v"] == "f16") {
      EXPECT_EQ(p["bytes_per_token"], 5.0 * 4 * 2 * 16);
      // 64 MiB / (256 tokens * 640 B + 64 B padding) = 409 blocks
      EXPECT_EQ(p["tokens"], 409 * 256);
    }
  }
  const std::string bad = run_capture("plan -m " + model + " --reserve 12XB", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(bad.find("bad size unit"), std::string::npos) << bad;
}

}  // namespace
}  // namespace kvtax
