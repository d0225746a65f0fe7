// Byte-level BPE: cut text into words with the vocabulary's pre-tokenizer, then in each word
// start from one symbol per byte and apply merges lowest rank first (leftmost on ties).
#include <algorithm>
#include <functional>

#include "tokenizer/byte_alphabet.h"
#include "tokenizer/symbol_merge.h"
#include "tokenizer/tokenizer.h"

namespace kvtax::tok {

namespace {

struct Symbol {
  int32_t prev, next;
  int32_t id;         // token id, or >= n_vocab for a merge result missing from the vocabulary
  uint32_t off, len;  // original bytes; len 0 = merged away
};

struct Pair {
  int32_t rank, left, right;
  int32_t left_id, right_id, merged;
  bool operator>(const Pair& o) const { return rank > o.rank || (rank == o.rank && left > o.left); }
};

}  // namespace

void Tokenizer::encode_bpe(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<Word> words;
  words.reserve(text.size() / 4 + 1);
  pretokenize(pre_, text, words);
  std::string mapped;
  for (const Word& w : words) {
    const std::string_view word = text.substr(w.begin, w.len);
    if (ignore_merges_) {
      mapped.clear();
      for (unsigned char c : word) mapped += byte_to_alphabet(c);
      if (int32_t id = find_token(mapped); id >= 0) {
        out.push_back(id);
        continue;
      }
    }
    bpe_word(word, out);
  }
}

void Tokenizer::bpe_word(std::string_view word, std::vector<int32_t>& out) const {
  // Single-byte words need no merging.
  if (word.size() == 1) {
    const int32_t id = byte_symbol_[static_cast<unsigned char>(word[0])];
    if (id < n_vocab()) out.push_back(id);
    else emit_bytes(word, out);
    return;
  }
  thread_local std::vector<Symbol> sym;
  thread_local std::vector<Pair> heap;
  sym.clear();
  const int32_t n = int32_t(word.size());
  for (int32_t i = 0; i < n; ++i)
    sym.push_back({i - 1, i + 1 == n ? -1 : i + 1, byte_symbol_[static_cast<unsigned char>(word[size_t(i)])], uint32_t(i), 1});

  merge_symbols(
      sym, heap, std::greater<>(),
      [&](int32_t l, int32_t r, Pair& out) {
        const int32_t a = sym[size_t(l)].id, b = sym[size_t(r)].id;
        const PairMap::Value* m = merges_.find(a, b);
        if (m) out = {m->rank, l, r, a, b, m->merged};
        return m != nullptr;
      },
      [](const Pair& p, Symbol& l, const Symbol& r) {
        if (l.id != p.left_id || r.id != p.right_id) return false;
        l.id = p.merged;
        return true;
      });

  for (int32_t i = 0; i != -1; i = sym[size_t(i)].next) {
    const Symbol& s = sym[size_t(i)];
    if (s.id < n_vocab()) out.push_back(s.id);
    else emit_bytes(word.substr(s.off, s.len), out);
  }
}

}  // namespace kvtax::tok
