// Continuous batching in the engine: sequences stepped together through one ForwardPass call (decode rows of
// some beside a prefill chunk of another) produce the tokens they produce alone, with logits equal up to
// the float summation order of the batched matmuls.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "engine/generate.h"
#include "model/forward.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "tiny_model_util.h"

using namespace kvtax;

namespace {

class BatchForward : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // d_ff 1024: one matmul column panel, so greedy tokens cannot flip on float association (serve_test_util.h)
    model_ = kvtax::testing::make_tiny_model("batch", GgmlType::Q8_0, 23, &path_, 1024);
    pool_ = new ThreadPool(2);
  }
  static void TearDownTestSuite() {
    delete pool_;
    delete model_;
    std::filesystem::remove(path_);
  }
  static KvShape shape() {
    const auto& c = model_->config();
    return {int(c.n_layers), int(c.n_kv_heads), int(c.head_dim)};
  }
  static std::vector<int32_t> toks(const std::string& s) { return model_->tokenizer().encode(s, true, false); }
  static GenerateOptions opts(int n) {
    GenerateOptions g;
    g.max_tokens = n;
    g.prefill_chunk = kStep;
    g.stop_at_eog = false;
    g.want_logprobs = true;
    return g;
  }
  static constexpr int kStep = 16, kCtx = 512;
  static inline std::string path_;
  static inline Model* model_ = nullptr;
  static inline ThreadPool* pool_ = nullptr;
};

const std::vector<std::string> kPrompts = {
    "The keeper of the vault counts the lamps twice a night and writes the numbers down.",
    "Code QX-4471.",
    "A long corridor of oak doors, each with a brass plate, leads to the ledger room where the green book lies "
    "open under a lamp; nobody has turned its pages since the winter the river froze.",
};

double max_abs_diff(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  double m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    for (size_t j = 0; j < a[i].size(); ++j) m = std::max(m, std::fabs(double(a[i][j]) - b[i][j]));
  return m;
}

}  // namespace

TEST_F(BatchForward, SequencesSteppedTogetherMatchThemAlone) {
  for (const char* kv : {"f16", "q8"}) {
    SCOPED_TRACE(kv);
    const KvSpec spec = parse_kv_spec(kv);
    constexpr int kNew = 24;
    std::vector<GenerateOutput> alone;
    for (const auto& p : kPrompts) {
      Forward fw(*model_, spec, kCtx, kStep, *pool_);
      alone.push_back(generate(fw, toks(p), opts(kNew)));
      ASSERT_EQ(alone.back().tokens.size(), size_t(kNew));
    }

    // The scheduler's step: a decode row per running sequence, prefill chunks in what is left; sequence s
    // joins at step 3*s, so prefills run beside other sequences' decodes.
    ForwardPass pass(*model_, kStep, *pool_);
    std::vector<std::unique_ptr<KvCache>> caches;
    std::vector<std::unique_ptr<Generation>> gens(kPrompts.size());
    for (size_t s = 0; s < kPrompts.size(); ++s) caches.push_back(std::make_unique<KvCache>(shape(), spec, kCtx, kStep));
    int multi = 0, mixed = 0;
    for (int step = 0; step < 1000; ++step) {
      for (size_t s = 0; s < kPrompts.size(); ++s)
        if (!gens[s] && step == int(3 * s))
          gens[s] = std::make_unique<Generation>(model_->tokenizer(), int(model_->config().n_vocab), toks(kPrompts[s]),
                                                 opts(kNew), 0, kCtx);
      std::vector<SeqRows> rows;
      std::vector<Generation*> in;
      int budget = kStep, prefill_rows = 0;
      for (int pass_no = 0; pass_no < 2; ++pass_no)  // decodes first, then prefills
        for (size_t s = 0; s < kPrompts.size(); ++s) {
          Generation* g = gens[s].get();
          if (!g || g->done() || g->prefilling() != (pass_no == 1) || budget == 0) continue;
          const auto t = g->next(budget);
          ASSERT_FALSE(t.empty());
          rows.push_back({caches[s].get(), t.data(), int(t.size()), g->logits(), false});
          in.push_back(g);
          budget -= int(t.size());
          if (pass_no == 1) prefill_rows += int(t.size());
        }
      if (rows.empty() && step > 3 * int(kPrompts.size())) break;
      if (rows.empty()) continue;
      multi += rows.size() > 1;
      mixed += prefill_rows > 0 && prefill_rows < kStep - budget;
      pass.eval(rows);
      for (Generation* g : in) g->advance();
    }
    EXPECT_GT(multi, 10);
    EXPECT_GT(mixed, 0);
    for (size_t s = 0; s < kPrompts.size(); ++s) {
      SCOPED_TRACE(kPrompts[s].substr(0, 20));
      ASSERT_TRUE(gens[s] && gens[s]->done());
      const GenerateOutput& b = gens[s]->output();
      EXPECT_EQ(b.tokens, alone[s].tokens);
      EXPECT_EQ(b.text, alone[s].text);
      EXPECT_EQ(b.stats.stop_reason, "length");
      EXPECT_LT(max_abs_diff(b.logprobs, alone[s].logprobs), 2e-3);
      EXPECT_EQ(caches[s]->n_past(), int(toks(kPrompts[s]).size()) + kNew - 1);
    }
  }
}

