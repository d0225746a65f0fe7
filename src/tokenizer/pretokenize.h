#pragma once
// Hand-written equivalents of the pre-tokenizer regexes byte-level BPE vocabularies use to cut
// text into words before merging (std::regex has no \p{..} classes and is far too slow).
#include <cstdint>
#include <string_view>
#include <vector>

namespace kvtax::tok {

enum class PreTokenizer {
  none,    // whole text is one word
  gpt2,    // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  llama3,  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  qwen2,   // as llama3 but \p{N} (one digit per word)
};

struct Word {
  uint32_t begin, len;  // byte range in the text
};

// Appends the words of `text` (which together cover it exactly). Invalid UTF-8 bytes are
// single "other" characters, so any byte string splits without error.
void pretokenize(PreTokenizer kind, std::string_view text, std::vector<Word>& out);

}  // namespace kvtax::tok
