#include "tokenizer/unicode.h"

#include <algorithm>
#include <array>

namespace kvtax::tok {

extern const UnicodeRun kUnicodeRuns[];
extern const size_t kUnicodeRunCount;

namespace {

// The Basic Multilingual Plane is looked up in a flat table (64 KiB); the rest by binary search.
const std::array<uint8_t, 0x10000>& bmp_table() {
  static const auto table = [] {
    std::array<uint8_t, 0x10000> t{};
    for (size_t r = 0; r < kUnicodeRunCount && kUnicodeRuns[r].first < 0x10000; ++r) {
      const uint32_t end = r + 1 < kUnicodeRunCount ? std::min<uint32_t>(kUnicodeRuns[r + 1].first, 0x10000) : 0x10000;
      for (uint32_t cp = kUnicodeRuns[r].first; cp < end; ++cp) t[cp] = kUnicodeRuns[r].cls;
    }
    return t;
  }();
  return table;
}

}  // namespace

uint8_t cp_class(uint32_t cp) {
  if (cp < 0x10000) return bmp_table()[cp];
  if (cp >= 0x110000) return 0;
  const UnicodeRun* begin = kUnicodeRuns;
  const UnicodeRun* end = kUnicodeRuns + kUnicodeRunCount;
  const UnicodeRun* it = std::upper_bound(begin, end, cp, [](uint32_t v, const UnicodeRun& r) { return v < r.first; });
  return it == begin ? 0 : (it - 1)->cls;
}

size_t decode_utf8(std::string_view s, size_t i, uint32_t& cp) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[i + k]); };
  const uint8_t c = b(0);
  const size_t avail = s.size() - i;
  const auto invalid = [&] { cp = kInvalidBase + c; return size_t{1}; };
  const auto cont = [&](size_t k) { return k < avail && (b(k) & 0xC0) == 0x80; };
  if (c < 0x80) { cp = c; return 1; }
  if (c < 0xC2) return invalid();  // continuation byte or overlong 2-byte lead
  if (c < 0xE0) {
    if (!cont(1)) return invalid();
    cp = (uint32_t(c & 0x1F) << 6) | (b(1) & 0x3F);
    return 2;
  }
  if (c < 0xF0) {
    if (!cont(1) || !cont(2)) return invalid();
    const uint32_t v = (uint32_t(c & 0x0F) << 12) | (uint32_t(b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    if (v < 0x800 || (v >= 0xD800 && v <= 0xDFFF)) return invalid();
    cp = v;
    return 3;
  }
  if (c < 0xF5) {
    if (!cont(1) || !cont(2) || !cont(3)) return invalid();
    const uint32_t v = (uint32_t(c & 0x07) << 18) | (uint32_t(b(1) & 0x3F) << 12) | (uint32_t(b(2) & 0x3F) << 6) |
                       (b(3) & 0x3F);
    if (v < 0x10000 || v > 0x10FFFF) return invalid();
    cp = v;
    return 4;
  }
  return invalid();
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

size_t utf8_complete_prefix(std::string_view s) {
  // Look back at most 3 bytes for a lead byte whose sequence runs past the end.
  const size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const uint8_t c = static_cast<uint8_t>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation: keep looking for the lead
    const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > back ? n - back : n;
  }
  return n;
}

}  // namespace kvtax::tok
