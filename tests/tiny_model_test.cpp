// The tiny architecture with make-model's own byte vocabulary: a whole random-weight model with no fixture.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <vector>

#include <unistd.h>

#include "core/error.h"
#include "engine/generate.h"
#include "model/forward.h"
#include "model/make_model.h"
#include "model/model.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "pick_reference.h"

using namespace kvtax;

TEST(TinyModel, BuiltinByteVocabRunsEndToEnd) {
  const std::string out =
      (std::filesystem::temp_directory_path() / ("kvtax-tiny-" + std::to_string(getpid()) + ".gguf")).string();
  MakeModelOptions o;
  o.spec = arch_spec("tiny");
  o.n_layers = 2;
  o.type = GgmlType::Q8_0;
  o.seed = 3;
  o.out_path = out;
  const auto r = make_model(o);
  EXPECT_EQ(r.n_vocab, 259u);  // 256 bytes + 3 ChatML control tokens

  auto m = Model::load(out);
  const auto& tok = m->tokenizer();
  const std::string text = "Vault Aurora: QX-4471 \xc3\xa9";
  const auto ids = tok.encode(text, false, false);
  EXPECT_EQ(ids.size(), text.size());  // one token per byte
  EXPECT_EQ(tok.decode(ids), text);
  const auto chat = tok::detect_chat_template(m->file());
  const auto prompt = tok.encode(tok::apply_chat_template(chat, {{"user", "hi"}}, true), true, true);
  EXPECT_EQ(prompt.front(), tok.find_token("<|im_start|>"));

  ThreadPool pool(2);
  Forward fw(*m, parse_kv_spec("q8"), 256, 64, pool);
  GenerateOptions g;
  g.max_tokens = 8;
  g.stop_at_eog = false;
  const auto res = generate(fw, prompt, g);
  EXPECT_EQ(res.tokens.size(), 8u);
  EXPECT_EQ(fw.n_past(), int(prompt.size()) + 7);

  // A decoder with a logits row of its own (as the device's page-locked one): generate() has it write there and
  // samples from there, with the same tokens.
  struct RowDecoder : Decoder {
    Forward& fw;
    std::vector<float> row;
    int evals = 0, into_row = 0;
    std::vector<int> sizes;  // tokens per eval
    explicit RowDecoder(Forward& f) : fw(f), row(f.model().config().n_vocab) {}
    void eval(const int32_t* t, int n, float* logits, bool all) override {
      ++evals;
      sizes.push_back(n);
      into_row += logits == row.data();
      fw.eval(t, n, row.data(), all);
      if (logits != row.data()) std::copy(row.begin(), row.end(), logits);
    }
    float* logits_row() override { return row.data(); }
    int n_past() const override { return fw.n_past(); }
    int max_context() const override { return fw.max_context(); }
    int max_batch() const override { return fw.max_batch(); }
    const Model& model() const override { return fw.model(); }
    void reset() override { fw.reset(); }
  };
  fw.reset();
  RowDecoder rd(fw);
  const auto again = generate(rd, prompt, g);
  EXPECT_EQ(again.tokens, res.tokens);
  EXPECT_GT(rd.evals, 0);
  EXPECT_EQ(rd.into_row, rd.evals);
  // No prefill chunk given: the decoder takes as many prompt tokens as it can per eval (a device then splits them
  // into its own chunks); a chunk given caps every eval.
  ASSERT_LE(prompt.size(), size_t(fw.max_batch()));
  EXPECT_EQ(rd.sizes.front(), int(prompt.size()));
  fw.reset();
  RowDecoder chunked(fw);
  g.prefill_chunk = 4;
  EXPECT_EQ(generate(chunked, prompt, g).tokens, res.tokens);
  EXPECT_EQ(chunked.sizes.front(), 4);
  EXPECT_EQ(chunked.evals, int((prompt.size() + 3) / 4) + 7);

  // A decoder that picks the token itself (as the device does; here by the float64 walk): generate() takes its pick
  // instead of the logits when the sampler needs no cut, with the uniform drawn as the sampler would draw it, so the
  // tokens are the sampler's own; with a cut it takes the logits.
  struct PickDecoder : RowDecoder {
    int picks = 0;
    using RowDecoder::RowDecoder;
    bool has_pick() const override { return true; }
    int32_t eval_pick(const int32_t* t, int n, const TokenPick& p) override {
      ++picks;
      fw.eval(t, n, row.data(), false);
      if (p.inv_temperature == 0) return argmax(row.data(), int(row.size()));
      return kvtax::testing::draw_reference(row.data(), int(row.size()), p.inv_temperature, p.u).index;
    }
  };
  fw.reset();
  PickDecoder picks(fw);
  g.prefill_chunk = 0;
  EXPECT_EQ(generate(picks, prompt, g).tokens, res.tokens);
  EXPECT_EQ(picks.picks, 8);  // the prompt, then 7 steps
  EXPECT_EQ(picks.evals, 0);
  GenerateOptions drawn = g;
  drawn.sampler.temperature = 0.9f, drawn.sampler.top_k = 0, drawn.sampler.top_p = 1.0f, drawn.sampler.min_p = 0.0f;
  drawn.sampler.seed = 5;
  fw.reset();
  const auto on_host = generate(fw, prompt, drawn);
  fw.reset();
  PickDecoder drawing(fw);
  EXPECT_EQ(generate(drawing, prompt, drawn).tokens, on_host.tokens);
  EXPECT_EQ(drawing.picks, 8);
  fw.reset();
  PickDecoder cut(fw);
  GenerateOptions top_k = drawn;
  top_k.sampler.top_k = 40;
  EXPECT_EQ(generate(cut, prompt, top_k).tokens.size(), 8u);
  EXPECT_EQ(cut.picks, 0);
  EXPECT_EQ(cut.evals, 8);

  // Logits that come out NaN stop the generation with an error that says so, whether the host samples them or the
  // decoder picks (kNoPick), greedy or drawn; never a token.
  struct NaNDecoder : PickDecoder {
    bool picking;
    NaNDecoder(Forward& f, bool p) : PickDecoder(f), picking(p) {}
    bool has_pick() const override { return picking; }
    void eval(const int32_t* t, int n, float* logits, bool all) override {
      RowDecoder::eval(t, n, logits, all);
      if (evals == 3) std::fill(logits, logits + row.size(), std::numeric_limits<float>::quiet_NaN());
    }
    int32_t eval_pick(const int32_t* t, int n, const TokenPick& p) override {
      return ++picks == 3 ? kNoPick : PickDecoder::eval_pick(t, n, p);
    }
  };
  for (const GenerateOptions& o : {g, drawn, top_k})
    for (bool picking : {false, true}) {
      fw.reset();
      NaNDecoder bad(fw, picking);
      try {
        generate(bad, prompt, o);
        ADD_FAILURE() << "no error from NaN logits (picking " << picking << ")";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("NaN"), std::string::npos) << e.what();
      }
    }
  std::filesystem::remove(out);
}
