// Short human-readable renderings of metadata values for `kvtax inspect`.
#include <fmt/format.h>

#include "gguf/gguf.h"

namespace kvtax::gguf {
namespace {

std::string quote(std::string_view s, size_t max_chars) {
  std::string out = "\"";
  size_t n = 0;
  for (unsigned char c : s) {
    if (n++ >= max_chars) {
      out += "...";
      break;
    }
    if (c == '"' || c == '\\') out += fmt::format("\\{}", char(c));
    else if (c == '\n') out += "\\n";
    else if (c < 32 || c == 127) out += fmt::format("\\x{:02x}", c);
    else out += char(c);
  }
  out += '"';
  return out;
}

std::string scalar(const Value& v, size_t max_chars) {
  switch (v.type) {
    case ValueType::UINT8: case ValueType::UINT16: case ValueType::UINT32: case ValueType::UINT64:
      return std::to_string(v.u);
    case ValueType::INT8: case ValueType::INT16: case ValueType::INT32: case ValueType::INT64:
      return std::to_string(v.i);
    case ValueType::FLOAT32: case ValueType::FLOAT64: return fmt::format("{:g}", v.f);
    case ValueType::BOOL: return v.b ? "true" : "false";
    case ValueType::STRING: return quote(v.s, max_chars);
    case ValueType::ARRAY: break;
  }
  return "?";
}

}  // namespace

std::string format_value(const Value& v, size_t max_items, size_t max_chars) {
  if (v.type != ValueType::ARRAY) return scalar(v, max_chars);
  std::string out = fmt::format("arr[{},{}]: [", value_type_name(v.elem_type), v.arr.size());
  for (size_t k = 0; k < v.arr.size() && k < max_items; ++k) {
    if (k) out += ", ";
    out += v.arr[k].type == ValueType::ARRAY ? format_value(v.arr[k], max_items, max_chars)
                                             : scalar(v.arr[k], std::min<size_t>(max_chars, 24));
  }
  if (v.arr.size() > max_items) out += ", ...";
  out += "]";
  return out;
}

}  // namespace kvtax::gguf
