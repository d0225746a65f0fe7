#include "tokenizer/pretokenize.h"

#include "tokenizer/unicode.h"

namespace kvtax::tok {

namespace {

// The text decoded once: code point, class bits and byte offset per character.
struct Chars {
  std::vector<uint32_t> cp;
  std::vector<uint8_t> cls;
  std::vector<uint32_t> off;  // off[i] = byte offset of char i; off[n] = text size
  size_t n = 0;

  explicit Chars(std::string_view s) {
    cp.reserve(s.size());
    cls.reserve(s.size());
    off.reserve(s.size() + 1);
    for (size_t i = 0; i < s.size();) {
      uint32_t c;
      const size_t len = decode_utf8(s, i, c);
      cp.push_back(c);
      cls.push_back(cp_class(c));
      off.push_back(uint32_t(i));
      i += len;
    }
    n = cp.size();
    off.push_back(uint32_t(s.size()));
  }
  // Out-of-range positions behave as the end of text: no class, no character.
  bool letter(size_t i) const { return i < n && (cls[i] & kLetter); }
  bool number(size_t i) const { return i < n && (cls[i] & kNumber); }
  bool space(size_t i) const { return i < n && (cls[i] & kSpace); }
  // [^\s\p{L}\p{N}]
  bool other(size_t i) const { return i < n && !(cls[i] & (kSpace | kLetter | kNumber)); }
  uint32_t at(size_t i) const { return i < n ? cp[i] : 0xFFFFFFFFu; }
  bool crlf(size_t i) const { return at(i) == '\r' || at(i) == '\n'; }
};

uint32_t ascii_lower(uint32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

// Length in chars of a contraction ('s 't 're 've 'm 'll 'd) at i, or 0.
size_t contraction(const Chars& t, size_t i, bool ignore_case) {
  if (t.at(i) != '\'') return 0;
  const auto low = [&](size_t k) { return ignore_case ? ascii_lower(t.at(k)) : t.at(k); };
  const uint32_t a = low(i + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  const uint32_t b = low(i + 2);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

// \s+(?!\S)|\s+ at a whitespace char: the run, minus its last char when a non-space follows
// (that char then prefixes the next word), unless the run is a single char.
size_t space_run(const Chars& t, size_t i) {
  size_t j = i;
  while (t.space(j)) ++j;
  const size_t n = j - i;
  return (n > 1 && j < t.n) ? n - 1 : n;
}

size_t match_gpt2(const Chars& t, size_t i) {
  if (size_t c = contraction(t, i, false)) return c;
  const size_t o = t.at(i) == ' ' ? 1 : 0;  // optional leading space
  size_t j = i + o;
  if (t.letter(j)) { while (t.letter(j)) ++j; return j - i; }
  if (t.number(j)) { while (t.number(j)) ++j; return j - i; }
  if (t.other(j)) { while (t.other(j)) ++j; return j - i; }
  if (t.space(i)) return space_run(t, i);
  return 1;
}

size_t match_llama3(const Chars& t, size_t i, size_t max_digits) {
  if (size_t c = contraction(t, i, true)) return c;
  // [^\r\n\p{L}\p{N}]?\p{L}+
  size_t j = i;
  if (!t.letter(j) && !t.crlf(j) && !t.number(j) && t.letter(j + 1)) ++j;
  if (t.letter(j)) { while (t.letter(j)) ++j; return j - i; }
  // \p{N}{1,max}
  if (t.number(i)) {
    j = i;
    while (t.number(j) && j - i < max_digits) ++j;
    return j - i;
  }
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  j = i + (t.at(i) == ' ' ? 1 : 0);
  if (t.other(j)) {
    while (t.other(j)) ++j;
    while (t.crlf(j)) ++j;
    return j - i;
  }
  // \s*[\r\n]+ : ends after the last CR/LF of the whitespace run
  j = i;
  size_t last_crlf = 0;
  while (t.space(j)) {
    if (t.crlf(j)) last_crlf = j + 1;
    ++j;
  }
  if (last_crlf) return last_crlf - i;
  if (t.space(i)) return space_run(t, i);
  return 1;
}

}  // namespace

void pretokenize(PreTokenizer kind, std::string_view text, std::vector<Word>& out) {
  if (text.empty()) return;
  if (kind == PreTokenizer::none) {
    out.push_back({0, uint32_t(text.size())});
    return;
  }
  const Chars t(text);
  for (size_t i = 0; i < t.n;) {
    size_t len = 1;
    switch (kind) {
      case PreTokenizer::gpt2: len = match_gpt2(t, i); break;
      case PreTokenizer::llama3: len = match_llama3(t, i, 3); break;
      case PreTokenizer::qwen2: len = match_llama3(t, i, 1); break;
      case PreTokenizer::none: break;
    }
    out.push_back({t.off[i], t.off[i + len] - t.off[i]});
    i += len;
  }
}

}  // namespace kvtax::tok
