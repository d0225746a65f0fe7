#pragma once
// GPT-2's reversible byte <-> printable-character mapping used by byte-level BPE vocabularies:
// printable Latin-1 bytes map to themselves, the other 68 bytes to U+0100.. in byte order.
#include <cstdint>
#include <string>
#include <string_view>

namespace kvtax::tok {

// UTF-8 of the alphabet character for byte b (1 or 2 bytes).
std::string_view byte_to_alphabet(uint8_t b);
// Appends the bytes named by alphabet characters in `text`; characters outside the alphabet (and
// invalid UTF-8) are copied unchanged.
void append_alphabet_bytes(std::string& out, std::string_view text);
inline std::string alphabet_to_bytes(std::string_view text) {
  std::string s;
  append_alphabet_bytes(s, text);
  return s;
}

}  // namespace kvtax::tok
