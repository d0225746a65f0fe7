// GGUF parser. Every length, count and offset read from the file is checked against the bytes that
// remain BEFORE anything is allocated, so a hostile file costs at most a small multiple of its size.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "gguf/gguf.h"

namespace kvtax::gguf {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as little-endian u32

// Smallest encoding of one value of type t; used to bound array counts by the remaining bytes.
uint64_t min_encoded_size(ValueType t) {
  switch (t) {
    case ValueType::UINT8: case ValueType::INT8: case ValueType::BOOL: return 1;
    case ValueType::UINT16: case ValueType::INT16: return 2;
    case ValueType::UINT32: case ValueType::INT32: case ValueType::FLOAT32: return 4;
    case ValueType::UINT64: case ValueType::INT64: case ValueType::FLOAT64: return 8;
    case ValueType::STRING: return 8;   // length only
    case ValueType::ARRAY: return 12;   // element type + count
  }
  return 1;
}

bool valid_value_type(uint32_t t) { return t <= uint32_t(ValueType::FLOAT64); }

}  // namespace

class Parser {
 public:
  explicit Parser(File& f) : f_(f), p_(f.bytes_.data()), size_(f.bytes_.size()) {}

  void run() {
    if (size_ < 4) bad("file is {} bytes, too small for a GGUF header", size_);
    const uint32_t magic = rd<uint32_t>("magic");
    if (magic != kMagic) {
      char m[5] = {};
      std::memcpy(m, p_, 4);
      for (char& c : m) if (c && (c < 32 || c > 126)) c = '?';
      bad("not a GGUF file (magic '{}', expected 'GGUF')", m);
    }
    const uint32_t version = rd<uint32_t>("version");
    if (version == 1) bad("GGUF v1 is not supported (re-convert the model with a current llama.cpp)");
    if ((version & 0xffff) == 0 && __builtin_bswap32(version) <= 3)
      bad("big-endian GGUF (version field {:#x}) is not supported", version);
    if (version != 2 && version != 3) bad("unsupported GGUF version {} (supported: 2, 3)", version);
    f_.version_ = version;

    const uint64_t n_tensors = rd<uint64_t>("tensor count");
    const uint64_t n_kv = rd<uint64_t>("metadata count");
    // A key-value pair needs >= 13 bytes (key length, a 1-byte key, type); a tensor info >= 32.
    if (n_kv > remaining() / 13) bad("metadata count {} cannot fit in the {} bytes that remain", n_kv, remaining());
    if (n_tensors > remaining() / 32)
      bad("tensor count {} cannot fit in the {} bytes that remain", n_tensors, remaining());

    f_.kv_.reserve(n_kv);
    for (uint64_t i = 0; i < n_kv; ++i) read_kv(i);
    read_alignment();

    f_.tensors_.reserve(n_tensors);
    for (uint64_t i = 0; i < n_tensors; ++i) read_tensor_info(i);

    const uint64_t a = f_.alignment_;
    f_.data_offset_ = (pos_ + a - 1) / a * a;  // pos_ <= size_, a <= 2^31: no overflow
    check_tensor_data();
  }

 private:
  template <typename... Args>
  [[noreturn]] void bad(fmt::format_string<Args...> fmtstr, Args&&... args) const {
    std::string msg = fmt::format(fmtstr, std::forward<Args>(args)...);
    if (!where_.empty()) msg = where_ + ": " + msg;
    throw Error(fmt::format("{}: {}", f_.path_, msg));
  }

  uint64_t remaining() const { return size_ - pos_; }

  void need(uint64_t n, std::string_view what) const {
    if (n > remaining())
      bad("{} needs {} bytes at offset {} but only {} remain (file size {})", what, n, pos_, remaining(), size_);
  }

