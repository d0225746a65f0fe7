// GGUF v3 writer. Tensors are laid out in insertion order, each at a multiple of the alignment;
// streaming tensors are generated a chunk of rows at a time while the file is written.
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <unordered_set>

#include "core/error.h"
#include "gguf/gguf.h"

namespace kvtax::gguf {
namespace {

constexpr uint64_t kDefaultAlignment = 32;
constexpr uint64_t kChunkBytes = 64ull << 20;  // streaming granularity

struct Buf {
  std::vector<uint8_t> b;
  template <typename T>
  void put(T v) {
    const size_t n = b.size();
    b.resize(n + sizeof(T));
    std::memcpy(b.data() + n, &v, sizeof(T));
  }
  void put_str(std::string_view s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
  }
};

void put_value(Buf& out, const Value& v, std::string_view key, int depth) {
  switch (v.type) {
    case ValueType::UINT8: out.put<uint8_t>(uint8_t(v.u)); break;
    case ValueType::INT8: out.put<int8_t>(int8_t(v.i)); break;
    case ValueType::UINT16: out.put<uint16_t>(uint16_t(v.u)); break;
    case ValueType::INT16: out.put<int16_t>(int16_t(v.i)); break;
    case ValueType::UINT32: out.put<uint32_t>(uint32_t(v.u)); break;
    case ValueType::INT32: out.put<int32_t>(int32_t(v.i)); break;
    case ValueType::FLOAT32: out.put<float>(float(v.f)); break;
    case ValueType::BOOL: out.put<uint8_t>(v.b ? 1 : 0); break;
    case ValueType::STRING: out.put_str(v.s); break;
    case ValueType::UINT64: out.put<uint64_t>(v.u); break;
    case ValueType::INT64: out.put<int64_t>(v.i); break;
    case ValueType::FLOAT64: out.put<double>(v.f); break;
    case ValueType::ARRAY:
      if (depth >= kMaxArrayDepth) fail("gguf writer: key '{}': arrays nested deeper than {}", key, kMaxArrayDepth);
      out.put<uint32_t>(uint32_t(v.elem_type));
      out.put<uint64_t>(v.arr.size());
      for (const auto& e : v.arr) {
        if (e.type != v.elem_type)
          fail("gguf writer: key '{}': array of {} holds a {}", key, value_type_name(v.elem_type),
               value_type_name(e.type));
        put_value(out, e, key, depth + 1);
      }
      break;
    default:
      fail("gguf writer: key '{}': invalid value type {}", key, uint32_t(v.type));
  }
}

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

}  // namespace

void Writer::set(std::string key, Value v) {
  if (key.empty()) fail("gguf writer: empty metadata key");
  for (auto& kv : kv_)
    if (kv.key == key) {
      kv.value = std::move(v);
      return;
    }
  kv_.push_back({std::move(key), std::move(v)});
}

void Writer::check_new_tensor(const std::string& name, GgmlType type, const std::vector<uint64_t>& ne) const {
  const GgmlTypeTraits* tr = ggml_traits(uint32_t(type));
  if (!tr) fail("gguf writer: tensor '{}': unknown type id {}", name, uint32_t(type));
  if (ne.empty() || ne.size() > kMaxDims) fail("gguf writer: tensor '{}': {} dimensions (must be 1..4)", name, ne.size());
  for (uint64_t d : ne)
    if (d == 0) fail("gguf writer: tensor '{}': zero-sized dimension", name);
  if (ne[0] % tr->block_size)
    fail("gguf writer: tensor '{}': row length {} is not a multiple of the {} block size {}", name, ne[0], tr->name,
         tr->block_size);
  for (const auto& t : tensors_)
    if (t.name == name) fail("gguf writer: duplicate tensor '{}'", name);
}

void Writer::add_tensor(std::string name, GgmlType type, std::vector<uint64_t> ne, std::vector<uint8_t> data) {
  check_new_tensor(name, type, ne);
  Tensor t{std::move(name), type, std::move(ne), std::move(data), nullptr};
  t.nbytes = ggml_row_bytes(type, t.ne[0]) * (TensorInfo{"", t.ne, type}.rows());
  if (t.data.size() != t.nbytes)
    fail("gguf writer: tensor '{}': {} bytes of data for a {} tensor of {} bytes", t.name, t.data.size(),
         ggml_type_name(type), t.nbytes);
  tensors_.push_back(std::move(t));
}

void Writer::add_tensor_lazy(std::string name, GgmlType type, std::vector<uint64_t> ne, RowFill fill) {
  check_new_tensor(name, type, ne);
  if (!fill) fail("gguf writer: tensor '{}': no fill function", name);
  Tensor t{std::move(name), type, std::move(ne), {}, std::move(fill)};
  t.nbytes = ggml_row_bytes(type, t.ne[0]) * (TensorInfo{"", t.ne, type}.rows());
  tensors_.push_back(std::move(t));
}

uint64_t Writer::alignment() const {
  for (const auto& kv : kv_)
    if (kv.key == "general.alignment") {
      const Value& v = kv.value;
      const bool is_signed_type = v.type == ValueType::INT8 || v.type == ValueType::INT16 ||
                                  v.type == ValueType::INT32 || v.type == ValueType::INT64;
      const uint64_t a = is_signed_type ? (v.i > 0 ? uint64_t(v.i) : 0) : v.u;
      if (!v.is_integer() || a == 0 || !std::has_single_bit(a) || a > (1u << 30))
        fail("gguf writer: general.alignment must be a power of two integer <= 2^30");
      return a;
    }
  return kDefaultAlignment;
}

std::vector<uint8_t> Writer::header(std::vector<uint64_t>& offsets) const {
  const uint64_t a = alignment();
  Buf out;
  out.put<uint32_t>(0x46554747);
  out.put<uint32_t>(3);
  out.put<uint64_t>(tensors_.size());
  out.put<uint64_t>(kv_.size());
  for (const auto& kv : kv_) {
    out.put_str(kv.key);
    out.put<uint32_t>(uint32_t(kv.value.type));
    put_value(out, kv.value, kv.key, 0);
  }
  offsets.clear();
  uint64_t off = 0;
  for (const auto& t : tensors_) {
    out.put_str(t.name);
    out.put<uint32_t>(uint32_t(t.ne.size()));
    for (uint64_t d : t.ne) out.put<int64_t>(int64_t(d));
    out.put<uint32_t>(uint32_t(t.type));
    out.put<uint64_t>(off);
    offsets.push_back(off);
    off = align_up(off + t.nbytes, a);
  }
  out.b.resize(align_up(out.b.size(), a), 0);
  return std::move(out.b);
}

// Calls sink(ptr, n) for the whole file image in order.
template <typename Sink>
void Writer::emit(Sink&& sink) const {
  std::vector<uint64_t> offsets;
  const std::vector<uint8_t> head = header(offsets);
  sink(head.data(), head.size());
  std::vector<uint8_t> chunk;
  const uint8_t zeros[64] = {};
  for (size_t k = 0; k < tensors_.size(); ++k) {
    const Tensor& t = tensors_[k];
    if (!t.fill) {
      sink(t.data.data(), t.data.size());
    } else {
      const uint64_t row_bytes = ggml_row_bytes(t.type, t.ne[0]);
      const uint64_t rows = t.nbytes / row_bytes;
      const uint64_t step = std::max<uint64_t>(1, kChunkBytes / row_bytes);
      for (uint64_t r = 0; r < rows; r += step) {
        const uint64_t r1 = std::min(rows, r + step);
        chunk.assign((r1 - r) * row_bytes, 0);
        t.fill(r, r1, chunk.data());
        sink(chunk.data(), chunk.size());
      }
    }
    if (k + 1 < tensors_.size()) {  // pad to the next tensor's offset
      for (uint64_t pad = offsets[k + 1] - offsets[k] - t.nbytes; pad > 0;) {
        const uint64_t n = std::min<uint64_t>(pad, sizeof(zeros));
        sink(zeros, n);
        pad -= n;
      }
    }
  }
}

std::vector<uint8_t> Writer::to_bytes() const {
  std::vector<uint8_t> out;
  emit([&](const uint8_t* p, size_t n) { out.insert(out.end(), p, p + n); });
  return out;
}

void Writer::write(const std::string& path) const {
  const std::string tmp = path + ".tmp";
  FILE* fp = std::fopen(tmp.c_str(), "wb");
  if (!fp) fail("{}: cannot create: {}", tmp, std::strerror(errno));
  try {
    emit([&](const uint8_t* p, size_t n) {
      if (n && std::fwrite(p, 1, n, fp) != n) fail("{}: write failed: {}", tmp, std::strerror(errno));
    });
  } catch (...) {
    std::fclose(fp);
    std::remove(tmp.c_str());
    throw;
  }
  if (std::fclose(fp) != 0) {
    std::remove(tmp.c_str());
    fail("{}: write failed: {}", tmp, std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    fail("cannot rename {} to {}: {}", tmp, path, std::strerror(err));
  }
}

}  // namespace kvtax::gguf
