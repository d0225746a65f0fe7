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
// itself with an f16 instead of an f32 cache agrees at only 246/256 positions, and its SSE build against its
// AVX2 build on the same q4_K file at 250/256 (docs/perf.md). Required: top-1 agreement >= 99% over all
// positions, or, on files where llama.cpp's two builds agree less than that, as often as they do.
struct RandomCase {
  std::string arch, type, golden, kv;
  enum Source { kvtax_made_ci, kvtax_made_cached, llama_quantized } source;
  double max_rel_error = 0.02;  // max |Δlogit| over llama.cpp's top-32 / |its top logit|
};

// A top-2 gap this small is inside the activation-quantization noise of either implementation (see above).
constexpr double kDecidedMargin = 0.05;
// Near-tie flips are a random draw on either side: two builds at the same noise level land a position or two
// apart.
constexpr double kDrawSlack = 2;

void PrintTo(const RandomCase& c, std::ostream* os) { *os << c.golden << " (KV " << c.kv << ")"; }

// Top-1 agreement of a candidate with a reference golden over the first n rows.
struct Agreement {
  int agree = 0, decided = 0, decided_agree = 0;
  uint32_t n = 0;
  double worst_rel = 0;  // max |Δlogit| over the reference's top-32 / |its top logit| (when logits are given)
  std::string flips;
  double rate() const { return double(agree) / n; }
  double decided_rate() const { return decided ? double(decided_agree) / decided : 1.0; }
  std::string str() const {
    return fmt::format("{}/{} = {:.2f}%; where the reference's top-2 gap >= {:.2f}: {}/{} = {:.2f}%{}; differing "
                       "positions:{}", agree, n, 100 * rate(), kDecidedMargin, decided_agree, decided,
                       100 * decided_rate(), worst_rel > 0 ? fmt::format("; max rel logit error {:.3g}", worst_rel) : "",
                       flips);
  }
};

uint32_t top1(const std::vector<float>& logits, uint32_t n_vocab, uint32_t r) {
  const float* row = &logits[size_t(r) * n_vocab];
  return uint32_t(std::max_element(row, row + n_vocab) - row);
}

template <class Top1>
Agreement agreement(const Golden& ref, uint32_t n, Top1 candidate, const std::vector<float>* logits = nullptr) {
  Agreement a;
  a.n = n;
  for (uint32_t r = 0; r < n; ++r) {
    const auto& top = ref.top[r];
    const bool same = candidate(r) == uint32_t(top[0].first);
    const double margin = top[0].second - top[1].second;
    a.agree += same;
    if (margin >= kDecidedMargin) a.decided++, a.decided_agree += same;
    if (!same) a.flips += fmt::format(" {}(gap {:.3f})", r, margin);
    if (logits) {
      const float* row = &(*logits)[size_t(r) * ref.n_vocab];
      double diff = 0;
      for (const auto& [id, v] : top) diff = std::max(diff, double(std::abs(row[id] - v)));
      a.worst_rel = std::max(a.worst_rel, diff / std::abs(double(top[0].second)));
    }
  }
  return a;
}

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
  const Agreement vs_llama = agreement(g, n_rows, [&](uint32_t r) { return top1(ours, g.n_vocab, r); }, &ours);
  std::printf("%s %s%s (KV %s): top-1 agreement with llama.cpp %s\n", c.arch.c_str(),
              c.source == RandomCase::llama_quantized ? "llama-quantize " : "", c.type.c_str(), c.kv.c_str(),
              vs_llama.str().c_str());
  EXPECT_GE(vs_llama.decided_rate(), 0.99);
  EXPECT_LE(vs_llama.worst_rel, c.max_rel_error);

  // llama.cpp built without AVX (goldens/llama-sse/, same file and tokens) takes other code paths for every
  // matmul. Where its two builds agree with each other at fewer than 99% of the positions, that is the noise
  // floor of this check: kvtax must then be as close to llama.cpp (to either build) as they are to each other.
  Golden sse;
  double bound = 0.99, best = vs_llama.rate();
  if (Golden::load(kGoldens + "llama-sse/" + c.golden, sse)) {
    ASSERT_EQ(sse.tokens, g.tokens);
    const Agreement peer = agreement(g, n_rows, [&](uint32_t r) { return uint32_t(sse.top[r][0].first); });
    const Agreement vs_sse = agreement(sse, n_rows, [&](uint32_t r) { return top1(ours, g.n_vocab, r); });
    int consensus = 0, consensus_agree = 0;  // positions where both builds give the same top-1
    for (uint32_t r = 0; r < n_rows; ++r)
      if (sse.top[r][0].first == g.top[r][0].first)
        consensus++, consensus_agree += top1(ours, g.n_vocab, r) == uint32_t(g.top[r][0].first);
    std::printf("  llama.cpp SSE build vs its AVX2 build %s\n  kvtax vs the SSE build %s\n"
                "  kvtax where both llama.cpp builds agree: %d/%d = %.2f%%\n", peer.str().c_str(),
                vs_sse.str().c_str(), consensus_agree, consensus, 100.0 * consensus_agree / consensus);
    EXPECT_GE(vs_sse.decided_rate(), 0.99);
    bound = std::min(bound, peer.rate() - kDrawSlack / n_rows);
    best = std::max(best, vs_sse.rate());
  }
  EXPECT_GE(best, bound);
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