TEST_F(BatchForward, AllLogitsRowsBesideLastRowOnly) {
  constexpr int kRows = 160;
  const KvSpec spec = parse_kv_spec("q8");
  const int n_vocab = int(model_->config().n_vocab);
  const auto a = toks(kPrompts[0]), b = toks(kPrompts[1]);
  ASSERT_LE(a.size() + b.size(), size_t(kRows));
  // Alone: every row of a, the last row of b.
  std::vector<float> la(a.size() * n_vocab), lb(n_vocab);
  {
    Forward fw(*model_, spec, kCtx, kRows, *pool_);
    fw.eval(a.data(), int(a.size()), la.data(), true);
  }
  {
    Forward fw(*model_, spec, kCtx, kRows, *pool_);
    fw.eval(b.data(), int(b.size()), lb.data());
  }
  // Together, b first so the kept rows move past a's.
  ForwardPass pass(*model_, kRows, *pool_);
  KvCache ca(shape(), spec, kCtx, kRows), cb(shape(), spec, kCtx, kRows);
  std::vector<float> ta(la.size(), NAN), tb(lb.size(), NAN);
  const SeqRows rows[] = {{&cb, b.data(), int(b.size()), tb.data(), false},
                          {&ca, a.data(), int(a.size()), ta.data(), true}};
  pass.eval(rows);
  EXPECT_EQ(ca.n_past(), int(a.size()));
  EXPECT_EQ(cb.n_past(), int(b.size()));
  double da = 0, db = 0, scale = 0;
  for (size_t i = 0; i < la.size(); ++i) da = std::max(da, double(std::fabs(la[i] - ta[i]))), scale = std::max(scale, double(std::fabs(la[i])));
  for (size_t i = 0; i < lb.size(); ++i) db = std::max(db, double(std::fabs(lb[i] - tb[i])));
  EXPECT_GT(scale, 0.1);
  EXPECT_LT(da, 1e-3 * scale);  // NaN poison left anywhere fails this
  EXPECT_LT(db, 1e-3 * scale);
}

TEST_F(BatchForward, RejectsBadBatches) {
  const KvSpec spec = parse_kv_spec("f16");
  ForwardPass pass(*model_, 8, *pool_);
  KvCache c1(shape(), spec, 64, 8), c2(shape(), spec, 64, 8);
  std::vector<float> l1(model_->config().n_vocab), l2(l1.size());
  const std::vector<int32_t> t = {1, 2, 3, 4, 5};
  const SeqRows shared[] = {{&c1, t.data(), 2, l1.data(), false}, {&c1, t.data(), 2, l2.data(), false}};
  EXPECT_THROW(pass.eval(shared), Error);
  const SeqRows too_many[] = {{&c1, t.data(), 5, l1.data(), false}, {&c2, t.data(), 5, l2.data(), false}};
  EXPECT_THROW(pass.eval(too_many), Error);
  const int32_t bad = int32_t(model_->config().n_vocab);
  const SeqRows oov[] = {{&c1, t.data(), 2, l1.data(), false}, {&c2, &bad, 1, l2.data(), false}};
  EXPECT_THROW(pass.eval(oov), Error);
  const SeqRows none[] = {{nullptr, t.data(), 1, l1.data(), false}};
  EXPECT_THROW(pass.eval(none), Error);
  EXPECT_THROW(pass.eval({}), Error);
  EXPECT_EQ(c1.n_past(), 0);  // refused before anything reached the caches
  EXPECT_EQ(c2.n_past(), 0);
}