  template <typename T>
  T rd(std::string_view what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string rd_string(std::string_view what) {
    const uint64_t len = rd<uint64_t>(what);
    if (len > remaining())
      bad("{} length {} at offset {} exceeds the {} bytes that remain", what, len, pos_ - 8, remaining());
    std::string s(reinterpret_cast<const char*>(p_ + pos_), size_t(len));
    pos_ += len;
    return s;
  }

  ValueType rd_type(std::string_view what) {
    const uint32_t t = rd<uint32_t>(what);
    if (!valid_value_type(t)) bad("unknown value type id {} at offset {}", t, pos_ - 4);
    return ValueType(t);
  }

  void rd_scalar(ValueType t, Value& v) {
    v.type = t;
    switch (t) {
      case ValueType::UINT8: v.u = rd<uint8_t>("u8 value"); break;
      case ValueType::INT8: v.i = rd<int8_t>("i8 value"); break;
      case ValueType::UINT16: v.u = rd<uint16_t>("u16 value"); break;
      case ValueType::INT16: v.i = rd<int16_t>("i16 value"); break;
      case ValueType::UINT32: v.u = rd<uint32_t>("u32 value"); break;
      case ValueType::INT32: v.i = rd<int32_t>("i32 value"); break;
      case ValueType::FLOAT32: v.f = rd<float>("f32 value"); break;
      case ValueType::UINT64: v.u = rd<uint64_t>("u64 value"); break;
      case ValueType::INT64: v.i = rd<int64_t>("i64 value"); break;
      case ValueType::FLOAT64: v.f = rd<double>("f64 value"); break;
      case ValueType::BOOL: {
        const uint8_t b = rd<uint8_t>("bool value");
        if (b > 1) bad("bool value {} at offset {} is neither 0 nor 1", b, pos_ - 1);
        v.b = b != 0;
        break;
      }
      case ValueType::STRING: v.s = rd_string("string value"); break;
      case ValueType::ARRAY: break;  // handled by rd_value
    }
  }

  void rd_value(ValueType t, Value& v, int depth) {
    if (t != ValueType::ARRAY) return rd_scalar(t, v);
    if (depth >= kMaxArrayDepth) bad("arrays nested deeper than {} levels", kMaxArrayDepth);
    v.type = ValueType::ARRAY;
    v.elem_type = rd_type("array element type");
    const uint64_t n = rd<uint64_t>("array count");
    if (n > remaining() / min_encoded_size(v.elem_type))
      bad("array of {} {} at offset {} cannot fit in the {} bytes that remain", n, value_type_name(v.elem_type),
          pos_ - 12, remaining());
    v.arr.resize(size_t(n));
    for (auto& e : v.arr) rd_value(v.elem_type, e, depth + 1);
  }

  void read_kv(uint64_t i) {
    where_ = fmt::format("metadata entry {}", i);
    KeyValue kv;
    kv.key = rd_string("key");
    if (kv.key.empty()) bad("empty key");
    where_ = fmt::format("key '{}'", kv.key);
    if (f_.kv_index_.count(kv.key)) bad("duplicate key");
    rd_value(rd_type("value type"), kv.value, 0);
    f_.kv_index_.emplace(kv.key, f_.kv_.size());
    f_.kv_.push_back(std::move(kv));
    where_.clear();
  }

  void read_alignment() {
    const Value* v = f_.find("general.alignment");
    if (!v) return;
    where_ = "key 'general.alignment'";
    if (!v->is_integer()) bad("must be an integer, not {}", value_type_name(v->type));
    const bool neg = v->type == ValueType::INT8 || v->type == ValueType::INT16 || v->type == ValueType::INT32 ||
                     v->type == ValueType::INT64;
    const uint64_t a = neg ? (v->i < 0 ? 0 : uint64_t(v->i)) : v->u;
    if (a == 0 || !std::has_single_bit(a) || a > (1u << 30))
      bad("alignment {} must be a non-zero power of two <= 2^30", neg ? std::to_string(v->i) : std::to_string(a));
    f_.alignment_ = a;
    where_.clear();
  }

  void read_tensor_info(uint64_t i) {
    where_ = fmt::format("tensor {}", i);
    TensorInfo t;
    t.name = rd_string("tensor name");
    where_ = fmt::format("tensor '{}'", t.name);
    if (f_.tensor_index_.count(t.name)) bad("duplicate tensor name");
    const uint32_t n_dims = rd<uint32_t>("dimension count");
    if (n_dims == 0 || n_dims > kMaxDims) bad("{} dimensions (must be 1..{})", n_dims, kMaxDims);
    t.ne.resize(n_dims);
    uint64_t n = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const int64_t ne = rd<int64_t>("dimension");
      if (ne <= 0) bad("dimension {} is {} (must be > 0)", d, ne);
      t.ne[d] = uint64_t(ne);
      if (__builtin_mul_overflow(n, t.ne[d], &n) || n > uint64_t(std::numeric_limits<int64_t>::max()))
        bad("element count overflows (shape {})", fmt::join(t.ne, " x "));
    }
    const uint32_t type_id = rd<uint32_t>("tensor type");
    const GgmlTypeTraits* tr = ggml_traits(type_id);
    if (!tr) bad("unknown ggml type id {}", type_id);
    t.type = tr->type;
    if (t.ne[0] % tr->block_size != 0)
      bad("row length {} is not a multiple of the {} block size {}", t.ne[0], tr->name, tr->block_size);
    uint64_t row_bytes = 0;
    if (__builtin_mul_overflow(t.ne[0] / tr->block_size, uint64_t(tr->type_size), &row_bytes) ||
        __builtin_mul_overflow(row_bytes, n / t.ne[0], &t.nbytes))
      bad("byte size overflows (shape {})", fmt::join(t.ne, " x "));
    t.offset = rd<uint64_t>("tensor offset");
    f_.tensor_index_.emplace(t.name, f_.tensors_.size());
    f_.tensors_.push_back(std::move(t));
    where_.clear();
  }

