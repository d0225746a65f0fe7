// The forward pass against llama.cpp's logits on identical GGUF bytes (goldens: tools/goldens/make_goldens.sh).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#include "golden.h"
#include "engine/generate.h"
#include "model/forward.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

using namespace kvtax;
namespace fs = std::filesystem;

namespace {

const std::string kGoldens = std::string(KVTAX_SOURCE_DIR) + "/tests/data/goldens/";
const std::string kStories = std::string(KVTAX_SHARED_DIR) + "/fixtures/stories260K.gguf";

// Runs `tokens` teacher-forced and returns every position's logits.
std::vector<float> all_logits(const Model& m, const std::vector<int32_t>& tokens, const char* kv, int chunk) {
  ThreadPool pool(2);
  Forward fw(m, parse_kv_spec(kv), int(tokens.size()) + 1, chunk, pool);
  const size_t V = m.config().n_vocab;
  std::vector<float> out(tokens.size() * V);
  for (size_t i = 0; i < tokens.size(); i += size_t(chunk)) {
    const int n = int(std::min(tokens.size() - i, size_t(chunk)));
    fw.eval(tokens.data() + i, n, out.data() + i * V, /*all_logits=*/true);
  }
  return out;
}

}  // namespace

TEST(ParityStories, LogitsWithin1e4OfLlamaCpp) {
  if (!fs::exists(kStories)) GTEST_SKIP() << "../shared absent: " << kStories;
  Golden g;
  ASSERT_TRUE(Golden::load(kGoldens + "stories260k_f32kv.bin", g));
  auto m = Model::load(kStories);
  ASSERT_EQ(m->config().n_vocab, g.n_vocab);
  const std::vector<int32_t> seq(g.tokens.begin(), g.tokens.begin() + g.n_rows);
  const auto ours = all_logits(*m, seq, "f32", 64);
  double worst = 0;
  for (uint32_t r = 0; r < g.n_rows; ++r) {
    double diff = 0, scale = 0;
    for (uint32_t i = 0; i < g.n_vocab; ++i) {
      const double a = ours[size_t(r) * g.n_vocab + i], b = g.full[size_t(r) * g.n_vocab + i];
      diff = std::max(diff, std::abs(a - b));
      scale = std::max(scale, std::abs(b));
    }
    worst = std::max(worst, diff / scale);
  }
  std::printf("stories260K, f32 KV, %u positions: max |Δlogit| / max |logit| = %.3g\n", g.n_rows, worst);
  EXPECT_LE(worst, 1e-4);
}

TEST(ParityStories, Greedy200TokensIdenticalToLlamaCpp) {
  if (!fs::exists(kStories)) GTEST_SKIP() << "../shared absent: " << kStories;
  Golden g;
  ASSERT_TRUE(Golden::load(kGoldens + "stories260k_f16kv.bin", g));
  auto m = Model::load(kStories);
  const auto prompt = m->tokenizer().encode("Once upon a time", true, false);
  const size_t n_prompt = g.tokens.size() - 200;
  ASSERT_EQ(prompt, std::vector<int32_t>(g.tokens.begin(), g.tokens.begin() + n_prompt));
  ThreadPool pool(2);
  Forward fw(*m, parse_kv_spec("f16"), 512, 512, pool);
  GenerateOptions o;
  o.max_tokens = 200;
  o.stop_at_eog = false;
  const auto out = generate(fw, prompt, o);
  EXPECT_EQ(out.tokens, std::vector<int32_t>(g.tokens.begin() + n_prompt, g.tokens.end()));
  EXPECT_EQ(out.text.rfind(", there was a little girl named Lily.", 0), 0u) << out.text;
}

// Random-weight models of real shapes, rebuilt bit for bit by `kvtax make-model`, vs llama.cpp's top-32 logits.
struct RandomCase {
  std::string arch, type, golden, kv = "f16";
};

class ParityRandom : public testing::TestWithParam<RandomCase> {};

TEST_P(ParityRandom, Top1AgreementAtLeast99Percent) {
  const RandomCase& c = GetParam();
  Golden g;
  ASSERT_TRUE(Golden::load(kGoldens + c.golden, g)) << c.golden;
  // KVTAX_MODEL_CACHE keeps the generated models between runs (tools/goldens/make_goldens.sh uses the same names).
  const char* cache = std::getenv("KVTAX_MODEL_CACHE");
  const fs::path dir = cache ? fs::path(cache) : fs::temp_directory_path() / "kvtax-parity";
  fs::create_directories(dir);
  const fs::path model = dir / fmt::format("{}-2l-{}-s1.gguf", c.arch, c.type);
  if (!fs::exists(model)) {
    const std::string cmd = fmt::format("{} make-model --arch {} --layers 2 --type {} --seed 1 -o {} > /dev/null",
                                        KVTAX_BINARY, c.arch, c.type, model.string());
    if (std::system(cmd.c_str()) != 0) GTEST_SKIP() << "cannot make the model (vocab fixtures absent?): " << cmd;
  }
  auto m = Model::load(model.string());
  ASSERT_EQ(m->config().n_vocab, g.n_vocab);
  const auto ours = all_logits(*m, g.tokens, c.kv.c_str(), 128);
  int agree = 0;
  double worst_rel = 0;
  for (uint32_t r = 0; r < g.n_rows; ++r) {
    const float* row = &ours[size_t(r) * g.n_vocab];
    const auto& top = g.top[r];
    agree += std::max_element(row, row + g.n_vocab) - row == top[0].first;
    double diff = 0;
    for (const auto& [id, v] : top) diff = std::max(diff, double(std::abs(row[id] - v)));
    worst_rel = std::max(worst_rel, diff / std::abs(double(top[0].second)));
  }
  const double agreement = double(agree) / g.n_rows;
  std::printf("%s %s (KV %s): top-1 agreement %d/%u = %.2f%%, max rel logit error over llama.cpp's top-32 %.3g\n",
              c.arch.c_str(), c.type.c_str(), c.kv.c_str(), agree, g.n_rows, 100 * agreement, worst_rel);
  EXPECT_GE(agreement, 0.99);
  if (!cache) fs::remove(model);  // up to 3 GB each at full width: keep only one on disk at a time
}

INSTANTIATE_TEST_SUITE_P(Goldens, ParityRandom, testing::ValuesIn(std::vector<RandomCase>{
    {"llama3-8b", "f16", "llama3-8b-2l-f16.bin"},
    {"llama3-8b", "q8_0", "llama3-8b-2l-q8_0.bin"},
    {"llama3-8b", "q4_0", "llama3-8b-2l-q4_0.bin"},
    {"llama3-8b", "q4_K", "llama3-8b-2l-q4_K.bin", "f32"},
    {"llama3-8b", "q6_K", "llama3-8b-2l-q6_K.bin"},
    {"qwen3-4b", "f16", "qwen3-4b-2l-f16.bin"},
    {"qwen3-4b", "q8_0", "qwen3-4b-2l-q8_0.bin"},
    {"qwen3-4b", "q4_0", "qwen3-4b-2l-q4_0.bin"},
    {"qwen3-4b", "q4_K", "qwen3-4b-2l-q4_K.bin"},
    {"qwen3-4b", "q6_K", "qwen3-4b-2l-q6_K.bin"},
}), [](const auto& info) { return info.param.arch.substr(0, 5) + "_" + info.param.type; });
