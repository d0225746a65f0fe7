// Fuzzes encode/decode with arbitrary bytes (invalid UTF-8 included) on every fixture vocabulary
// plus two small built-in ones. The first input byte picks the tokenizer and the flags.
// Vocabularies: $KVTAX_FUZZ_VOCAB_DIR, else <shared>/fixtures/vocab, else only the built-in ones.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "tokenizer/byte_alphabet.h"
#include "tokenizer/tokenizer.h"

using namespace kvtax;
using namespace kvtax::tok;

namespace {

Vocab builtin_spm() {
  Vocab v;
  v.kind = TokenizerKind::spm;
  v.tokens = {"<unk>", "<s>", "</s>"};
  v.types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    v.tokens.push_back(buf);
    v.types.push_back(6);
  }
  for (const char* t : {"\xE2\x96\x81", "a", "b", "\xE2\x96\x81" "a", "ab", "\xE2\x96\x81" "ab", "\xE2\x96\x81\xE2\x96\x81"}) {
    v.tokens.push_back(t);
    v.types.push_back(1);
  }
  v.scores.assign(v.tokens.size(), 0.0f);
  for (size_t i = 0; i < v.scores.size(); ++i) v.scores[i] = -float(i % 7);
  v.bos = 1;
  v.eos = 2;
  v.unk = 0;
  return v;
}

Vocab builtin_bpe() {
  Vocab v;
  v.kind = TokenizerKind::bpe;
  v.pre = "qwen2";
  for (int b = 0; b < 256; ++b) v.tokens.emplace_back(byte_to_alphabet(uint8_t(b)));
  v.merges = {"a b", "ab c", "\xC4\xA0 a", "\xC4\xA0" "a b", "1 2", "\xC4\x8A \xC4\x8A"};
  for (auto& m : v.merges) {
    std::string t = m;
    t.erase(t.find(' '), 1);
    v.tokens.push_back(t);
  }
  for (const char* t : {"<|im_start|>", "<|im_end|>", "<tool>"}) v.tokens.push_back(t);
  v.types.assign(v.tokens.size(), 1);
  v.types[v.types.size() - 3] = 3;
  v.types[v.types.size() - 2] = 3;
  v.types[v.types.size() - 1] = 4;
  return v;
}

struct Tok {
  std::unique_ptr<Tokenizer> t;
  bool lossless;  // decode(encode(x)) == x for every x
};

std::vector<Tok>& tokenizers() {
  static std::vector<Tok> all = [] {
    std::vector<Tok> v;
    v.push_back({std::make_unique<Tokenizer>(builtin_spm()), false});
    v.push_back({std::make_unique<Tokenizer>(builtin_bpe()), true});
    const char* env = std::getenv("KVTAX_FUZZ_VOCAB_DIR");
    const std::filesystem::path dir = env ? env : KVTAX_SHARED_DIR "/fixtures/vocab";
    for (const char* name : {"llama-spm", "llama-bpe", "qwen2", "gpt-2", "phi-3"}) {
      const auto p = dir / ("ggml-vocab-" + std::string(name) + ".gguf");
      if (!std::filesystem::exists(p)) continue;
      const auto f = gguf::File::open(p.string());
      auto t = Tokenizer::from_gguf(*f);
      const bool bpe = t->kind() == TokenizerKind::bpe;
      v.push_back({std::move(t), bpe});
    }
    std::fprintf(stderr, "tokenizer_fuzz: %zu tokenizers\n", v.size());
    return v;
  }();
  return all;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  auto& toks = tokenizers();
  const Tok& tk = toks[data[0] % toks.size()];
  const bool add_special = data[0] & 0x40, parse_special = data[0] & 0x80;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  const Tokenizer& t = *tk.t;

  const auto ids = t.encode(text, add_special, parse_special);
  for (int32_t id : ids) {
    if (id < 0 || id >= t.n_vocab()) __builtin_trap();
  }
  if (add_special && t.add_bos() && (ids.empty() || ids.front() != t.bos())) __builtin_trap();
  std::string pieces;
  for (int32_t id : ids) pieces += t.token_piece(id, true);
  const std::string decoded = t.decode(ids, true);
  if (tk.lossless) {
    // Byte-level BPE loses nothing: control tokens are rendered back as their text.
    const std::string want = (add_special && t.add_bos() ? t.token_text(t.bos()) : "") + text;
    if (decoded != want || pieces != want) __builtin_trap();
  }
  return 0;
}
