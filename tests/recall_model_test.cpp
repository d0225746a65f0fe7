// The shipped recall model (models/kvtax-recall-12m.gguf, trained by tools/recall): its tokenizer gives the
// ids the Python training side gave, its logits match PyTorch's, and it recalls planted facts at 2k tokens
// with f16 and q8 KV caches as the harness asks and scores them (all-facts question 5/5, single-fact
// binding questions 5/5).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/thread_pool.h"
#include "engine/local_runner.h"
#include "harness/arm.h"
#include "harness/transcript.h"
#include "kv/cache.h"
#include "model/forward.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

using namespace kvtax;
namespace fs = std::filesystem;

namespace {

const std::string kModel = std::string(KVTAX_SOURCE_DIR) + "/models/kvtax-recall-12m.gguf";

nlohmann::json load_json(const std::string& rel) {
  std::ifstream in(std::string(KVTAX_SOURCE_DIR) + "/tests/data/recall/" + rel);
  if (!in) throw std::runtime_error("missing " + rel);
  return nlohmann::json::parse(in);
}

}  // namespace

TEST(RecallModel, TokenizerMatchesTrainingSide) {
  auto m = Model::load(kModel);
  const auto vec = load_json("tokenizer_vectors.json");
  ASSERT_GE(vec.size(), 10u);
  for (const auto& v : vec) {
    const std::string text = v["text"];
    const auto want = v["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(m->tokenizer().encode(text, false, true), want) << "text: " << text.substr(0, 80);
  }
}

TEST(RecallModel, LogitsMatchPyTorch) {
  auto m = Model::load(kModel);
  const auto ref = load_json("ref_logits.json");
  const auto ids = ref["ids"].get<std::vector<int32_t>>();
  const auto pos = ref["positions"].get<std::vector<int>>();
  const auto rows = ref["logits"].get<std::vector<std::vector<double>>>();
  const int n = int(ids.size()), V = int(m->config().n_vocab);
  ThreadPool pool(2);
  Forward fw(*m, parse_kv_spec("f32"), n + 8, n, pool);
  std::vector<float> logits(size_t(n) * V);
  fw.eval(ids.data(), n, logits.data(), true);
  for (size_t r = 0; r < pos.size(); ++r) {
    const float* got = logits.data() + size_t(pos[r]) * V;
    double max_ref = 0, max_err = 0;
    int arg_got = 0, arg_ref = 0;
    for (int k = 0; k < V; ++k) {
      max_ref = std::max(max_ref, std::fabs(rows[r][k]));
      max_err = std::max(max_err, std::fabs(got[k] - rows[r][k]));
      if (got[k] > got[arg_got]) arg_got = k;
      if (rows[r][k] > rows[r][arg_ref]) arg_ref = k;
    }
    EXPECT_LE(max_err / max_ref, 1e-4) << "position " << pos[r];  // reference rounded to 1e-4
    std::printf("position %d: max logit error / max logit = %.2e\n", pos[r], max_err / max_ref);
    EXPECT_EQ(arg_got, arg_ref) << "position " << pos[r];
  }
}

// The harness's own transcript (five default facts, early placement, the repeated facilities paragraph),
// its questions and its scoring; the answers must hold the asked codes.
TEST(RecallModel, RecallsFactsAt2kWithF16AndQ8Kv) {
  LocalRunner runner(kModel, 2, 512);
  harness::TranscriptSpec spec;
  const auto t = harness::build_transcript(spec, 2000, [&](const std::string& u) { return runner.count_prompt_tokens(u); });
  for (const char* kv : {"f16", "q8"}) {
    harness::GenerateRequest req;
    req.arm = harness::parse_arms({kv})[0];
    req.user_message = t.recall_message();
    req.max_tokens = 64;
    const auto all = runner.generate(req);
    const auto score = harness::score_recall(all.text, t.facts);
    EXPECT_EQ(score.found, 5) << kv << " all-facts answer: " << all.text;
    // In the order asked: the model walks the question's list, restating each name.
    size_t at = 0;
    for (const auto& f : t.facts) {
      const size_t p = all.text.find(f.name + ": " + f.code, at);
      EXPECT_NE(p, std::string::npos) << kv << " '" << f.name << ": " << f.code << "' (in order) in " << all.text;
      if (p != std::string::npos) at = p;
    }
    int bound = 0;
    for (size_t i = 0; i < t.facts.size(); ++i) {
      req.user_message = t.binding_message(i);
      req.max_tokens = 16;
      const auto r = runner.generate(req);
      bound += harness::score_binding(r.text, t.facts, i);
    }
    EXPECT_EQ(bound, 5) << kv;
  }
}
