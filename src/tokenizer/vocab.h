#pragma once
// Everything a tokenizer needs, as plain data: filled from GGUF "tokenizer.ggml.*" metadata or
// built by hand in tests and tools.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kvtax::tok {

// tokenizer.ggml.model: "llama" = SentencePiece-style, "gpt2" = byte-level BPE.
enum class TokenizerKind { spm, bpe };

// Values of tokenizer.ggml.token_type (the GGUF convention).
enum class TokenType : int32_t {
  undefined = 0, normal = 1, unknown = 2, control = 3, user_defined = 4, unused = 5, byte = 6,
};

struct Vocab {
  TokenizerKind kind = TokenizerKind::spm;
  std::string pre = "default";          // tokenizer.ggml.pre (BPE pre-tokenizer name)
  std::string model_name;               // general.name: a few models need per-token tweaks
  std::vector<std::string> tokens;      // id -> text (SPM: '▁' for space; BPE: GPT-2 byte alphabet)
  std::vector<float> scores;            // SPM merge priority; empty = all 0
  std::vector<int32_t> types;           // TokenType per id; empty = all normal
  std::vector<std::string> merges;      // BPE: "left right", in rank order
  int32_t bos = -1, eos = -1, eot = -1, eom = -1, unk = -1, pad = -1;  // -1 = none
  // Unset = the default for `kind` (SPM: add_bos, space prefix; BPE: neither, except Llama 3 BOS).
  std::optional<bool> add_bos, add_eos, add_space_prefix;
};

}  // namespace kvtax::tok
