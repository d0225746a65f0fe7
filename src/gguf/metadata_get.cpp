// Typed access to metadata values, with errors that name the key and the type found.
#include <limits>

#include "core/error.h"
#include "gguf/gguf.h"

namespace kvtax::gguf {
namespace {

bool is_signed(ValueType t) {
  return t == ValueType::INT8 || t == ValueType::INT16 || t == ValueType::INT32 || t == ValueType::INT64;
}

[[noreturn]] void wrong_type(const File& f, std::string_view key, const Value& v, std::string_view want) {
  std::string got(value_type_name(v.type));
  if (v.type == ValueType::ARRAY) got += fmt::format(" of {}", value_type_name(v.elem_type));
  fail("{}: key '{}' is {}, expected {}", f.path(), key, got, want);
}

const Value* array_of(const File& f, std::string_view key, std::string_view want) {
  const Value* v = f.find(key);
  if (v && v->type != ValueType::ARRAY) wrong_type(f, key, *v, want);
  return v;
}

}  // namespace

std::optional<uint64_t> File::get_uint(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_integer()) wrong_type(*this, key, *v, "an unsigned integer");
  if (is_signed(v->type)) {
    if (v->i < 0) fail("{}: key '{}' is {}, expected a non-negative value", path_, key, v->i);
    return uint64_t(v->i);
  }
  return v->u;
}

std::optional<int64_t> File::get_int(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_integer()) wrong_type(*this, key, *v, "an integer");
  if (is_signed(v->type)) return v->i;
  if (v->u > uint64_t(std::numeric_limits<int64_t>::max()))
    fail("{}: key '{}' value {} does not fit in int64", path_, key, v->u);
  return int64_t(v->u);
}

std::optional<double> File::get_float(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (v->type == ValueType::FLOAT32 || v->type == ValueType::FLOAT64) return v->f;
  if (v->is_integer()) return is_signed(v->type) ? double(v->i) : double(v->u);
  wrong_type(*this, key, *v, "a number");
}

std::optional<bool> File::get_bool(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != ValueType::BOOL) wrong_type(*this, key, *v, "a bool");
  return v->b;
}

std::optional<std::string> File::get_string(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != ValueType::STRING) wrong_type(*this, key, *v, "a string");
  return v->s;
}

std::optional<std::vector<std::string>> File::get_strings(std::string_view key) const {
  const Value* v = array_of(*this, key, "an array of strings");
  if (!v) return std::nullopt;
  if (v->elem_type != ValueType::STRING) wrong_type(*this, key, *v, "an array of strings");
  std::vector<std::string> out;
  out.reserve(v->arr.size());
  for (const auto& e : v->arr) out.push_back(e.s);
  return out;
}

std::optional<std::vector<float>> File::get_f32s(std::string_view key) const {
  const Value* v = array_of(*this, key, "an array of numbers");
  if (!v) return std::nullopt;
  std::vector<float> out;
  out.reserve(v->arr.size());
  for (const auto& e : v->arr) {
    if (e.type == ValueType::FLOAT32 || e.type == ValueType::FLOAT64) out.push_back(float(e.f));
    else if (e.is_integer()) out.push_back(is_signed(e.type) ? float(e.i) : float(e.u));
    else wrong_type(*this, key, *v, "an array of numbers");
  }
  return out;
}

std::optional<std::vector<int32_t>> File::get_i32s(std::string_view key) const {
  const Value* v = array_of(*this, key, "an array of integers");
  if (!v) return std::nullopt;
  std::vector<int32_t> out;
  out.reserve(v->arr.size());
  for (size_t k = 0; k < v->arr.size(); ++k) {
    const Value& e = v->arr[k];
    if (!e.is_integer()) wrong_type(*this, key, *v, "an array of integers");
    const bool ok = is_signed(e.type) ? (e.i >= std::numeric_limits<int32_t>::min() &&
                                         e.i <= std::numeric_limits<int32_t>::max())
                                      : e.u <= uint64_t(std::numeric_limits<int32_t>::max());
    if (!ok) fail("{}: key '{}' item {} does not fit in int32", path_, key, k);
    out.push_back(is_signed(e.type) ? int32_t(e.i) : int32_t(e.u));
  }
  return out;
}

}  // namespace kvtax::gguf