  void check_tensor_data() {
    if (f_.tensors_.empty()) return;  // vocab-only files may end right after the metadata
    const uint64_t a = f_.alignment_, base = f_.data_offset_;
    if (base > size_) bad("data section starts at {}, past the end of the file (size {})", base, size_);
    const uint64_t avail = size_ - base;
    for (const auto& t : f_.tensors_) {
      where_ = fmt::format("tensor '{}'", t.name);
      if (t.offset % a != 0) bad("data offset {} is not a multiple of the alignment {}", t.offset, a);
      if (t.offset > avail)
        bad("data offset {} is past end of file (data section starts at {}, file size {})", t.offset, base, size_);
      if (t.nbytes > avail - t.offset) {
        const uint64_t begin = base + t.offset;  // <= size_
        const uint64_t end = t.nbytes > UINT64_MAX - begin ? UINT64_MAX : begin + t.nbytes;
        bad("data [{}, {}) extends past end of file (size {})", begin, end, size_);
      }
    }
    where_.clear();
    std::vector<const TensorInfo*> order;
    order.reserve(f_.tensors_.size());
    for (const auto& t : f_.tensors_) order.push_back(&t);
    std::sort(order.begin(), order.end(), [](auto* x, auto* y) { return x->offset < y->offset; });
    for (size_t k = 1; k < order.size(); ++k)
      if (order[k - 1]->offset + order[k - 1]->nbytes > order[k]->offset)
        bad("tensor '{}' data [{}, {}) overlaps tensor '{}' starting at {}", order[k - 1]->name,
            order[k - 1]->offset, order[k - 1]->offset + order[k - 1]->nbytes, order[k]->name, order[k]->offset);
  }

  File& f_;
  const uint8_t* p_;
  uint64_t size_;
  uint64_t pos_ = 0;
  std::string where_;
};

std::unique_ptr<File> File::parse(std::span<const uint8_t> bytes, std::string name) {
  std::unique_ptr<File> f(new File());
  f->path_ = std::move(name);
  f->bytes_ = bytes;
  Parser(*f).run();
  return f;
}

std::unique_ptr<File> File::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("{}: not a regular file", path);
  }
  std::unique_ptr<File> f(new File());
  f->path_ = path;
  if (st.st_size == 0) {
    ::close(fd);
    fail("{}: file is empty", path);
  }
  void* m = ::mmap(nullptr, size_t(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);
  if (m == MAP_FAILED) fail("{}: mmap failed: {}", path, std::strerror(err));
  f->map_ = m;
  f->map_size_ = size_t(st.st_size);
  f->bytes_ = {static_cast<const uint8_t*>(m), f->map_size_};
  Parser(*f).run();  // on throw, ~File unmaps
  return f;
}

File::~File() {
  if (map_) ::munmap(map_, map_size_);
}

const Value* File::find(std::string_view key) const {
  auto it = kv_index_.find(std::string(key));
  return it == kv_index_.end() ? nullptr : &kv_[it->second].value;
}

void File::release_array(std::string_view key) {
  auto it = kv_index_.find(std::string(key));
  if (it == kv_index_.end() || kv_[it->second].value.type != ValueType::ARRAY) return;
  std::vector<Value>().swap(kv_[it->second].value.arr);
}

namespace {
void advise(const void* map, size_t map_size, uint64_t begin, uint64_t end, int advice) {
  if (!map) return;
  const uint64_t page = uint64_t(sysconf(_SC_PAGESIZE));
  const uint64_t b = begin / page * page, e = std::min<uint64_t>(map_size, (end + page - 1) / page * page);
  if (b < e) ::madvise(static_cast<char*>(const_cast<void*>(map)) + b, size_t(e - b), advice);
}
}  // namespace

void File::drop_header_pages() const {
  // Only whole pages below the data section: the first tensor's page stays.
  const uint64_t page = uint64_t(sysconf(_SC_PAGESIZE));
  advise(map_, map_size_, 0, data_offset_ / page * page, MADV_DONTNEED);
}

void File::advise_random(const TensorInfo& t) const {
  advise(map_, map_size_, data_offset_ + t.offset, data_offset_ + t.offset + t.nbytes, MADV_RANDOM);
}

const TensorInfo* File::tensor(std::string_view name) const {
  auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::span<const uint8_t> File::tensor_data(const TensorInfo& t) const {
  if (data_offset_ > bytes_.size() || t.offset > bytes_.size() - data_offset_ ||
      t.nbytes > bytes_.size() - data_offset_ - t.offset)
    fail("{}: tensor '{}': data [{}, +{}) is outside the file (size {})", path_, t.name, data_offset_ + t.offset,
         t.nbytes, bytes_.size());
  return bytes_.subspan(data_offset_ + t.offset, t.nbytes);
}

}  // namespace kvtax::gguf
