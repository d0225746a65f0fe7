#pragma once
// Code point classification (general-category class + White_Space) and lenient UTF-8 decoding
// for the hand-written pre-tokenizers.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvtax::tok {

// Class bits; a code point has exactly one category bit (or none if unassigned) plus maybe SPACE.
enum CpClass : uint8_t {
  kLetter = 1, kNumber = 2, kPunct = 4, kSymbol = 8, kMark = 16, kSeparator = 32, kOther = 64, kSpace = 128,
};

struct UnicodeRun {
  uint32_t first;  // the run lasts until the next entry's `first`
  uint8_t cls;
};

// Class bits of a code point; code points above U+10FFFF (and our invalid-byte markers) get 0.
uint8_t cp_class(uint32_t cp);

// Marker for one byte that is not part of valid UTF-8: kInvalidBase + byte. Outside Unicode,
// so it classifies as "other" and never merges with letters, digits or spaces.
constexpr uint32_t kInvalidBase = 0x110000;

// Decodes one code point at s[i] and returns its length in bytes (1..4). Overlong forms,
// surrogates, truncated sequences and stray continuation bytes decode as kInvalidBase + byte
// with length 1, so every byte of any input is covered exactly once.
size_t decode_utf8(std::string_view s, size_t i, uint32_t& cp);

// Appends the UTF-8 encoding of a valid code point (< 0x110000, not a surrogate).
void append_utf8(std::string& out, uint32_t cp);

// Length of the longest prefix of `s` that does not end inside an incomplete UTF-8 sequence:
// for streaming, emit s[0, n) now and keep the rest until more bytes arrive.
size_t utf8_complete_prefix(std::string_view s);

}  // namespace kvtax::tok
