// The forward pass against llama.cpp's logits on identical GGUF bytes (goldens: tools/goldens/make_goldens.sh).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>

#include <unistd.h>

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

// KVTAX_PARITY_POSITIONS=N checks only the first N of a random-model golden's 256 teacher-forced positions (the
// debug-asan test preset sets it: the full run costs minutes per case under the sanitizers). Unset: all of them.
uint32_t parity_positions(uint32_t available) {
  const char* env = std::getenv("KVTAX_PARITY_POSITIONS");
  if (!env || !*env) return available;
  char* end = nullptr;
  const long n = std::strtol(env, &end, 10);
  if (*end != '\0' || n < 1) throw std::invalid_argument(fmt::format("KVTAX_PARITY_POSITIONS={}: want a count >= 1", env));
  return uint32_t(std::min<long>(n, available));
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

// Random-weight models of real shapes vs llama.cpp's top-32 logits at 256 teacher-forced random-token positions.
// Weight types run with f32 KV on both sides (the matmul path alone); the kvq8 cases compare our q8/q8 cache with
// llama.cpp's q8_0/q8_0 flash attention. The random model's top-2 margins are small (median 0.16, smallest
// 0.003 logits), so one flipped rounding of an 8-bit activation upstream can move a top-1: llama.cpp against
// itself with an f16 instead of an f32 cache agrees at only 246/256 positions (docs/perf.md).
struct RandomCase {
  std::string arch, type, golden, kv;
  enum Source { kvtax_made_ci, kvtax_made_cached, llama_quantized } source;
  double min_agreement = 0.95;  // over all 256 positions, near-ties included
  double max_rel_error = 0.02;  // max |Δlogit| over llama.cpp's top-32 / |its top logit|
};

// A top-2 gap this small is inside the activation-quantization noise of either implementation (see above).
constexpr double kDecidedMargin = 0.05;

void PrintTo(const RandomCase& c, std::ostream* os) { *os << c.golden << " (KV " << c.kv << ")"; }

class ParityRandom : public testing::TestWithParam<RandomCase> {
 protected:
  static void TearDownTestSuite() {
    if (!own_dir_.empty()) fs::remove_all(own_dir_);
    own_dir_.clear();
  }
  // Without KVTAX_MODEL_CACHE, the models this process makes go to a directory of its own, deleted when the suite
  // ends: ctest runs the cases as parallel processes, and other checkouts may run the suite at the same time, so a
  // shared directory would let one process read another's half-written model or delete it under it.
  static const fs::path& own_dir() {
    if (own_dir_.empty()) {
      own_dir_ = fs::temp_directory_path() / fmt::format("kvtax-parity-{}", ::getpid());
      fs::create_directories(own_dir_);
    }
    return own_dir_;
  }
  static inline fs::path own_dir_;
};

TEST_P(ParityRandom, Top1AgreementWithLlamaCpp) {
  const RandomCase& c = GetParam();
  Golden g;
  ASSERT_TRUE(Golden::load(kGoldens + c.golden, g)) << c.golden;
  // KVTAX_MODEL_CACHE keeps the models between runs (tools/goldens/make_goldens.sh makes them under these names).
  const char* cache = std::getenv("KVTAX_MODEL_CACHE");
  const fs::path dir = cache ? fs::path(cache) : own_dir();
  const fs::path model = c.source == RandomCase::llama_quantized
                             ? dir / fmt::format("{}-2l-llamaquant-{}.gguf", c.arch, c.type)
                             : dir / fmt::format("{}-2l-{}-s1.gguf", c.arch, c.type);
  if (!fs::exists(model)) {
    if (c.source == RandomCase::llama_quantized)
      GTEST_SKIP() << "made by llama-quantize, which CI does not have: " << model
                   << " absent (tools/goldens/make_goldens.sh makes it; set KVTAX_MODEL_CACHE)";
    if (c.source == RandomCase::kvtax_made_cached && !cache)
      GTEST_SKIP() << "outside the CI subset (each model costs ~1 min and 1-3 GB to make): set KVTAX_MODEL_CACHE"
                   << " to a folder holding " << model.filename();
    const std::string vocab_dir = std::string(KVTAX_SHARED_DIR) + "/fixtures/vocab";
    if (!fs::is_directory(vocab_dir)) GTEST_SKIP() << "../shared absent: make-model needs " << vocab_dir;
    if (!cache)  // up to 3 GB each: keep one on disk at a time
      for (const auto& e : fs::directory_iterator(dir)) fs::remove(e.path());
    const std::string cmd = fmt::format("{} make-model --arch {} --layers 2 --type {} --seed 1 -o {} > /dev/null",
                                        KVTAX_BINARY, c.arch, c.type, model.string());
    ASSERT_EQ(std::system(cmd.c_str()), 0) << "make-model failed: " << cmd;
  }
  auto m = Model::load(model.string());
  ASSERT_EQ(m->config().n_vocab, g.n_vocab);
  const uint32_t n_rows = parity_positions(g.n_rows);
  if (n_rows < g.n_rows)
    std::printf("KVTAX_PARITY_POSITIONS: reduced run, first %u of %u positions\n", n_rows, g.n_rows);
  const std::vector<int32_t> tokens(g.tokens.begin(), g.tokens.begin() + n_rows);
  const auto ours = all_logits(*m, tokens, c.kv.c_str(), 128);
  int agree = 0, decided = 0, decided_agree = 0;
  double worst_rel = 0;
  std::string flips;
  for (uint32_t r = 0; r < n_rows; ++r) {
    const float* row = &ours[size_t(r) * g.n_vocab];
    const auto& top = g.top[r];
    const bool same = std::max_element(row, row + g.n_vocab) - row == top[0].first;
    const double margin = top[0].second - top[1].second;  // llama.cpp's own top-2 gap
    agree += same;
    if (margin >= kDecidedMargin) decided++, decided_agree += same;
    if (!same) flips += fmt::format(" {}(gap {:.3f})", r, margin);
    double diff = 0;
    for (const auto& [id, v] : top) diff = std::max(diff, double(std::abs(row[id] - v)));
    worst_rel = std::max(worst_rel, diff / std::abs(double(top[0].second)));
  }
  const double agreement = double(agree) / n_rows,
               decided_agreement = decided ? double(decided_agree) / decided : 1.0;
  std::printf("%s %s%s (KV %s): top-1 agreement %d/%u = %.2f%%; where llama.cpp's top-2 gap >= %.2f: %d/%d = %.2f%%;"
              " max rel logit error over llama.cpp's top-32 %.3g; differing positions:%s\n",
              c.arch.c_str(), c.source == RandomCase::llama_quantized ? "llama-quantize " : "", c.type.c_str(),
              c.kv.c_str(), agree, n_rows, 100 * agreement, kDecidedMargin, decided_agree, decided,
              100 * decided_agreement, worst_rel, flips.c_str());
  EXPECT_GE(decided_agreement, 0.99);
  EXPECT_GE(agreement, c.min_agreement);
  EXPECT_LE(worst_rel, c.max_rel_error);
}

// CI makes six models covering every type (llama3-8b f16, q8_0, q4_K; the cheaper qwen3-4b f16, q4_0, q6_K: 1-7 min
// each on a loaded 2-core machine, 0.3-3 GB, one on disk at a time); the rest run when KVTAX_MODEL_CACHE has them.
using enum RandomCase::Source;
INSTANTIATE_TEST_SUITE_P(Goldens, ParityRandom, testing::ValuesIn(std::vector<RandomCase>{
    {"llama3-8b", "f16", "llama3-8b-2l-f16.bin", "f32", kvtax_made_ci},
    {"llama3-8b", "f16", "llama3-8b-2l-f16-kvq8.bin", "q8", kvtax_made_ci},
    {"llama3-8b", "q8_0", "llama3-8b-2l-q8_0.bin", "f32", kvtax_made_ci},
    {"llama3-8b", "q4_0", "llama3-8b-2l-q4_0.bin", "f32", kvtax_made_cached},
    {"llama3-8b", "q4_K", "llama3-8b-2l-q4_K.bin", "f32", kvtax_made_ci},
    {"llama3-8b", "q6_K", "llama3-8b-2l-q6_K.bin", "f32", kvtax_made_cached},
    {"llama3-8b", "Q4_0", "llama3-8b-2l-llamaquant-Q4_0.bin", "f32", llama_quantized},
    {"llama3-8b", "Q4_K", "llama3-8b-2l-llamaquant-Q4_K.bin", "f32", llama_quantized},
    {"llama3-8b", "Q6_K", "llama3-8b-2l-llamaquant-Q6_K.bin", "f32", llama_quantized},
    {"qwen3-4b", "f16", "qwen3-4b-2l-f16.bin", "f32", kvtax_made_ci},
    {"qwen3-4b", "f16", "qwen3-4b-2l-f16-kvq8.bin", "q8", kvtax_made_ci},
    {"qwen3-4b", "q4_K", "qwen3-4b-2l-q4_K.bin", "f32", kvtax_made_cached},
    {"qwen3-4b", "q8_0", "qwen3-4b-2l-q8_0.bin", "f32", kvtax_made_cached},
    {"qwen3-4b", "q4_0", "qwen3-4b-2l-q4_0.bin", "f32", kvtax_made_ci},
    {"qwen3-4b", "q6_K", "qwen3-4b-2l-q6_K.bin", "f32", kvtax_made_ci},
    {"qwen3-4b", "Q4_0", "qwen3-4b-2l-llamaquant-Q4_0.bin", "f32", llama_quantized},
    {"qwen3-4b", "Q4_K", "qwen3-4b-2l-llamaquant-Q4_K.bin", "f32", llama_quantized},
    {"qwen3-4b", "Q6_K", "qwen3-4b-2l-llamaquant-Q6_K.bin", "f32", llama_quantized},
}), [](const auto& info) {
  const auto& p = info.param;
  return p.arch.substr(0, 5) + "_" + (p.source == llama_quantized ? "llamaquant_" : "") + p.type +
         (p.kv == "f32" ? "" : "_kv" + p.kv);
});
