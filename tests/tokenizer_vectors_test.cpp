// llama.cpp's tokenizer test vectors (fixtures/vocab/*.inp/.out): every input must encode to exactly
// the expected ids with add_special = false, parse_special = false, as tests/test-tokenizer-0 does.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

using namespace kvtax;

namespace {

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Case {
  std::string text;
  std::vector<int32_t> ids;
};

// Inputs are separated by "\n__ggml_vocab_test__\n"; outputs are one line of ids per input.
std::vector<Case> read_cases(const std::filesystem::path& inp, const std::filesystem::path& out) {
  const std::string raw = slurp(inp);
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t pos = 0; pos < raw.size();) {
    const size_t next = raw.find(sep, pos);
    if (next == std::string::npos) { texts.push_back(raw.substr(pos)); break; }
    texts.push_back(raw.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::vector<Case> cases;
  std::istringstream lines(slurp(out));
  std::string line;
  for (size_t i = 0; std::getline(lines, line); ++i) {
    Case c;
    if (i < texts.size()) c.text = texts[i];
    std::istringstream ids(line);
    for (int32_t id; ids >> id;) c.ids.push_back(id);
    cases.push_back(std::move(c));
  }
  EXPECT_EQ(cases.size(), texts.size()) << inp;
  return cases;
}

void check_vocab(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::path(KVTAX_SHARED_DIR) / "fixtures" / "vocab";
  const auto gguf_path = dir / ("ggml-vocab-" + name + ".gguf");
  if (!std::filesystem::exists(gguf_path)) GTEST_SKIP() << "../shared absent: " << gguf_path;
  const auto file = gguf::File::open(gguf_path.string());
  const auto tok = tok::Tokenizer::from_gguf(*file);
  const auto cases = read_cases(gguf_path.string() + ".inp", gguf_path.string() + ".out");
  ASSERT_FALSE(cases.empty());
  int failures = 0;
  for (const auto& c : cases) {
    const auto got = tok->encode(c.text, false, false);
    EXPECT_EQ(got, c.ids) << "input: '" << c.text << "'";
    failures += got != c.ids;
    // Detokenizing gives back the input wherever the vocabulary can represent it.
    if (got == c.ids) {
      EXPECT_EQ(tok->decode(got), c.text) << "input: '" << c.text << "'";
    }
  }
  EXPECT_EQ(failures, 0) << name << ": " << failures << " of " << cases.size() << " vectors differ";
}

}  // namespace

TEST(TokenizerVectors, LlamaSpm) { check_vocab("llama-spm"); }
TEST(TokenizerVectors, LlamaBpe) { check_vocab("llama-bpe"); }
TEST(TokenizerVectors, Qwen2) { check_vocab("qwen2"); }
TEST(TokenizerVectors, Gpt2) { check_vocab("gpt-2"); }
TEST(TokenizerVectors, Phi3) { check_vocab("phi-3"); }

// Merging space-led segments separately must give exactly what merging the whole text does: a
// token with '▁' after another character disables the shortcut, so compare both paths.
TEST(TokenizerVectors, SpmSegmentsMatchWholeText) {
  const std::filesystem::path dir = std::filesystem::path(KVTAX_SHARED_DIR) / "fixtures" / "vocab";
  const auto path = dir / "ggml-vocab-llama-spm.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "../shared absent: " << path;
  const auto file = gguf::File::open(path.string());
  tok::Vocab v = tok::Tokenizer::vocab_from_gguf(*file);
  const tok::Tokenizer fast(v);
  v.tokens.push_back("\x01\xE2\x96\x81\x01");  // never in the text below
  v.scores.push_back(-1e9f);
  v.types.push_back(1);
  const tok::Tokenizer whole(v);
  std::string text = slurp(path.string() + ".inp");
  text += " Hello   world,\n\n  multiple    spaces\t\tand tabs. ▁▁ literal ▁ marks ";
  EXPECT_EQ(fast.encode(text, true, false), whole.encode(text, true, false));
}
