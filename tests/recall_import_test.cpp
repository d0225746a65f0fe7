// kvtax import-recall: a raw file from tools/recall/train.py becomes a llama GGUF; malformed files are refused
// with an error that names the problem.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/f16.h"
#include "gguf/gguf.h"
#include "model/config.h"
#include "model/recall_import.h"

using namespace kvtax;
namespace fs = std::filesystem;

namespace {

struct Raw {
  nlohmann::json header;
  std::vector<float> data;
};

// A 1-layer model: d 8, 2 heads of 4, 1 KV head, ffn 16, 260 tokens (bytes + specials + 1 merge).
Raw tiny_raw() {
  Raw r;
  const uint64_t V = 260, d = 8, ffn = 16;
  std::vector<std::string> tokens;
  for (int i = 0; i < 256; ++i) tokens.push_back(std::string(1, char('a' + i % 26)) + std::to_string(i));
  tokens.insert(tokens.end(), {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "xy"});
  std::vector<int> types(V, 1);
  types[256] = types[257] = types[258] = 3;
  r.header = {{"format", "kvtax-recall-raw"}, {"version", 1}, {"step", 7},
              {"config", {{"vocab", V}, {"d", d}, {"layers", 1}, {"heads", 2}, {"kv_heads", 1}, {"head_dim", 4},
                          {"ffn", ffn}, {"theta", 1e6}, {"eps", 1e-5}}},
              {"tokenizer", {{"tokens", tokens}, {"types", types}, {"merges", {"x y"}}, {"bos", 256}, {"eos", 258}}}};
  std::vector<std::pair<std::string, std::vector<uint64_t>>> t = {
      {"token_embd.weight", {V, d}},   {"blk.0.attn_norm.weight", {d}},     {"blk.0.attn_q.weight", {8, d}},
      {"blk.0.attn_k.weight", {4, d}}, {"blk.0.attn_v.weight", {4, d}},      {"blk.0.attn_output.weight", {d, 8}},
      {"blk.0.ffn_norm.weight", {d}},  {"blk.0.ffn_gate.weight", {ffn, d}}, {"blk.0.ffn_up.weight", {ffn, d}},
      {"blk.0.ffn_down.weight", {d, ffn}}, {"output_norm.weight", {d}}};
  nlohmann::json index = nlohmann::json::array();
  for (const auto& [name, shape] : t) {
    uint64_t n = 1;
    for (auto s : shape) n *= s;
    index.push_back({{"name", name}, {"shape", shape}, {"offset", r.data.size() * 4}});
    for (uint64_t i = 0; i < n; ++i) r.data.push_back(float(int(r.data.size() % 17) - 8) * 0.125f);
  }
  r.header["tensors"] = index;
  return r;
}

std::string write_raw(const Raw& r, const std::string& tag, size_t cut = 0) {
  const std::string path = (fs::temp_directory_path() / ("kvtax-raw-" + tag + "-" + std::to_string(getpid()))).string();
  const std::string h = r.header.dump();
  std::string bytes = "KVTXRAW1";
  const uint64_t n = h.size();
  bytes.append(reinterpret_cast<const char*>(&n), 8);
  bytes += h;
  bytes.append(reinterpret_cast<const char*>(r.data.data()), r.data.size() * 4);
  if (cut) bytes.resize(bytes.size() - cut);
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
  return path;
}

std::string import_error(const std::string& raw) {
  RecallImportOptions o;
  o.raw_path = raw;
  o.out_path = raw + ".gguf";
  try {
    import_recall(o);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(RecallImport, WritesLlamaGguf) {
  const Raw r = tiny_raw();
  RecallImportOptions o;
  o.raw_path = write_raw(r, "ok");
  o.out_path = o.raw_path + ".gguf";
  const auto res = import_recall(o);
  EXPECT_EQ(res.n_vocab, 260u);
  EXPECT_EQ(res.step, 7u);
  EXPECT_EQ(res.n_params, r.data.size());
  auto f = gguf::File::open(o.out_path);
  const ModelConfig c = read_config(*f);
  EXPECT_EQ(c.n_layers, 1u);
  EXPECT_EQ(c.n_kv_heads, 1u);
  EXPECT_EQ(c.head_dim, 4u);
  EXPECT_TRUE(c.tied_output);
  const auto* q = f->tensor("blk.0.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->type, GgmlType::F16);
  EXPECT_EQ(q->ne, (std::vector<uint64_t>{8, 8}));  // PyTorch [out, in] reversed
  const auto* nrm = f->tensor("output_norm.weight");
  ASSERT_NE(nrm, nullptr);
  EXPECT_EQ(nrm->type, GgmlType::F32);
  // the q matrix's bytes are the raw floats in order, as f16
  const size_t q_off = r.header["tensors"][2]["offset"].get<size_t>() / 4;
  const auto bytes = f->tensor_data(*q);
  for (size_t i = 0; i < 64; ++i) {
    uint16_t h;
    std::memcpy(&h, bytes.data() + 2 * i, 2);
    EXPECT_EQ(f16_to_f32(h), r.data[q_off + i]);
  }
  EXPECT_EQ(f->get_string("tokenizer.ggml.model").value_or(""), "gpt2");
  fs::remove(o.raw_path);
  fs::remove(o.out_path);
}

TEST(RecallImport, RefusesMalformedFiles) {
  const Raw good = tiny_raw();
  std::string p = write_raw(good, "cut", 4);
  EXPECT_NE(import_error(p).find("runs past the data"), std::string::npos) << import_error(p);
  fs::remove(p);

  Raw shape = good;
  shape.header["tensors"][3]["shape"] = {8, 8};
  p = write_raw(shape, "shape");
  EXPECT_NE(import_error(p).find("blk.0.attn_k.weight"), std::string::npos) << import_error(p);
  fs::remove(p);

  Raw vocab = good;
  vocab.header["tokenizer"]["tokens"].erase(0);
  p = write_raw(vocab, "vocab");
  EXPECT_NE(import_error(p).find("tokens"), std::string::npos) << import_error(p);
  fs::remove(p);

  p = (fs::temp_directory_path() / ("kvtax-raw-magic-" + std::to_string(getpid()))).string();
  std::ofstream(p) << "NOTRAW00 and more bytes";
  EXPECT_NE(import_error(p).find("KVTXRAW1"), std::string::npos);
  std::ofstream(p, std::ios::binary).write("KVTXRAW1\xff\xff\xff\xff\xff\xff\xff\x7f", 16);
  EXPECT_NE(import_error(p).find("header length"), std::string::npos) << import_error(p);
  fs::remove(p);
  EXPECT_NE(import_error("/nonexistent/raw").find("cannot open"), std::string::npos);
}
