#pragma once
// Text <-> token ids, matching llama.cpp's tokenizers for SPM ("llama") and byte-level BPE ("gpt2")
// vocabularies. Immutable after construction, so one instance can be shared by threads.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/flat_map.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/vocab.h"

namespace kvtax::gguf { class File; }

namespace kvtax::tok {

class Tokenizer {
 public:
  // Throws kvtax::Error when the vocabulary is inconsistent (bad ids, wrong array lengths, ...).
  explicit Tokenizer(Vocab v);
  Tokenizer(const Tokenizer&) = delete;  // lookup tables point into the vocabulary strings
  Tokenizer& operator=(const Tokenizer&) = delete;
  // Reads tokenizer.ggml.* (and general.name); Error if the file has no tokenizer.
  static std::unique_ptr<Tokenizer> from_gguf(const gguf::File& f);
  static Vocab vocab_from_gguf(const gguf::File& f);

  // add_special: prepend BOS / append EOS as the vocabulary asks (add_bos / add_eos).
  // parse_special: text of control tokens (e.g. "<|eot_id|>") becomes that token; user-defined
  // tokens are always matched as whole tokens, as Hugging Face tokenizers do.
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;

  // Concatenated pieces; control tokens are rendered only when `special`. For SPM vocabularies
  // with a space prefix, the space added in front of the first word is removed again.
  std::string decode(std::span<const int32_t> ids, bool special = false) const;
  // Bytes of one token (may be a partial UTF-8 sequence: see utf8_complete_prefix).
  std::string token_piece(int32_t id, bool special = false) const;
  // Raw vocabulary text of a token.
  const std::string& token_text(int32_t id) const;
  // Id of the token whose text is exactly `text`, or -1.
  int32_t find_token(std::string_view text) const;

  int32_t n_vocab() const { return int32_t(v_.tokens.size()); }
  TokenizerKind kind() const { return v_.kind; }
  PreTokenizer pre_tokenizer() const { return pre_; }
  int32_t bos() const { return v_.bos; }
  int32_t eos() const { return v_.eos; }
  int32_t eot() const { return v_.eot; }
  int32_t unk() const { return v_.unk; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  bool add_space_prefix() const { return add_space_prefix_; }
  bool is_eog(int32_t id) const;  // end of generation: EOS, EOT, EOM and similar
  bool is_control(int32_t id) const;
  const std::vector<int32_t>& eog_ids() const { return eog_; }

 private:
  struct Fragment { bool is_token; int32_t token; size_t begin, end; };
  void split_special(std::string_view text, bool parse_special, std::vector<Fragment>& out) const;
  void encode_spm(std::string_view text, std::vector<int32_t>& out) const;
  void spm_segment(std::string_view text, std::vector<int32_t>& out) const;
  void encode_bpe(std::string_view text, std::vector<int32_t>& out) const;
  void bpe_word(std::string_view word, std::vector<int32_t>& out) const;
  void emit_bytes(std::string_view bytes, std::vector<int32_t>& out) const;
  TokenType type(int32_t id) const;

  Vocab v_;
  PreTokenizer pre_ = PreTokenizer::none;
  bool add_bos_ = false, add_eos_ = false, add_space_prefix_ = false, ignore_merges_ = false;
  // SPM: no token has '▁' right after another character, so merges never cross the start of a
  // space run and each space-led segment can be merged on its own (a small heap instead of one
  // over the whole text; the result is identical).
  bool spm_segment_at_spaces_ = false;
  TextIdMap text_to_id_;                  // over v_.tokens
  std::vector<std::string> pieces_;       // decoded bytes per id (control tokens: their text)
  std::vector<int32_t> byte_token_;       // byte -> token for fallback, -1 if none
  std::vector<int32_t> specials_;         // control/user-defined/unknown ids, longest text first
  std::vector<std::vector<int32_t>> specials_by_byte_;  // first byte -> specials_ entries, longest first
  std::vector<uint8_t> rstrip_;           // per id: eat whitespace after this special token
  std::vector<int32_t> eog_;
  // BPE: (left id, right id) -> merged id, ordered by rank. Ids >= n_vocab name merge results that
  // are not vocabulary tokens (kept so merging behaves like the string-based reference).
  PairMap merges_;
  std::vector<std::string> extra_texts_;  // texts of ids n_vocab, n_vocab+1, ...
  std::vector<int32_t> byte_symbol_;      // BPE: byte -> initial symbol id
};

}  // namespace kvtax::tok
