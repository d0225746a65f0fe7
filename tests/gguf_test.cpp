#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>

#include <unistd.h>

#include "core/error.h"
#include "gguf/gguf.h"

namespace kvtax::gguf {
namespace {

// Hand-assembles GGUF images, including malformed ones the Writer refuses to produce.
struct Img {
  std::vector<uint8_t> b;
  template <typename T>
  Img& put(T v) {
    const size_t n = b.size();
    b.resize(n + sizeof(T));
    std::memcpy(b.data() + n, &v, sizeof(T));
    return *this;
  }
  Img& str(std::string_view s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Img& header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    return put<uint32_t>(0x46554747).put<uint32_t>(version).put<uint64_t>(n_tensors).put<uint64_t>(n_kv);
  }
  Img& kv_u32(std::string_view k, uint32_t v) { return str(k).put<uint32_t>(4).put<uint32_t>(v); }
  Img& tensor(std::string_view name, std::vector<int64_t> ne, uint32_t type, uint64_t off) {
    str(name).put<uint32_t>(uint32_t(ne.size()));
    for (int64_t d : ne) put<int64_t>(d);
    return put<uint32_t>(type).put<uint64_t>(off);
  }
  Img& pad(size_t a) {
    b.resize((b.size() + a - 1) / a * a, 0);
    return *this;
  }
  Img& zeros(size_t n) {
    b.resize(b.size() + n, 0);
    return *this;
  }
};

std::string parse_error(const std::vector<uint8_t>& bytes) {
  try {
    File::parse(bytes, "t.gguf");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_PARSE_ERROR(bytes, substr)                                  \
  do {                                                                      \
    const std::string msg_ = parse_error(bytes);                            \
    EXPECT_NE(msg_, "") << "parse succeeded";                               \
    EXPECT_NE(msg_.find(substr), std::string::npos) << "message: " << msg_; \
  } while (0)

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& x : v) x = uint8_t(rng());
  return v;
}

Writer sample_writer() {
  Writer w;
  Value u8; u8.type = ValueType::UINT8; u8.u = 200;
  Value i8; i8.type = ValueType::INT8; i8.i = -100;
  Value u16; u16.type = ValueType::UINT16; u16.u = 65000;
  Value i16; i16.type = ValueType::INT16; i16.i = -32000;
  Value i64; i64.type = ValueType::INT64; i64.i = -(int64_t(1) << 50);
  Value f64; f64.type = ValueType::FLOAT64; f64.f = 3.141592653589793;
  w.set("general.architecture", Value::of_str("llama"));
  w.set("t.u8", u8);
  w.set("t.i8", i8);
  w.set("t.u16", u16);
  w.set("t.i16", i16);
  w.set("t.u32", Value::of_u32(4000000000u));
  w.set("t.i32", Value::of_i32(-2000000000));
  w.set("t.f32", Value::of_f32(0.25f));
  w.set("t.bool", Value::of_bool(true));
  w.set("t.str", Value::of_str(std::string("h\xc3\xa9llo\0x", 7)));
  w.set("t.u64", Value::of_u64(~uint64_t(0)));
  w.set("t.i64", i64);
  w.set("t.f64", f64);
  w.set("t.strings", Value::of_strings({"a", "", "ccc"}));
  w.set("t.f32s", Value::of_f32s({1.5f, -2.0f}));
  w.set("t.i32s", Value::of_i32s({1, -2, 3}));
  w.set("t.empty", Value::of_array(ValueType::UINT64, {}));
  w.set("t.nested", Value::of_array(ValueType::ARRAY, {Value::of_i32s({1, 2}), Value::of_strings({"x"}),
                                                        Value::of_array(ValueType::ARRAY, {Value::of_f32s({})})}));
  w.add_tensor("a", GgmlType::F32, {3, 2}, random_bytes(24, 1));
  w.add_tensor("b", GgmlType::F16, {5}, random_bytes(10, 2));
  w.add_tensor("c", GgmlType::Q8_0, {64, 3}, random_bytes(2 * 34 * 3, 3));
  w.add_tensor_lazy("d", GgmlType::BF16, {4, 3, 2}, [](uint64_t r0, uint64_t r1, uint8_t* dst) {
    for (uint64_t r = r0; r < r1; ++r)
      for (int k = 0; k < 8; ++k) dst[(r - r0) * 8 + k] = uint8_t(r * 8 + k);
  });
  return w;
}

TEST(Gguf, RoundTripEveryValueType) {
  const Writer w = sample_writer();
  const auto bytes = w.to_bytes();
  const auto f = File::parse(bytes);
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_EQ(f->data_offset() % 32, 0u);
  ASSERT_EQ(f->metadata().size(), w.metadata().size());
  for (size_t k = 0; k < w.metadata().size(); ++k) {
    EXPECT_EQ(f->metadata()[k].key, w.metadata()[k].key);
    Value want = w.metadata()[k].value;
    if (want.type == ValueType::FLOAT32) want.f = float(want.f);
    EXPECT_TRUE(f->metadata()[k].value == want) << w.metadata()[k].key;
  }
  ASSERT_EQ(f->tensors().size(), 4u);
  EXPECT_EQ(f->tensor_data(*f->tensor("a")).size(), 24u);
  EXPECT_TRUE(std::ranges::equal(f->tensor_data(*f->tensor("a")), random_bytes(24, 1)));
  EXPECT_TRUE(std::ranges::equal(f->tensor_data(*f->tensor("b")), random_bytes(10, 2)));
  EXPECT_TRUE(std::ranges::equal(f->tensor_data(*f->tensor("c")), random_bytes(204, 3)));
  const auto d = f->tensor_data(*f->tensor("d"));
  ASSERT_EQ(d.size(), 48u);
  for (size_t k = 0; k < 48; ++k) EXPECT_EQ(d[k], k);
  for (const auto& t : f->tensors()) EXPECT_EQ(t.offset % 32, 0u) << t.name;
  EXPECT_EQ(f->tensor("c")->type, GgmlType::Q8_0);
  EXPECT_EQ(f->tensor("d")->ne, (std::vector<uint64_t>{4, 3, 2}));
  EXPECT_EQ(f->tensor("zzz"), nullptr);
}

TEST(Gguf, WriteToFileAndOpen) {
  Writer w = sample_writer();
  w.set("general.alignment", Value::of_u32(256));
  const std::string path = ::testing::TempDir() + "/kvtax_gguf_rt_" + std::to_string(::getpid()) + ".gguf";
  w.write(path);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  const auto f = File::open(path);
  EXPECT_EQ(f->alignment(), 256u);
  EXPECT_EQ(f->data_offset() % 256, 0u);
  for (const auto& t : f->tensors()) EXPECT_EQ(t.offset % 256, 0u);
  EXPECT_TRUE(std::ranges::equal(f->tensor_data(*f->tensor("c")), random_bytes(204, 3)));
  const auto mem = w.to_bytes();
  EXPECT_EQ(f->file_size(), mem.size());
  std::filesystem::remove(path);
}

TEST(Gguf, TypedGetters) {
  const auto bytes = sample_writer().to_bytes();
  const auto f = File::parse(bytes);
  EXPECT_EQ(f->get_uint("t.u32"), 4000000000u);
  EXPECT_EQ(f->get_int("t.i8"), -100);
  EXPECT_THROW(f->get_uint("t.i8"), Error);   // negative
  EXPECT_THROW(f->get_int("t.u64"), Error);   // > INT64_MAX
  EXPECT_DOUBLE_EQ(*f->get_float("t.f64"), 3.141592653589793);
  EXPECT_DOUBLE_EQ(*f->get_float("t.u16"), 65000.0);
  EXPECT_EQ(f->get_bool("t.bool"), true);
  EXPECT_EQ(f->get_string("t.str"), std::string("h\xc3\xa9llo\0x", 7));
  EXPECT_EQ(f->get_strings("t.strings"), (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_EQ(f->get_f32s("t.f32s"), (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(f->get_i32s("t.i32s"), (std::vector<int32_t>{1, -2, 3}));
  EXPECT_FALSE(f->get_uint("missing").has_value());
  EXPECT_THROW(f->get_string("t.u32"), Error);
  EXPECT_THROW(f->get_uint("t.str"), Error);
  EXPECT_THROW(f->get_strings("t.i32s"), Error);
  EXPECT_THROW(f->get_i32s("t.strings"), Error);
  EXPECT_THROW(f->get_bool("t.u8"), Error);
  try {
    f->get_uint("t.str");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("t.str"), std::string::npos) << e.what();
  }
}

TEST(Gguf, ParsesHandWrittenV2) {
  Img im;
  im.header(2, 1, 2).kv_u32("general.alignment", 64).str("k").put<uint32_t>(8).str("v");
  im.tensor("w", {2, 2}, 0, 0).pad(64);
  for (int k = 0; k < 4; ++k) im.put<float>(float(k));
  const auto f = File::parse(im.b);
  EXPECT_EQ(f->version(), 2u);
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->data_offset(), 128u);
  EXPECT_EQ(f->get_string("k"), "v");
  const auto d = f->tensor_data(*f->tensor("w"));
  float x[4];
  std::memcpy(x, d.data(), 16);
  EXPECT_EQ(x[3], 3.0f);
}

TEST(Gguf, RejectsVersionsAndMagic) {
  Img v1; v1.header(1, 0, 0);
  EXPECT_PARSE_ERROR(v1.b, "v1 is not supported");
  Img be; be.put<uint32_t>(0x46554747).put<uint32_t>(0x03000000).put<uint64_t>(0).put<uint64_t>(0);
  EXPECT_PARSE_ERROR(be.b, "big-endian");
  Img v9; v9.header(9, 0, 0);
  EXPECT_PARSE_ERROR(v9.b, "unsupported GGUF version 9");
  Img magic; magic.put<uint32_t>(0x12345678).put<uint32_t>(3).put<uint64_t>(0).put<uint64_t>(0);
  EXPECT_PARSE_ERROR(magic.b, "not a GGUF file");
  EXPECT_PARSE_ERROR(std::vector<uint8_t>{}, "too small");
  Img ok; ok.header(3, 0, 0);
  EXPECT_EQ(File::parse(ok.b)->metadata().size(), 0u);  // empty but valid
}

TEST(Gguf, EveryTruncationThrows) {
  Writer w = sample_writer();
  const auto full = w.to_bytes();
  ASSERT_NO_THROW(File::parse(full));
  for (size_t n = 0; n < full.size(); ++n) {
    std::vector<uint8_t> cut(full.begin(), full.begin() + n);  // own allocation so ASan sees overreads
    EXPECT_THROW(File::parse(cut), Error) << "truncated to " << n << " of " << full.size();
  }
}

TEST(Gguf, HugeCountsDoNotAllocate) {
  Img arr; arr.header(3, 0, 1).str("k").put<uint32_t>(9).put<uint32_t>(4).put<uint64_t>(uint64_t(1) << 60);
  EXPECT_PARSE_ERROR(arr.b, "cannot fit");
  Img arr_str; arr_str.header(3, 0, 1).str("k").put<uint32_t>(9).put<uint32_t>(8).put<uint64_t>(~uint64_t(0));
  EXPECT_PARSE_ERROR(arr_str.b, "cannot fit");
  Img nested; nested.header(3, 0, 1).str("k").put<uint32_t>(9).put<uint32_t>(9).put<uint64_t>(uint64_t(1) << 40);
  EXPECT_PARSE_ERROR(nested.b, "cannot fit");
  Img slen; slen.header(3, 0, 1).put<uint64_t>(uint64_t(1) << 63).zeros(16);
  EXPECT_PARSE_ERROR(slen.b, "exceeds");
  Img vlen; vlen.header(3, 0, 1).str("key").put<uint32_t>(8).put<uint64_t>(1000);
  EXPECT_PARSE_ERROR(vlen.b, "key 'key'");
  Img nkv; nkv.header(3, 0, uint64_t(1) << 62);
  EXPECT_PARSE_ERROR(nkv.b, "metadata count");
  Img nt; nt.header(3, ~uint64_t(0), 0);
  EXPECT_PARSE_ERROR(nt.b, "tensor count");
}

TEST(Gguf, MetadataErrors) {
  Img dup; dup.header(3, 0, 2).kv_u32("a", 1).kv_u32("a", 2);
  EXPECT_PARSE_ERROR(dup.b, "key 'a': duplicate key");
  Img vt; vt.header(3, 0, 1).str("a").put<uint32_t>(13).put<uint32_t>(0);
  EXPECT_PARSE_ERROR(vt.b, "unknown value type id 13");
  Img et; et.header(3, 0, 1).str("a").put<uint32_t>(9).put<uint32_t>(77).put<uint64_t>(0);
  EXPECT_PARSE_ERROR(et.b, "unknown value type id 77");
  Img empty; empty.header(3, 0, 1).str("").put<uint32_t>(4).put<uint32_t>(0);
  EXPECT_PARSE_ERROR(empty.b, "empty key");
  Img b2; b2.header(3, 0, 1).str("a").put<uint32_t>(7).put<uint8_t>(2);
  EXPECT_PARSE_ERROR(b2.b, "neither 0 nor 1");
  Img deep; deep.header(3, 0, 1).str("a").put<uint32_t>(9);
  for (int k = 0; k < 20; ++k) deep.put<uint32_t>(9).put<uint64_t>(1);
  deep.put<uint32_t>(4).put<uint64_t>(0);
  EXPECT_PARSE_ERROR(deep.b, "nested deeper");
  Img depth_ok; depth_ok.header(3, 0, 1).str("a").put<uint32_t>(9);
  for (int k = 0; k < kMaxArrayDepth - 1; ++k) depth_ok.put<uint32_t>(9).put<uint64_t>(1);
  depth_ok.put<uint32_t>(4).put<uint64_t>(1).put<uint32_t>(7);
  EXPECT_NO_THROW(File::parse(depth_ok.b));
}

TEST(Gguf, AlignmentErrors) {
  for (uint32_t a : {0u, 3u, 48u, 1u << 31}) {
    Img im; im.header(3, 0, 1).kv_u32("general.alignment", a);
    { SCOPED_TRACE(a); EXPECT_PARSE_ERROR(im.b, "general.alignment"); }
  }
  Img s; s.header(3, 0, 1).str("general.alignment").put<uint32_t>(8).str("32");
  EXPECT_PARSE_ERROR(s.b, "must be an integer");
  Img one; one.header(3, 0, 1).kv_u32("general.alignment", 1);
  EXPECT_EQ(File::parse(one.b)->alignment(), 1u);
}

// One f32 tensor [ne...] at `off` plus `data` bytes of data section.
std::vector<uint8_t> one_tensor(std::vector<int64_t> ne, uint32_t type, uint64_t off, size_t data,
                                std::string name = "blk.0.attn_q.weight") {
  Img im;
  im.header(3, 1, 0).tensor(name, std::move(ne), type, off).pad(32).zeros(data);
  return im.b;
}

TEST(Gguf, TensorInfoErrors) {
  EXPECT_NO_THROW(File::parse(one_tensor({4, 2}, 0, 0, 32)));
  EXPECT_PARSE_ERROR(one_tensor({4, 2}, 0, 0, 31), "tensor 'blk.0.attn_q.weight': data [");
  EXPECT_PARSE_ERROR(one_tensor({4, 2}, 0, 0, 31), "extends past end of file (size");
  EXPECT_PARSE_ERROR(one_tensor({4, 2}, 0, 64, 64), "extends past end of file");
  EXPECT_PARSE_ERROR(one_tensor({4, 2}, 0, ~uint64_t(0) - 31, 64), "past end of file");
  EXPECT_PARSE_ERROR(one_tensor({4, 2}, 0, 16, 64), "not a multiple of the alignment");
  EXPECT_PARSE_ERROR(one_tensor({1, 1, 1, 1, 1}, 0, 0, 32), "5 dimensions");
  EXPECT_PARSE_ERROR(one_tensor({}, 0, 0, 32), "0 dimensions");
  EXPECT_PARSE_ERROR(one_tensor({4, 0}, 0, 0, 32), "dimension 1 is 0");
  EXPECT_PARSE_ERROR(one_tensor({4, -1}, 0, 0, 32), "dimension 1 is -1");
  EXPECT_PARSE_ERROR(one_tensor({1 << 30, 1 << 30, 1 << 30, 1 << 30}, 0, 0, 32), "overflows");
  EXPECT_PARSE_ERROR(one_tensor({int64_t(1) << 62, 2}, 0, 0, 32), "overflows");
  EXPECT_PARSE_ERROR(one_tensor({int64_t(1) << 62}, 0, 0, 32), "overflows");  // bytes = 2^62 * 4
  for (uint32_t t : {4u, 5u, 31u, 36u, 43u, 1000u})
    { SCOPED_TRACE(t); EXPECT_PARSE_ERROR(one_tensor({32}, t, 0, 64), "unknown ggml type id"); }
  EXPECT_PARSE_ERROR(one_tensor({48}, uint32_t(GgmlType::Q4_0), 0, 64), "not a multiple of the q4_0 block size 32");
  EXPECT_NO_THROW(File::parse(one_tensor({64, 2}, uint32_t(GgmlType::Q4_0), 0, 72)));
}

TEST(Gguf, DuplicateAndOverlappingTensors) {
  Img dup;
  dup.header(3, 2, 0).tensor("x", {8}, 0, 0).tensor("x", {8}, 0, 32).pad(32).zeros(64);
  EXPECT_PARSE_ERROR(dup.b, "tensor 'x': duplicate tensor name");
  Img ov;
  ov.header(3, 2, 0).tensor("x", {16}, 0, 0).tensor("y", {8}, 0, 32).pad(32).zeros(128);
  EXPECT_PARSE_ERROR(ov.b, "overlaps tensor 'y'");
  Img same;
  same.header(3, 2, 0).tensor("x", {8}, 0, 32).tensor("y", {8}, 0, 32).pad(32).zeros(128);
  EXPECT_PARSE_ERROR(same.b, "overlaps");
  Img ok;  // out-of-order but disjoint is fine
  ok.header(3, 2, 0).tensor("x", {8}, 0, 32).tensor("y", {8}, 0, 0).pad(32).zeros(64);
  EXPECT_NO_THROW(File::parse(ok.b));
}

TEST(Gguf, TensorDataRejectsForeignInfo) {
  const auto bytes = one_tensor({4, 2}, 0, 0, 32);
  const auto f = File::parse(bytes);
  TensorInfo t = *f->tensor("blk.0.attn_q.weight");
  t.offset = 1 << 20;
  EXPECT_THROW(f->tensor_data(t), Error);
}

TEST(Gguf, OpenErrors) {
  EXPECT_THROW(File::open("/nonexistent/x.gguf"), Error);
  EXPECT_THROW(File::open("/tmp"), Error);
  const std::string p = ::testing::TempDir() + "/kvtax_empty_" + std::to_string(::getpid()) + ".gguf";
  { FILE* fp = std::fopen(p.c_str(), "wb"); std::fclose(fp); }
  try {
    File::open(p);
    ADD_FAILURE() << "empty file opened";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(p), std::string::npos);
  }
  std::filesystem::remove(p);
}

TEST(Gguf, WriterRejectsBadInput) {
  Writer w;
  EXPECT_THROW(w.add_tensor("a", GgmlType::F32, {4}, std::vector<uint8_t>(15)), Error);
  EXPECT_THROW(w.add_tensor("a", GgmlType::Q8_0, {16}, std::vector<uint8_t>(17)), Error);
  EXPECT_THROW(w.add_tensor("a", GgmlType::F32, {}, {}), Error);
  EXPECT_THROW(w.add_tensor("a", GgmlType(4), {32}, std::vector<uint8_t>(18)), Error);
  w.add_tensor("a", GgmlType::F32, {4}, std::vector<uint8_t>(16));
  EXPECT_THROW(w.add_tensor("a", GgmlType::F32, {4}, std::vector<uint8_t>(16)), Error);
  w.set("general.alignment", Value::of_u32(24));
  EXPECT_THROW(w.to_bytes(), Error);
  EXPECT_THROW(Value::of_array(ValueType::INT32, {Value::of_u32(1)}), Error);
  w.set("general.alignment", Value::of_u32(16));
  w.set("general.alignment", Value::of_u32(8));  // replaces in place
  EXPECT_EQ(w.metadata().size(), 1u);
  EXPECT_EQ(File::parse(w.to_bytes())->alignment(), 8u);
}

TEST(Gguf, TypeTableMatchesGgml) {
  // Sizes from ggml-common.h's static_asserts.
  struct Row { GgmlType t; uint32_t block, size; const char* name; };
  for (const Row& r : {Row{GgmlType::Q4_0, 32, 18, "q4_0"}, Row{GgmlType::Q8_0, 32, 34, "q8_0"},
                       Row{GgmlType::Q4_K, 256, 144, "q4_K"}, Row{GgmlType::Q6_K, 256, 210, "q6_K"},
                       Row{GgmlType::IQ3_S, 256, 110, "iq3_s"}, Row{GgmlType::TQ1_0, 256, 54, "tq1_0"},
                       Row{GgmlType::MXFP4, 32, 17, "mxfp4"}, Row{GgmlType::NVFP4, 64, 36, "nvfp4"},
                       Row{GgmlType::Q1_0, 128, 18, "q1_0"}, Row{GgmlType::BF16, 1, 2, "bf16"}}) {
    EXPECT_EQ(ggml_traits(r.t).block_size, r.block) << r.name;
    EXPECT_EQ(ggml_traits(r.t).type_size, r.size) << r.name;
    EXPECT_EQ(ggml_type_name(r.t), r.name);
  }
  for (uint32_t removed : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u, 43u}) EXPECT_EQ(ggml_traits(removed), nullptr);
}

TEST(Gguf, FormatValue) {
  EXPECT_EQ(format_value(Value::of_strings({"a", "b", "c", "d", "e"}), 2), "arr[str,5]: [\"a\", \"b\", ...]");
  EXPECT_EQ(format_value(Value::of_str("x\ny")), "\"x\\ny\"");
  EXPECT_EQ(format_value(Value::of_i32s({})), "arr[i32,0]: []");
  EXPECT_EQ(format_value(Value::of_u32(7)), "7");
}

TEST(Gguf, SharedVocabFilesParse) {
  const std::string dir = std::string(KVTAX_SHARED_DIR) + "/fixtures/vocab";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << "../shared absent: " << dir;
  const auto f = File::open(dir + "/ggml-vocab-qwen2.gguf");
  const auto toks = f->get_strings("tokenizer.ggml.tokens");
  ASSERT_TRUE(toks.has_value());
  EXPECT_EQ(toks->size(), 151936u);
  EXPECT_EQ(f->get_string("tokenizer.ggml.pre"), "qwen2");
  EXPECT_TRUE(f->tensors().empty());
}

}  // namespace
}  // namespace kvtax::gguf
