// Tokenizer unit tests on small hand-built vocabularies (no files needed).
#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include "core/error.h"
#include "tokenizer/byte_alphabet.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

using namespace kvtax;
using namespace kvtax::tok;

namespace {

std::vector<std::string> words(PreTokenizer k, std::string_view text) {
  std::vector<Word> w;
  pretokenize(k, text, w);
  std::vector<std::string> out;
  size_t covered = 0;
  for (auto x : w) {
    EXPECT_EQ(x.begin, covered);
    covered += x.len;
    out.emplace_back(text.substr(x.begin, x.len));
  }
  EXPECT_EQ(covered, text.size());
  return out;
}

using V = std::vector<std::string>;
using Ids = std::vector<int32_t>;

// SPM: <unk> <s> </s>, 256 byte tokens, then a few pieces with scores.
Vocab spm_vocab() {
  Vocab v;
  v.kind = TokenizerKind::spm;
  v.tokens = {"<unk>", "<s>", "</s>"};
  v.types = {int32_t(TokenType::unknown), int32_t(TokenType::control), int32_t(TokenType::control)};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    v.tokens.push_back(buf);
    v.types.push_back(int32_t(TokenType::byte));
  }
  const std::pair<const char*, float> pieces[] = {
      {"\xE2\x96\x81", -1}, {"h", -2}, {"e", -2}, {"l", -2}, {"o", -2}, {"w", -2}, {"r", -2}, {"d", -2},
      {"\xE2\x96\x81h", -3}, {"ll", -3}, {"\xE2\x96\x81he", -4}, {"llo", -4}, {"\xE2\x96\x81hello", -5},
      {"\xE2\x96\x81w", -6}, {"or", -6}, {"\xE2\x96\x81wor", -7}, {"ld", -7},
  };
  v.scores.assign(v.tokens.size(), 0.0f);
  for (auto [t, s] : pieces) {
    v.tokens.push_back(t);
    v.types.push_back(int32_t(TokenType::normal));
    v.scores.push_back(s);
  }
  v.bos = 1;
  v.eos = 2;
  v.unk = 0;
  return v;
}

// BPE over the GPT-2 byte alphabet: 256 byte tokens, merges building "hello", " world".
Vocab bpe_vocab() {
  Vocab v;
  v.kind = TokenizerKind::bpe;
  v.pre = "llama-bpe";
  for (int b = 0; b < 256; ++b) v.tokens.emplace_back(byte_to_alphabet(uint8_t(b)));
  v.merges = {"h e", "l l", "he ll", "hell o", "\xC4\xA0 w", "o r", "\xC4\xA0w or", "\xC4\xA0wor l", "\xC4\xA0worl d"};
  for (auto& m : v.merges) {
    std::string t = m;
    t.erase(t.find(' '), 1);
    v.tokens.push_back(t);
  }
  v.tokens.push_back("<|begin_of_text|>");
  v.tokens.push_back("<|eot_id|>");
  v.tokens.push_back("<tool>");
  v.types.assign(v.tokens.size(), int32_t(TokenType::normal));
  v.types[v.types.size() - 3] = int32_t(TokenType::control);
  v.types[v.types.size() - 2] = int32_t(TokenType::control);
  v.types[v.types.size() - 1] = int32_t(TokenType::user_defined);
  v.bos = int32_t(v.tokens.size() - 3);
  return v;
}

}  // namespace

TEST(TokUnicode, Classes) {
  EXPECT_TRUE(cp_class('a') & kLetter);
  EXPECT_TRUE(cp_class(0x4E2D) & kLetter);  // 中
  EXPECT_TRUE(cp_class('7') & kNumber);
  EXPECT_TRUE(cp_class(0x00BD) & kNumber);  // ½ (No)
  EXPECT_TRUE(cp_class(' ') & kSpace);
  EXPECT_TRUE(cp_class('\n') & kSpace);
  EXPECT_TRUE(cp_class(0x00A0) & kSpace);
  EXPECT_TRUE(cp_class(0x3000) & kSpace);
  EXPECT_FALSE(cp_class(0x200B) & kSpace);  // zero width space is not White_Space
  EXPECT_TRUE(cp_class('!') & kPunct);
  EXPECT_TRUE(cp_class(0x1F600) & kSymbol);  // emoji
  EXPECT_TRUE(cp_class(0x0301) & kMark);
  EXPECT_TRUE(cp_class(0x20000) & kLetter);  // CJK extension B (a First/Last range)
  EXPECT_EQ(cp_class(0x0378), 0);            // unassigned
  EXPECT_EQ(cp_class(kInvalidBase + 0xFF), 0);
}

namespace kvtax::tok {
extern const UnicodeRun kUnicodeRuns[];
extern const size_t kUnicodeRunCount;
}  // namespace kvtax::tok

