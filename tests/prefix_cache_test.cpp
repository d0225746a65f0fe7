// The engine's prefix cache (Session): a request that reuses cached tokens must produce exactly what a
// cold run produces (f32/f16 KV), and report how many prompt tokens it reused.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.h"
#include "engine/local_runner.h"
#include "engine/session.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "tiny_model_util.h"

using namespace kvtax;

namespace {

class PrefixCache : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = kvtax::testing::make_tiny_model("prefix", GgmlType::F16, 11, &path_);
    pool_ = new ThreadPool(2);
  }
  static void TearDownTestSuite() {
    delete pool_;
    delete model_;
    std::filesystem::remove(path_);
  }
  static std::vector<int32_t> toks(const std::string& s) { return model_->tokenizer().encode(s, true, false); }
  static GenerateOptions opts(int n, int chunk = 32) {
    GenerateOptions g;
    g.max_tokens = n;
    g.prefill_chunk = chunk;
    g.stop_at_eog = false;
    g.want_logprobs = true;
    return g;
  }
  static inline std::string path_;
  static inline Model* model_ = nullptr;
  static inline ThreadPool* pool_ = nullptr;
};

const std::string kPrefix =
    "The vault of Aurora keeps the access code QX-4471 behind a door of old oak; the keeper walks the hall "
    "twice a night and counts the lamps. ";

size_t common(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

}  // namespace

// Token by token (prefill chunk 1) every position is computed the same way warm or cold, so any
// difference would come from the truncated cache: the logits must match bit for bit. With chunked
// prefill the warm run's chunks start at the reuse point, so matmul batching differs: close, not equal.
TEST_F(PrefixCache, WarmLogitsEqualColdForExactCodecs) {
  for (const char* kv : {"f32", "f16"})
    for (int chunk : {1, 32}) {
      SCOPED_TRACE(std::string(kv) + " chunk " + std::to_string(chunk));
      const auto a = toks(kPrefix + "Summarise the text above.");
      const auto b = toks(kPrefix + "What is the access code?");
      Session warm(*model_, parse_kv_spec(kv), 512, 32, *pool_);
      const auto first = warm.generate(a, opts(6, chunk));
      EXPECT_EQ(first.stats.cached_tokens, 0);
      EXPECT_EQ(warm.tokens().size(), a.size() + 5);  // the last sampled token is never fed back
      const auto hit = warm.generate(b, opts(8, chunk));
      EXPECT_EQ(hit.stats.cached_tokens, int(common(a, b)));
      EXPECT_GT(hit.stats.cached_tokens, 100);
      Session cold(*model_, parse_kv_spec(kv), 512, 32, *pool_);
      const auto ref = cold.generate(b, opts(8, chunk));
      EXPECT_EQ(ref.stats.cached_tokens, 0);
      EXPECT_EQ(hit.tokens, ref.tokens);
      ASSERT_EQ(hit.logprobs.size(), ref.logprobs.size());
      for (size_t i = 0; i < ref.logprobs.size(); ++i) {
        if (chunk == 1) {
          ASSERT_EQ(hit.logprobs[i], ref.logprobs[i]) << "position " << i;
        } else {
          for (size_t v = 0; v < ref.logprobs[i].size(); ++v)
            ASSERT_NEAR(hit.logprobs[i][v], ref.logprobs[i][v], 1e-4) << "position " << i;
        }
      }
      EXPECT_EQ(warm.cache().bytes_used(), cold.cache().bytes_used());
    }
}

TEST_F(PrefixCache, ReuseCounts) {
  Session s(*model_, parse_kv_spec("f16"), 512, 32, *pool_);
  const auto a = toks(kPrefix);
  s.generate(a, opts(4));
  // A continuation of everything cached (a chat's next turn) reuses all of it.
  std::vector<int32_t> next = s.tokens();
  const size_t held = next.size();
  for (int32_t t : toks("And then?")) next.push_back(t);
  EXPECT_EQ(s.generate(next, opts(2)).stats.cached_tokens, int(held));
  // A prompt that is a prefix of the cached sequence: all but its last token (evaluated for logits).
  const std::vector<int32_t> shorter(a.begin(), a.begin() + 20);
  EXPECT_EQ(s.reusable(shorter), 19);
  EXPECT_EQ(s.generate(shorter, opts(2)).stats.cached_tokens, 19);
  // Nothing in common, and reuse turned off.
  const auto z = toks("zzz");
  const int shared = int(std::min(common(s.tokens(), z), z.size() - 1));  // BOS, when the vocabulary adds one
  EXPECT_LE(shared, 1);
  EXPECT_EQ(s.generate(z, opts(2)).stats.cached_tokens, shared);
  s.generate(a, opts(2));
  EXPECT_EQ(s.generate(a, opts(2), /*reuse=*/false).stats.cached_tokens, 0);
  EXPECT_EQ(s.cache().n_past(), int(a.size()) + 1);
}

TEST_F(PrefixCache, QuantizedKvStaysClose) {
  const auto a = toks(kPrefix + "Summarise the text above.");
  const auto b = toks(kPrefix + "What is the access code?");
  Session warm(*model_, parse_kv_spec("q8"), 512, 32, *pool_);
  warm.generate(a, opts(4));
  const auto hit = warm.generate(b, opts(4));
  EXPECT_GT(hit.stats.cached_tokens, 100);
  Session cold(*model_, parse_kv_spec("q8"), 512, 32, *pool_);
  const auto ref = cold.generate(b, opts(4));
  ASSERT_EQ(hit.logprobs.size(), ref.logprobs.size());
  for (size_t i = 0; i < ref.logprobs.size(); ++i)
    for (size_t v = 0; v < ref.logprobs[i].size(); ++v) ASSERT_NEAR(hit.logprobs[i][v], ref.logprobs[i][v], 1e-3);
}

TEST_F(PrefixCache, ContextOverflowLeavesAUsableSession) {
  Session s(*model_, parse_kv_spec("f16"), 160, 32, *pool_);
  const auto a = toks(kPrefix);
  s.generate(a, opts(2));
  std::vector<int32_t> big = a;
  while (big.size() < 200) big.push_back(big[big.size() % a.size()]);
  EXPECT_THROW(s.generate(big, opts(2)), Error);
  EXPECT_EQ(s.tokens().size(), size_t(s.cache().n_past()));
  const auto again = s.generate(a, opts(2));
  EXPECT_EQ(again.stats.cached_tokens, int(a.size()) - 1);
}

TEST_F(PrefixCache, LocalRunnerReportsReuse) {
  LocalRunner runner(path_, 2, 64);
  harness::GenerateRequest req;
  req.arm = harness::parse_arm("f16");
  req.max_tokens = 4;
  req.user_message = kPrefix + "Summarise.";
  req.allow_prefix_cache = true;
  EXPECT_EQ(runner.generate(req).reused_prefix_tokens, 0);
  req.user_message = kPrefix + "What is the code?";
  const auto warm = runner.generate(req);
  EXPECT_GT(warm.reused_prefix_tokens, 100);
  req.allow_prefix_cache = false;
  const auto cold = runner.generate(req);
  EXPECT_EQ(cold.reused_prefix_tokens, 0);
  EXPECT_EQ(cold.text, warm.text);
  EXPECT_EQ(cold.tokens, warm.tokens);
}
