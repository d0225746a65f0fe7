// Vocabulary from GGUF metadata (tokenizer.ggml.* keys written by llama.cpp's converters).
#include <cstdio>

#include "core/error.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace kvtax::tok {

namespace {

// Converters write -1 (as uint32 0xFFFFFFFF) or ids past the vocabulary for "no such token";
// like llama.cpp, such ids are ignored (with a note when the value looks like a real mistake).
int32_t token_id(const gguf::File& f, std::string_view key, size_t n_vocab) {
  const auto v = f.get_int(key);
  if (!v || *v < 0 || *v == 0xFFFFFFFFll) return -1;
  if (uint64_t(*v) >= n_vocab) {
    std::fprintf(stderr, "kvtax: warning: %s: %.*s = %lld is outside the vocabulary (%zu tokens), ignored\n",
                 f.path().c_str(), int(key.size()), key.data(), (long long)*v, n_vocab);
    return -1;
  }
  return int32_t(*v);
}

}  // namespace

Vocab Tokenizer::vocab_from_gguf(const gguf::File& f) {
  const auto model = f.get_string("tokenizer.ggml.model");
  if (!model) fail("{}: no tokenizer in this GGUF (tokenizer.ggml.model is missing)", f.path());
  Vocab v;
  if (*model == "llama") v.kind = TokenizerKind::spm;
  else if (*model == "gpt2") v.kind = TokenizerKind::bpe;
  else fail("{}: unsupported tokenizer model '{}' (supported: llama, gpt2)", f.path(), *model);

  auto tokens = f.get_strings("tokenizer.ggml.tokens");
  if (!tokens || tokens->empty()) fail("{}: tokenizer.ggml.tokens is missing or empty", f.path());
  v.tokens = std::move(*tokens);
  const size_t n = v.tokens.size();
  if (auto s = f.get_f32s("tokenizer.ggml.scores")) {
    if (s->size() < n) fail("{}: tokenizer.ggml.scores has {} entries for {} tokens", f.path(), s->size(), n);
    s->resize(n);
    v.scores = std::move(*s);
  }
  if (auto t = f.get_i32s("tokenizer.ggml.token_type")) {
    if (t->size() < n) fail("{}: tokenizer.ggml.token_type has {} entries for {} tokens", f.path(), t->size(), n);
    t->resize(n);
    v.types = std::move(*t);
  }
  if (v.kind == TokenizerKind::bpe) {
    auto m = f.get_strings("tokenizer.ggml.merges");
    if (!m) fail("{}: BPE tokenizer without tokenizer.ggml.merges", f.path());
    v.merges = std::move(*m);
    v.pre = f.get_string("tokenizer.ggml.pre").value_or("default");
  }
  v.model_name = f.get_string("general.name").value_or("");
  v.bos = token_id(f, "tokenizer.ggml.bos_token_id", n);
  v.eos = token_id(f, "tokenizer.ggml.eos_token_id", n);
  v.eot = token_id(f, "tokenizer.ggml.eot_token_id", n);
  v.eom = token_id(f, "tokenizer.ggml.eom_token_id", n);
  v.unk = token_id(f, "tokenizer.ggml.unknown_token_id", n);
  v.pad = token_id(f, "tokenizer.ggml.padding_token_id", n);
  v.add_bos = f.get_bool("tokenizer.ggml.add_bos_token");
  v.add_eos = f.get_bool("tokenizer.ggml.add_eos_token");
  v.add_space_prefix = f.get_bool("tokenizer.ggml.add_space_prefix");
  return v;
}

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const gguf::File& f) {
  Vocab v = vocab_from_gguf(f);
  try {
    return std::make_unique<Tokenizer>(std::move(v));
  } catch (const Error& e) {
    fail("{}: {}", f.path(), e.what());
  }
}

}  // namespace kvtax::tok
