// SentencePiece-style merging as llama.cpp does it: start from UTF-8 characters, repeatedly merge
// the adjacent pair whose concatenation is the vocabulary token with the highest score (leftmost
// on ties), then fall back to byte tokens for characters that are not tokens.
#include <functional>

#include "tokenizer/symbol_merge.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace kvtax::tok {

namespace {

struct Symbol {
  int32_t prev, next;
  uint32_t off, len;  // bytes of the text; len 0 = merged away
};

struct Bigram {
  float score;
  int32_t left, right;
  uint32_t len;
  bool operator<(const Bigram& o) const {  // priority_queue pops the "largest"
    return score < o.score || (score == o.score && left > o.left);
  }
};

}  // namespace

void Tokenizer::encode_spm(std::string_view text, std::vector<int32_t>& out) const {
  if (!spm_segment_at_spaces_) return spm_segment(text, out);
  const std::string_view space = "\xE2\x96\x81";
  size_t begin = 0;
  for (size_t p = text.find(space, 1); p != std::string_view::npos; p = text.find(space, p + space.size())) {
    if (p >= space.size() && text.compare(p - space.size(), space.size(), space) == 0) continue;  // inside a run
    spm_segment(text.substr(begin, p - begin), out);
    begin = p;
  }
  spm_segment(text.substr(begin), out);
}

void Tokenizer::spm_segment(std::string_view text, std::vector<int32_t>& out) const {
  thread_local std::vector<Symbol> sym;
  sym.clear();
  sym.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    uint32_t cp;
    const size_t len = decode_utf8(text, i, cp);
    const int32_t idx = int32_t(sym.size());
    sym.push_back({idx - 1, i + len == text.size() ? -1 : idx + 1, uint32_t(i), uint32_t(len)});
    i += len;
  }
  if (sym.empty()) return;

  thread_local std::vector<Bigram> heap;  // max-heap by operator<
  merge_symbols(
      sym, heap, std::less<>(),
      [&](int32_t l, int32_t r, Bigram& out) {
        const uint32_t len = sym[size_t(l)].len + sym[size_t(r)].len;
        const int32_t id = find_token(text.substr(sym[size_t(l)].off, len));
        if (id >= 0) out = {v_.scores.empty() ? 0.0f : v_.scores[size_t(id)], l, r, len};
        return id >= 0;
      },
      [](const Bigram& b, const Symbol& l, const Symbol& r) { return l.len + r.len == b.len; });

  for (int32_t i = 0; i != -1; i = sym[size_t(i)].next) {
    const std::string_view piece = text.substr(sym[size_t(i)].off, sym[size_t(i)].len);
    const int32_t id = find_token(piece);
    if (id >= 0) out.push_back(id);
    else emit_bytes(piece, out);
  }
}

}  // namespace kvtax::tok