TEST(TokUnicode, GeneratedTableIsWellFormed) {
  ASSERT_GT(kUnicodeRunCount, 1000u);
  EXPECT_EQ(kUnicodeRuns[0].first, 0u);
  for (size_t i = 1; i < kUnicodeRunCount; ++i) {
    ASSERT_LT(kUnicodeRuns[i - 1].first, kUnicodeRuns[i].first) << i;
    ASSERT_NE(kUnicodeRuns[i - 1].cls, kUnicodeRuns[i].cls) << i;  // runs are maximal
    const uint8_t cat = kUnicodeRuns[i].cls & 0x7F;
    ASSERT_TRUE(cat == 0 || (cat & (cat - 1)) == 0) << i;  // at most one category bit
  }
  EXPECT_LT(kUnicodeRuns[kUnicodeRunCount - 1].first, 0x110000u);
}

TEST(TokUnicode, DecodesLeniently) {
  uint32_t cp;
  EXPECT_EQ(decode_utf8("\xC3\xA9", 0, cp), 2u);
  EXPECT_EQ(cp, 0xE9u);
  EXPECT_EQ(decode_utf8("\xF0\x9F\x98\x80", 0, cp), 4u);
  EXPECT_EQ(cp, 0x1F600u);
  for (std::string_view bad : {"\x80", "\xC3", "\xC0\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xE2\x82", "\xFF"}) {
    EXPECT_EQ(decode_utf8(bad, 0, cp), 1u) << bad.size();
    EXPECT_EQ(cp, kInvalidBase + uint8_t(bad[0]));
  }
  EXPECT_EQ(utf8_complete_prefix("ab\xE2\x82"), 2u);
  EXPECT_EQ(utf8_complete_prefix("ab\xE2\x82\xAC"), 5u);
  EXPECT_EQ(utf8_complete_prefix("a\xF0"), 1u);
  EXPECT_EQ(utf8_complete_prefix(""), 0u);
}

TEST(TokByteAlphabet, RoundTripsEveryByte) {
  EXPECT_EQ(byte_to_alphabet(' '), "\xC4\xA0");  // Ġ
  EXPECT_EQ(byte_to_alphabet('\n'), "\xC4\x8A");  // Ċ
  EXPECT_EQ(byte_to_alphabet('a'), "a");
  std::string all, mapped;
  for (int b = 0; b < 256; ++b) { all += char(b); mapped += byte_to_alphabet(uint8_t(b)); }
  EXPECT_EQ(alphabet_to_bytes(mapped), all);
}

TEST(TokPretokenize, Gpt2) {
  EXPECT_EQ(words(PreTokenizer::gpt2, "Hello world's  3.14 !!x"),
            (V{"Hello", " world", "'s", " ", " 3", ".", "14", " !!", "x"}));
  EXPECT_EQ(words(PreTokenizer::gpt2, "a   \n b"), (V{"a", "   \n", " b"}));
  EXPECT_EQ(words(PreTokenizer::gpt2, "I'M"), (V{"I", "'", "M"}));  // case-sensitive contractions
  EXPECT_EQ(words(PreTokenizer::gpt2, "end  "), (V{"end", "  "}));
}

TEST(TokPretokenize, Llama3) {
  EXPECT_EQ(words(PreTokenizer::llama3, "I'M 12345 x\n\n  y"), (V{"I", "'M", " ", "123", "45", " x", "\n\n", " ", " y"}));
  EXPECT_EQ(words(PreTokenizer::llama3, "(hi) ...\r\nok"), (V{"(hi", ")", " ...\r\n", "ok"}));
  EXPECT_EQ(words(PreTokenizer::llama3, "\tword  \n\tz"), (V{"\tword", "  \n", "\tz"}));
  EXPECT_EQ(words(PreTokenizer::qwen2, "x 123"), (V{"x", " ", "1", "2", "3"}));
  // Invalid UTF-8 bytes are "other" characters and never lost.
  EXPECT_EQ(words(PreTokenizer::llama3, "a\xFF\xFE b"), (V{"a", "\xFF\xFE", " b"}));
}

