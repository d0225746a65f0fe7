#include "model/recall_import.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/error.h"
#include "core/f16.h"
#include "gguf/gguf.h"

namespace kvtax {
namespace {

using gguf::Value;
using nlohmann::json;

// Same turn format as the training data (tools/recall/data.py): ChatML, no system prompt.
constexpr const char* kChatml =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("import-recall: cannot open '{}'", path);
  in.seekg(0, std::ios::end);
  const auto n = in.tellg();
  if (n < 0) fail("import-recall: cannot read '{}'", path);
  std::vector<uint8_t> b(static_cast<size_t>(n));
  in.seekg(0);
  if (!in.read(reinterpret_cast<char*>(b.data()), n)) fail("import-recall: cannot read '{}'", path);
  return b;
}

uint32_t cfg_u32(const json& c, const char* key, const std::string& path) {
  if (!c.contains(key) || !c[key].is_number_unsigned() || c[key].get<uint64_t>() == 0 ||
      c[key].get<uint64_t>() > (1u << 20))
    fail("import-recall: {}: config.{} is missing or not a positive integer up to 2^20", path, key);
  return c[key].get<uint32_t>();
}

}  // namespace

RecallImportResult import_recall(const RecallImportOptions& opt) {
  const std::vector<uint8_t> raw = read_file(opt.raw_path);
  const std::string& P = opt.raw_path;
  if (raw.size() < 16 || std::memcmp(raw.data(), "KVTXRAW1", 8) != 0)
    fail("import-recall: {} is not a recall raw file (magic KVTXRAW1 missing)", P);
  uint64_t hlen;
  std::memcpy(&hlen, raw.data() + 8, 8);
  if (hlen > raw.size() - 16) fail("import-recall: {}: header length {} runs past the file ({} bytes)", P, hlen, raw.size());
  json h;
  try {
    h = json::parse(raw.begin() + 16, raw.begin() + 16 + std::ptrdiff_t(hlen));
  } catch (const std::exception& e) {
    fail("import-recall: {}: header is not valid JSON: {}", P, e.what());
  }
  if (!h.is_object() || !h.contains("config") || !h.contains("tokenizer") || !h.contains("tensors"))
    fail("import-recall: {}: header lacks config, tokenizer or tensors", P);
  const uint8_t* data = raw.data() + 16 + hlen;
  const uint64_t data_size = raw.size() - 16 - hlen;

  const json& c = h["config"];
  const uint32_t d = cfg_u32(c, "d", P), layers = cfg_u32(c, "layers", P), heads = cfg_u32(c, "heads", P);
  const uint32_t kv_heads = cfg_u32(c, "kv_heads", P), head_dim = cfg_u32(c, "head_dim", P);
  const uint32_t ffn = cfg_u32(c, "ffn", P), vocab = cfg_u32(c, "vocab", P);
  if (!c.contains("theta") || !c["theta"].is_number() || !c.contains("eps") || !c["eps"].is_number())
    fail("import-recall: {}: config.theta / config.eps missing", P);
  if (heads % kv_heads) fail("import-recall: {}: heads {} not a multiple of kv_heads {}", P, heads, kv_heads);

  const json& t = h["tokenizer"];
  std::vector<std::string> tokens, merges;
  std::vector<int32_t> types;
  try {
    tokens = t.at("tokens").get<std::vector<std::string>>();
    merges = t.at("merges").get<std::vector<std::string>>();
    types = t.at("types").get<std::vector<int32_t>>();
  } catch (const std::exception& e) {
    fail("import-recall: {}: tokenizer tokens/merges/types unreadable: {}", P, e.what());
  }
  if (tokens.size() != vocab || types.size() != vocab)
    fail("import-recall: {}: {} tokens and {} types for a vocabulary of {}", P, tokens.size(), types.size(), vocab);

  gguf::Writer w;
  w.set("general.architecture", Value::of_str("llama"));
  w.set("general.type", Value::of_str("model"));
  w.set("general.name", Value::of_str(opt.name));
  w.set("general.license", Value::of_str("MIT"));
  w.set("llama.block_count", Value::of_u32(layers));
  w.set("llama.context_length", Value::of_u32(opt.context_length));
  w.set("llama.embedding_length", Value::of_u32(d));
  w.set("llama.feed_forward_length", Value::of_u32(ffn));
  w.set("llama.attention.head_count", Value::of_u32(heads));
  w.set("llama.attention.head_count_kv", Value::of_u32(kv_heads));
  w.set("llama.rope.freq_base", Value::of_f32(c["theta"].get<float>()));
  w.set("llama.attention.layer_norm_rms_epsilon", Value::of_f32(c["eps"].get<float>()));
  w.set("llama.attention.key_length", Value::of_u32(head_dim));
  w.set("llama.attention.value_length", Value::of_u32(head_dim));
  w.set("llama.rope.dimension_count", Value::of_u32(head_dim));
  w.set("llama.vocab_size", Value::of_u32(vocab));
  w.set("general.file_type", Value::of_u32(1));  // mostly f16
  w.set("general.quantization_version", Value::of_u32(2));
  w.set("tokenizer.ggml.model", Value::of_str("gpt2"));
  w.set("tokenizer.ggml.pre", Value::of_str("gpt-2"));
  w.set("tokenizer.ggml.tokens", Value::of_strings(tokens));
  w.set("tokenizer.ggml.token_type", Value::of_i32s(types));
  w.set("tokenizer.ggml.merges", Value::of_strings(merges));
  w.set("tokenizer.ggml.bos_token_id", Value::of_u32(t.value("bos", 256u)));
  w.set("tokenizer.ggml.eos_token_id", Value::of_u32(t.value("eos", 258u)));
  w.set("tokenizer.ggml.add_bos_token", Value::of_bool(false));
  w.set("tokenizer.chat_template", Value::of_str(kChatml));
  if (h.contains("step") && h["step"].is_number_unsigned()) w.set("kvtax.recall.train_step", Value::of_u64(h["step"].get<uint64_t>()));

  // Expected tensors and their PyTorch shapes ([out, in]; GGUF ne is the reverse).
  std::vector<std::pair<std::string, std::vector<uint64_t>>> want = {{"token_embd.weight", {vocab, d}}};
  for (uint32_t l = 0; l < layers; ++l) {
    const std::string b = fmt::format("blk.{}.", l);
    const uint64_t q = uint64_t(heads) * head_dim, kv = uint64_t(kv_heads) * head_dim;
    want.push_back({b + "attn_norm.weight", {d}});
    want.push_back({b + "attn_q.weight", {q, d}});
    want.push_back({b + "attn_k.weight", {kv, d}});
    want.push_back({b + "attn_v.weight", {kv, d}});
    want.push_back({b + "attn_output.weight", {d, q}});
    want.push_back({b + "ffn_norm.weight", {d}});
    want.push_back({b + "ffn_gate.weight", {ffn, d}});
    want.push_back({b + "ffn_up.weight", {ffn, d}});
    want.push_back({b + "ffn_down.weight", {d, ffn}});
  }
  want.push_back({"output_norm.weight", {d}});

  const json& tens = h["tensors"];
  if (!tens.is_array() || tens.size() != want.size())
    fail("import-recall: {}: {} tensors listed, expected {}", P, tens.is_array() ? tens.size() : 0, want.size());
  RecallImportResult res;
  res.n_vocab = vocab;
  res.step = h.value("step", uint64_t(0));
  for (size_t i = 0; i < want.size(); ++i) {
    const json& e = tens[i];
    const auto& [name, shape] = want[i];
    if (!e.is_object() || e.value("name", std::string()) != name)
      fail("import-recall: {}: tensor {} should be '{}'", P, i, name);
    std::vector<uint64_t> got;
    try {
      got = e.at("shape").get<std::vector<uint64_t>>();
    } catch (const std::exception&) {
      fail("import-recall: {}: tensor '{}' has no readable shape", P, name);
    }
    if (got != shape) fail("import-recall: {}: tensor '{}' has shape [{}], expected [{}]", P, name, fmt::join(got, ", "), fmt::join(shape, ", "));
    if (!e.contains("offset") || !e["offset"].is_number_unsigned()) fail("import-recall: {}: tensor '{}' has no offset", P, name);
    uint64_t n = 1;
    for (uint64_t s : shape) n *= s;
    const uint64_t off = e["offset"].get<uint64_t>();
    if (off > data_size || n * 4 > data_size - off)
      fail("import-recall: {}: tensor '{}' ({} floats at offset {}) runs past the data ({} bytes)", P, name, n, off, data_size);
    res.n_params += n;
    std::vector<float> f(n);
    std::memcpy(f.data(), data + off, n * 4);
    for (float x : f)
      if (!std::isfinite(x)) fail("import-recall: {}: tensor '{}' holds a non-finite value", P, name);
    std::vector<uint64_t> ne(shape.rbegin(), shape.rend());
    if (shape.size() == 1) {
      std::vector<uint8_t> bytes(n * 4);
      std::memcpy(bytes.data(), f.data(), bytes.size());
      w.add_tensor(name, GgmlType::F32, std::move(ne), std::move(bytes));
    } else {
      std::vector<uint8_t> bytes(n * 2);
      for (uint64_t k = 0; k < n; ++k) {
        const uint16_t v = f32_to_f16(f[k]);
        std::memcpy(bytes.data() + 2 * k, &v, 2);
      }
      w.add_tensor(name, GgmlType::F16, std::move(ne), std::move(bytes));
    }
  }
  w.write(opt.out_path);
  res.file_bytes = std::filesystem::file_size(opt.out_path);
  return res;
}

}  // namespace kvtax
