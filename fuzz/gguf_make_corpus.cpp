// Writes the seed corpus for gguf_fuzz: small valid files covering every value type, nested arrays,
// a custom alignment, several tensor types and a tiny model that read_config accepts.
#include <cstdio>
#include <string>

#include "gguf/gguf.h"

using namespace kvtax;
using namespace kvtax::gguf;

static void tensor(Writer& w, const std::string& name, GgmlType t, std::vector<uint64_t> ne) {
  uint64_t n = 1;
  for (auto d : ne) n *= d;
  const auto& tr = ggml_traits(t);
  std::vector<uint8_t> data(n / tr.block_size * tr.type_size);
  for (size_t i = 0; i < data.size(); ++i) data[i] = uint8_t(i * 7 + 3);
  w.add_tensor(name, t, std::move(ne), std::move(data));
}

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "fuzz/corpus/gguf";
  {
    Writer w;
    Value u8; u8.type = ValueType::UINT8; u8.u = 7;
    Value i16; i16.type = ValueType::INT16; i16.i = -3;
    Value f64; f64.type = ValueType::FLOAT64; f64.f = 0.5;
    w.set("general.architecture", Value::of_str("test"));
    w.set("a.u8", u8);
    w.set("a.i16", i16);
    w.set("a.u32", Value::of_u32(9));
    w.set("a.i32", Value::of_i32(-9));
    w.set("a.u64", Value::of_u64(1));
    w.set("a.f32", Value::of_f32(1.5f));
    w.set("a.f64", f64);
    w.set("a.bool", Value::of_bool(true));
    w.set("a.strs", Value::of_strings({"x", "yy", ""}));
    w.set("a.nested", Value::of_array(ValueType::ARRAY, {Value::of_i32s({1, 2}), Value::of_f32s({3})}));
    tensor(w, "t.f32", GgmlType::F32, {4, 2});
    tensor(w, "t.q8", GgmlType::Q8_0, {32});
    w.write(dir + "/values.gguf");
  }
  {
    Writer w;
    w.set("general.alignment", Value::of_u32(64));
    tensor(w, "a", GgmlType::F16, {8});
    tensor(w, "b", GgmlType::Q4_K, {256});
    tensor(w, "c", GgmlType::BF16, {2, 2, 2, 2});
    w.write(dir + "/aligned.gguf");
  }
  {
    Writer w;  // vocab-only
    w.set("general.architecture", Value::of_str("llama"));
    w.set("tokenizer.ggml.model", Value::of_str("gpt2"));
    w.set("tokenizer.ggml.tokens", Value::of_strings({"a", "b", "ab", "<s>"}));
    w.set("tokenizer.ggml.merges", Value::of_strings({"a b"}));
    w.set("tokenizer.ggml.token_type", Value::of_i32s({1, 1, 1, 3}));
    w.write(dir + "/vocab.gguf");
  }
  {
    Writer w;  // a 1-layer llama with d 8, 2 heads, 1 KV head, ff 16, vocab 4
    w.set("general.architecture", Value::of_str("llama"));
    w.set("llama.block_count", Value::of_u32(1));
    w.set("llama.embedding_length", Value::of_u32(8));
    w.set("llama.feed_forward_length", Value::of_u32(16));
    w.set("llama.attention.head_count", Value::of_u32(2));
    w.set("llama.attention.head_count_kv", Value::of_u32(1));
    w.set("llama.context_length", Value::of_u32(64));
    tensor(w, "token_embd.weight", GgmlType::F32, {8, 4});
    tensor(w, "output_norm.weight", GgmlType::F32, {8});
    tensor(w, "blk.0.attn_norm.weight", GgmlType::F32, {8});
    tensor(w, "blk.0.attn_q.weight", GgmlType::F32, {8, 8});
    tensor(w, "blk.0.attn_k.weight", GgmlType::F32, {8, 4});
    tensor(w, "blk.0.attn_v.weight", GgmlType::F32, {8, 4});
    tensor(w, "blk.0.attn_output.weight", GgmlType::F32, {8, 8});
    tensor(w, "blk.0.ffn_norm.weight", GgmlType::F32, {8});
    tensor(w, "blk.0.ffn_gate.weight", GgmlType::F32, {8, 16});
    tensor(w, "blk.0.ffn_up.weight", GgmlType::F32, {8, 16});
    tensor(w, "blk.0.ffn_down.weight", GgmlType::F32, {16, 8});
    w.write(dir + "/model.gguf");
  }
  std::printf("wrote corpus to %s\n", dir.c_str());
  return 0;
}
