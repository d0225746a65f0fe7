#pragma once
// GGUF v2/v3 reader (mmap, every count/offset/size checked against the file) and writer.
// Spec: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <functional>
#include <unordered_map>
#include <vector>

#include "ggml/types.h"

namespace kvtax::gguf {

enum class ValueType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
std::string_view value_type_name(ValueType t);

// Limits the reader enforces (besides the file size).
inline constexpr int kMaxArrayDepth = 8;     // nesting of arrays inside arrays
inline constexpr uint32_t kMaxDims = 4;      // ggml tensors have at most 4 dimensions

// A metadata value. Scalars live in one of u/i/f/b/s according to `type`; arrays hold their
// element type and elements (which may themselves be arrays).
struct Value {
  ValueType type = ValueType::UINT8;
  uint64_t u = 0;        // UINT8..UINT64
  int64_t i = 0;         // INT8..INT64
  double f = 0;          // FLOAT32/FLOAT64
  bool b = false;        // BOOL
  std::string s;         // STRING
  ValueType elem_type = ValueType::UINT8;  // ARRAY
  std::vector<Value> arr;                  // ARRAY

  static Value of_u32(uint32_t v); static Value of_i32(int32_t v); static Value of_u64(uint64_t v);
  static Value of_f32(float v); static Value of_bool(bool v); static Value of_str(std::string v);
  static Value of_array(ValueType elem, std::vector<Value> items);
  static Value of_strings(const std::vector<std::string>& v);
  static Value of_f32s(const std::vector<float>& v);
  static Value of_i32s(const std::vector<int32_t>& v);

  bool is_integer() const;  // any integer type
  bool operator==(const Value&) const = default;
};

struct KeyValue {
  std::string key;
  Value value;
};

struct TensorInfo {
  std::string name;
  std::vector<uint64_t> ne;   // ggml order: ne[0] is the contiguous (row) dimension
  GgmlType type = GgmlType::F32;
  uint64_t offset = 0;        // relative to the start of the data section
  uint64_t nbytes = 0;
  uint64_t n_elements() const;
  uint64_t rows() const { return ne.empty() ? 1 : n_elements() / ne[0]; }
};

class File {
 public:
  // Throws kvtax::Error naming the path and what is wrong.
  static std::unique_ptr<File> open(const std::string& path);
  // Parses an in-memory image (no copy; `bytes` must outlive the File). Used by the fuzzer.
  static std::unique_ptr<File> parse(std::span<const uint8_t> bytes, std::string name = "<memory>");
  ~File();

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // absolute offset of the data section
  const std::string& path() const { return path_; }
  size_t file_size() const { return bytes_.size(); }

  const std::vector<KeyValue>& metadata() const { return kv_; }
  const Value* find(std::string_view key) const;
  // Typed getters: nullopt when absent; Error when present with an incompatible type.
  std::optional<uint64_t> get_uint(std::string_view key) const;   // any non-negative integer type
  std::optional<int64_t> get_int(std::string_view key) const;     // any integer type
  std::optional<double> get_float(std::string_view key) const;    // float or integer types
  std::optional<bool> get_bool(std::string_view key) const;
  std::optional<std::string> get_string(std::string_view key) const;
  std::optional<std::vector<std::string>> get_strings(std::string_view key) const;
  std::optional<std::vector<float>> get_f32s(std::string_view key) const;
  std::optional<std::vector<int32_t>> get_i32s(std::string_view key) const;  // any integer elements

  // Frees the elements of an array value once its consumer has copied what it needs (the tokenizer's
  // vocabulary and merges are tens of MiB as Values); the key stays, as an empty array. No-op if absent.
  void release_array(std::string_view key);
  // Memory hints for the mapping (no-ops for in-memory files): the header pages are parsed into Values at
  // open and never read again; a tensor read a few rows at a time (the token embedding) should not pull
  // in readahead around each row.
  void drop_header_pages() const;
  void advise_random(const TensorInfo& t) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* tensor(std::string_view name) const;  // nullptr if absent
  std::span<const uint8_t> tensor_data(const TensorInfo& t) const;

 private:
  File() = default;
  std::string path_;
  std::span<const uint8_t> bytes_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<KeyValue> kv_;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string, size_t> kv_index_, tensor_index_;
  friend class Parser;
};

// Builds a GGUF v3 file: metadata in insertion order, tensors aligned to general.alignment (default 32).
class Writer {
 public:
  void set(std::string key, Value v);  // replaces an existing key in place
  void add_tensor(std::string name, GgmlType type, std::vector<uint64_t> ne, std::vector<uint8_t> data);
  // Streaming tensor: `fill` writes rows [row_begin, row_end) (ggml_row_bytes each) to dst when the
  // file is written, a chunk at a time, so a multi-GB model never sits in memory. It may be called
  // with any split of the rows, so it must produce each row independently of the others.
  using RowFill = std::function<void(uint64_t row_begin, uint64_t row_end, uint8_t* dst)>;
  void add_tensor_lazy(std::string name, GgmlType type, std::vector<uint64_t> ne, RowFill fill);
  void write(const std::string& path) const;  // throws Error; writes to path.tmp then renames
  std::vector<uint8_t> to_bytes() const;
  const std::vector<KeyValue>& metadata() const { return kv_; }

 private:
  struct Tensor {
    std::string name; GgmlType type; std::vector<uint64_t> ne; std::vector<uint8_t> data; RowFill fill;
    uint64_t nbytes = 0;
  };
  void check_new_tensor(const std::string& name, GgmlType type, const std::vector<uint64_t>& ne) const;
  uint64_t alignment() const;
  // Header, metadata, tensor infos and padding up to the data section; offsets[i] for each tensor.
  std::vector<uint8_t> header(std::vector<uint64_t>& offsets) const;
  template <typename Sink> void emit(Sink&& sink) const;
  std::vector<KeyValue> kv_;
  std::vector<Tensor> tensors_;
};

// A one-line rendering for listings: scalars in full (strings cut at max_chars), arrays as
// "arr[str,151936]: ["a", "b", ...]" with the first max_items items.
std::string format_value(const Value& v, size_t max_items = 4, size_t max_chars = 60);

}  // namespace kvtax::gguf
