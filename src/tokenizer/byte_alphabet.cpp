#include "tokenizer/byte_alphabet.h"

#include <array>

#include "tokenizer/unicode.h"

namespace kvtax::tok {

namespace {

bool printable(int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

struct Alphabet {
  std::array<std::string, 256> utf8;
  std::array<int16_t, 0x200> byte_of;  // code point -> byte, -1 if not in the alphabet
  Alphabet() {
    byte_of.fill(-1);
    int next = 0x100;
    for (int b = 0; b < 256; ++b) {
      const uint32_t cp = printable(b) ? uint32_t(b) : uint32_t(next++);
      append_utf8(utf8[b], cp);
      byte_of[cp] = int16_t(b);
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet a;
  return a;
}

}  // namespace

std::string_view byte_to_alphabet(uint8_t b) { return alphabet().utf8[b]; }

void append_alphabet_bytes(std::string& out, std::string_view text) {
  const Alphabet& a = alphabet();
  for (size_t i = 0; i < text.size();) {
    uint32_t cp;
    const size_t len = decode_utf8(text, i, cp);
    if (cp < a.byte_of.size() && a.byte_of[cp] >= 0) out += char(a.byte_of[cp]);
    else out.append(text.substr(i, len));
    i += len;
  }
}

}  // namespace kvtax::tok
