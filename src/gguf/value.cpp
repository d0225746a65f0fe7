#include <string>

#include "core/error.h"
#include "gguf/gguf.h"

namespace kvtax::gguf {

std::string_view value_type_name(ValueType t) {
  switch (t) {
    case ValueType::UINT8: return "u8";
    case ValueType::INT8: return "i8";
    case ValueType::UINT16: return "u16";
    case ValueType::INT16: return "i16";
    case ValueType::UINT32: return "u32";
    case ValueType::INT32: return "i32";
    case ValueType::FLOAT32: return "f32";
    case ValueType::BOOL: return "bool";
    case ValueType::STRING: return "str";
    case ValueType::ARRAY: return "arr";
    case ValueType::UINT64: return "u64";
    case ValueType::INT64: return "i64";
    case ValueType::FLOAT64: return "f64";
  }
  return "?";
}

Value Value::of_u32(uint32_t v) { Value r; r.type = ValueType::UINT32; r.u = v; return r; }
Value Value::of_i32(int32_t v) { Value r; r.type = ValueType::INT32; r.i = v; return r; }
Value Value::of_u64(uint64_t v) { Value r; r.type = ValueType::UINT64; r.u = v; return r; }
Value Value::of_f32(float v) { Value r; r.type = ValueType::FLOAT32; r.f = v; return r; }
Value Value::of_bool(bool v) { Value r; r.type = ValueType::BOOL; r.b = v; return r; }
Value Value::of_str(std::string v) { Value r; r.type = ValueType::STRING; r.s = std::move(v); return r; }

Value Value::of_array(ValueType elem, std::vector<Value> items) {
  for (const auto& it : items)
    if (it.type != elem)
      fail("array of {} holds an element of type {}", value_type_name(elem), value_type_name(it.type));
  Value r;
  r.type = ValueType::ARRAY;
  r.elem_type = elem;
  r.arr = std::move(items);
  return r;
}

Value Value::of_strings(const std::vector<std::string>& v) {
  Value r;
  r.type = ValueType::ARRAY;
  r.elem_type = ValueType::STRING;
  r.arr.reserve(v.size());
  for (const auto& s : v) r.arr.push_back(of_str(s));
  return r;
}

Value Value::of_f32s(const std::vector<float>& v) {
  Value r;
  r.type = ValueType::ARRAY;
  r.elem_type = ValueType::FLOAT32;
  r.arr.reserve(v.size());
  for (float x : v) r.arr.push_back(of_f32(x));
  return r;
}

Value Value::of_i32s(const std::vector<int32_t>& v) {
  Value r;
  r.type = ValueType::ARRAY;
  r.elem_type = ValueType::INT32;
  r.arr.reserve(v.size());
  for (int32_t x : v) r.arr.push_back(of_i32(x));
  return r;
}

bool Value::is_integer() const {
  switch (type) {
    case ValueType::UINT8: case ValueType::INT8: case ValueType::UINT16: case ValueType::INT16:
    case ValueType::UINT32: case ValueType::INT32: case ValueType::UINT64: case ValueType::INT64:
      return true;
    default:
      return false;
  }
}

uint64_t TensorInfo::n_elements() const {
  uint64_t n = 1;
  for (uint64_t d : ne) n *= d;
  return n;
}

}  // namespace kvtax::gguf