TEST(TokSpm, MergesByScoreAndFallsBackToBytes) {
  Tokenizer t(spm_vocab());
  const int32_t base = 3 + 256;
  EXPECT_EQ(t.kind(), TokenizerKind::spm);
  EXPECT_TRUE(t.add_bos());
  EXPECT_EQ(t.encode("hello", false, false), (Ids{base + 12}));
  EXPECT_EQ(t.encode("hello", true, false), (Ids{1, base + 12}));
  EXPECT_EQ(t.encode("hello world", false, false), (Ids{base + 12, base + 15, base + 16}));
  // 'é' is not a piece: its two UTF-8 bytes come out as byte tokens.
  EXPECT_EQ(t.encode("he\xC3\xA9", false, false), (Ids{base + 10, 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(t.decode(t.encode("hello world", true, false)), "hello world");
  EXPECT_EQ(t.decode(t.encode("he\xC3\xA9 old", true, false)), "he\xC3\xA9 old");
  EXPECT_EQ(t.encode("", false, false), Ids{});
  EXPECT_EQ(t.encode("", true, false), Ids{1});
}

TEST(TokSpm, SpecialTokensOnlyWhenParsed) {
  Tokenizer t(spm_vocab());
  const Ids plain = t.encode("</s>", false, false);
  EXPECT_GT(plain.size(), 1u);
  EXPECT_EQ(t.decode(plain), "</s>");
  EXPECT_EQ(t.encode("hello</s>", false, true), (Ids{3 + 256 + 12, 2}));
  EXPECT_TRUE(t.is_eog(2));
  EXPECT_EQ(t.decode(Ids{1, 3 + 256 + 12, 2}), "hello");
  EXPECT_EQ(t.decode(Ids{1, 3 + 256 + 12, 2}, true), "<s> hello</s>");
  EXPECT_THROW(t.decode(Ids{999999}), Error);
}

TEST(TokBpe, MergesByRank) {
  Tokenizer t(bpe_vocab());
  EXPECT_EQ(t.kind(), TokenizerKind::bpe);
  EXPECT_TRUE(t.add_bos());  // Llama 3 default
  const int32_t hello = 256 + 3, world = 256 + 8;
  EXPECT_EQ(t.encode("hello world", false, false), (Ids{hello, world}));
  EXPECT_EQ(t.encode("hello world", true, false), (Ids{t.bos(), hello, world}));
  // "hel" has no full merge: h+e then l stays a byte.
  EXPECT_EQ(t.encode("hel", false, false), (Ids{256, 'l'}));
  EXPECT_EQ(t.decode(t.encode("hello world\n\xF0\x9F\x98\x80 \xFF", false, false)), "hello world\n\xF0\x9F\x98\x80 \xFF");
}

TEST(TokBpe, SpecialAndUserDefinedTokens) {
  Tokenizer t(bpe_vocab());
  const int32_t eot = t.find_token("<|eot_id|>"), tool = t.find_token("<tool>");
  ASSERT_GE(eot, 0);
  EXPECT_EQ(t.eot(), eot);
  EXPECT_TRUE(t.is_eog(eot));
  EXPECT_EQ(t.encode("hello<|eot_id|>", false, true), (Ids{256 + 3, eot}));
  const Ids plain = t.encode("hello<|eot_id|>", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), eot), 0);
  // User-defined tokens are matched even without parse_special.
  EXPECT_EQ(t.encode("<tool>hello", false, false), (Ids{tool, 256 + 3}));
  EXPECT_EQ(t.token_piece(eot), "");
  EXPECT_EQ(t.token_piece(eot, true), "<|eot_id|>");
  EXPECT_EQ(t.token_piece(256 + 8), " world");
}

TEST(TokBpe, RandomBytesRoundTrip) {
  Tokenizer t(bpe_vocab());
  std::mt19937 rng(7);
  for (int iter = 0; iter < 200; ++iter) {
    std::string s(rng() % 40, '\0');
    for (char& c : s) c = char(rng() % 4 == 0 ? "hello wr\n"[rng() % 9] : rng() & 0xFF);
    EXPECT_EQ(t.decode(t.encode(s, false, false)), s);
  }
}

TEST(TokVocab, RejectsInconsistentVocabularies) {
  Vocab v = spm_vocab();
  v.bos = 100000;
  EXPECT_THROW(Tokenizer{v}, Error);
  v = spm_vocab();
  v.scores.pop_back();
  EXPECT_THROW(Tokenizer{v}, Error);
  v = bpe_vocab();
  v.pre = "no-such-pretokenizer";
  EXPECT_THROW(Tokenizer{v}, Error);
  v = bpe_vocab();
  v.merges.push_back("nospace");
  EXPECT_THROW(Tokenizer{v}, Error);
  EXPECT_THROW(Tokenizer{Vocab{}}, Error);
}

TEST(TokVocab, OddButValidVocabularies) {
  // A merge whose result is not a token: the pair merges, then falls back to its bytes.
  Vocab v;
  v.kind = TokenizerKind::bpe;
  v.pre = "gpt-2";
  for (int b = 0; b < 256; ++b) v.tokens.emplace_back(byte_to_alphabet(uint8_t(b)));
  v.merges = {"a b", "ab c"};
  v.tokens.push_back("abc");
  v.tokens.push_back("");     // empty text: never matched
  v.tokens.push_back("abc");  // duplicate: the later id wins lookups
  Tokenizer t(v);
  EXPECT_EQ(t.encode("ab", false, false), (Ids{'a', 'b'}));
  EXPECT_EQ(t.encode("abc", false, false), (Ids{258}));
  EXPECT_EQ(t.find_token("abc"), 258);
  EXPECT_EQ(t.find_token(""), -1);
  EXPECT_EQ(t.decode(Ids{257, 256}), "abc");

  // SPM without byte tokens: unknown characters become <unk>.
  Vocab s;
  s.kind = TokenizerKind::spm;
  s.tokens = {"<unk>", "\xE2\x96\x81", "a"};
  s.types = {int32_t(TokenType::unknown), 1, 1};
  s.unk = 0;
  s.add_bos = false;
  Tokenizer ts(s);
  EXPECT_EQ(ts.encode("a\xC3\xA9", true, false), (Ids{1, 2, 0, 0}));
  EXPECT_EQ(ts.decode(Ids{1, 2, 0}), "a");
}
