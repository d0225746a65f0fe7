// Cross-checks kvtax's block formats against llama.cpp (driven by run.sh, which has llama-quantize do
// the peer's side). Subcommands:
//   make-random <vocab.gguf> <out.gguf>        a 1-layer random llama GGUF, all F32, rows multiples of 256,
//                                              with the tokenizer.* and general.* keys of a llama GGUF
//   quantize <f32.gguf> <out.gguf> <type>      every 2-D tensor quantized with kvtax's quantizer
//   compare <quantized.gguf> <f32.gguf>        kvtax's dequantization of each quantized tensor vs the f32
//                                              values llama.cpp decoded from the same bytes (bit level)
//   check <f32.gguf> <quantized.gguf>...       llama.cpp-quantized tensors decoded by kvtax vs the f32
//                                              originals (a wrong layout gives errors near 1, not a few
//                                              percent), and kvtax's matmul on them vs matmul_reference
// Exit status 1 on any mismatch, 2 on bad usage.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "ggml/quants.h"
#include "gguf/gguf.h"
#include "ops/cpu/matmul.h"

using namespace kvtax;
using gguf::Value;

namespace {

int make_random(const std::string& vocab_path, const std::string& out) {
  const auto vocab = gguf::File::open(vocab_path);
  constexpr uint32_t E = 256, F = 512, H = 8;
  gguf::Writer w;
  for (const auto& kv : vocab->metadata())
    if (kv.key.starts_with("tokenizer.") || kv.key.starts_with("general.")) w.set(kv.key, kv.value);
  if (vocab->get_string("general.architecture") != "llama") fail("{}: not a llama GGUF", vocab_path);
  const auto tokens = vocab->get_strings("tokenizer.ggml.tokens");
  if (!tokens || tokens->empty()) fail("{}: no tokenizer.ggml.tokens", vocab_path);
  const uint64_t V = tokens->size();
  if (V % 256 != 0) fail("{}: vocabulary of {} is not a multiple of 256 (output rows must be)", vocab_path, V);
  w.set("general.alignment", Value::of_u32(32));
  w.set("llama.context_length", Value::of_u32(256));
  w.set("llama.embedding_length", Value::of_u32(E));
  w.set("llama.feed_forward_length", Value::of_u32(F));
  w.set("llama.attention.head_count", Value::of_u32(H));
  w.set("llama.attention.head_count_kv", Value::of_u32(H));
  w.set("llama.block_count", Value::of_u32(1));
  w.set("llama.rope.dimension_count", Value::of_u32(E / H));
  w.set("llama.attention.layer_norm_rms_epsilon", Value::of_f32(1e-5f));
  const std::vector<std::pair<std::string, std::vector<uint64_t>>> shapes = {
      {"token_embd.weight", {E, V}},        {"output_norm.weight", {E}},          {"output.weight", {E, V}},
      {"blk.0.attn_q.weight", {E, E}},      {"blk.0.attn_k.weight", {E, E}},      {"blk.0.attn_v.weight", {E, E}},
      {"blk.0.attn_output.weight", {E, E}}, {"blk.0.attn_norm.weight", {E}},      {"blk.0.ffn_gate.weight", {E, F}},
      {"blk.0.ffn_down.weight", {F, E}},    {"blk.0.ffn_up.weight", {E, F}},      {"blk.0.ffn_norm.weight", {E}}};
  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const auto& [name, ne] : shapes) {
    uint64_t n = 1;
    for (uint64_t d : ne) n *= d;
    std::vector<float> v(n);
    for (float& x : v) x = normal(rng);
    std::vector<uint8_t> bytes(n * sizeof(float));
    std::memcpy(bytes.data(), v.data(), bytes.size());
    w.add_tensor(name, GgmlType::F32, ne, std::move(bytes));
  }
  w.write(out);
  return 0;
}

int quantize(const std::string& in, const std::string& out, const std::string& type_name) {
  const auto type = ggml_type_from_name(type_name);
  if (!type || !can_quantize(*type)) fail("cannot quantize to '{}'", type_name);
  const auto f = gguf::File::open(in);
  gguf::Writer w;
  for (const auto& kv : f->metadata()) w.set(kv.key, kv.value);
  for (const auto& t : f->tensors()) {
    const auto src = f->tensor_data(t);
    if (t.type != GgmlType::F32) fail("{}: expected f32 input", t.name);
    if (t.ne.size() != 2) {
      w.add_tensor(t.name, t.type, t.ne, std::vector<uint8_t>(src.begin(), src.end()));
      continue;
    }
    const int64_t cols = int64_t(t.ne[0]), rows = int64_t(t.ne[1]);
    const size_t stride = ggml_row_bytes(*type, uint64_t(cols));
    std::vector<uint8_t> q(stride * size_t(rows));
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(row.data(), src.data() + size_t(r * cols) * 4, size_t(cols) * 4);
      quantize_row(*type, row.data(), q.data() + size_t(r) * stride, cols);
    }
    w.add_tensor(t.name, *type, t.ne, std::move(q));
  }
  w.write(out);
  return 0;
}

// The f32 twin of a tensor (same name and element count) or an error.
std::vector<float> f32_twin(const gguf::File& ref, const gguf::TensorInfo& t) {
  const auto* rt = ref.tensor(t.name);
  if (!rt || rt->type != GgmlType::F32 || rt->n_elements() != t.n_elements())
    fail("{}: no f32 twin of the same size in {}", t.name, ref.path());
  std::vector<float> v(rt->n_elements());
  std::memcpy(v.data(), ref.tensor_data(*rt).data(), v.size() * sizeof(float));
  return v;
}

std::vector<float> decode(const gguf::File& f, const gguf::TensorInfo& t) {
  std::vector<float> v(t.n_elements());
  dequantize_row(t.type, f.tensor_data(t).data(), v.data(), int64_t(v.size()));
  return v;
}

int compare(const std::string& quant_path, const std::string& f32_path) {
  const auto q = gguf::File::open(quant_path);
  const auto ref = gguf::File::open(f32_path);
  bool ok = true;
  int checked = 0;
  for (const auto& t : q->tensors()) {
    if (t.type == GgmlType::F32) continue;
    const auto theirs = f32_twin(*ref, t);
    const auto mine = decode(*q, t);
    double max_diff = 0, max_abs = 0;
    size_t differing = 0;
    for (size_t i = 0; i < mine.size(); ++i) {
      const double d = std::fabs(double(mine[i]) - theirs[i]);
      differing += d != 0;
      max_diff = std::max(max_diff, d);
      max_abs = std::max(max_abs, double(std::fabs(theirs[i])));
    }
    // Identical formulas may still round differently in the last bit (operation order).
    const bool pass = max_diff <= 1e-6 * max_abs;
    ok &= pass;
    ++checked;
    std::printf("%s %-26s %-5s differing %zu/%zu, max |diff| %.3g (max |value| %.3g)\n", pass ? "ok  " : "FAIL",
                t.name.c_str(), std::string(ggml_type_name(t.type)).c_str(), differing, mine.size(), max_diff,
                max_abs);
  }
  if (checked == 0) fail("{}: no quantized tensors", quant_path);
  return ok ? 0 : 1;
}

double rel_rms(const float* a, const float* b, size_t n) {
  double e = 0, s = 0;
  for (size_t i = 0; i < n; ++i) e += (double(a[i]) - b[i]) * (double(a[i]) - b[i]), s += double(b[i]) * b[i];
  return std::sqrt(e / s);
}

// ~1.5x the relative RMS error llama.cpp's quantizers reach on N(0,1) weights.
const std::map<GgmlType, double> kBound = {
    {GgmlType::Q8_0, 0.008}, {GgmlType::Q6_K, 0.027}, {GgmlType::Q5_K, 0.055}, {GgmlType::Q4_K, 0.11},
    {GgmlType::Q4_0, 0.13},  {GgmlType::Q4_1, 0.12},  {GgmlType::Q5_0, 0.065}, {GgmlType::Q5_1, 0.06},
    {GgmlType::Q3_K, 0.23},  {GgmlType::Q2_K, 0.45},  {GgmlType::F16, 0.001},  {GgmlType::BF16, 0.005}};

int check(const std::string& f32_path, const std::vector<std::string>& quant_paths) {
  const auto ref = gguf::File::open(f32_path);
  ThreadPool pool(2);
  bool ok = true;
  for (const auto& path : quant_paths) {
    const auto q = gguf::File::open(path);
    for (const auto& t : q->tensors()) {
      if (t.ne.size() != 2 || t.type == GgmlType::F32) continue;
      const auto orig = f32_twin(*ref, t);
      const auto y = decode(*q, t);
      const double err = rel_rms(y.data(), orig.data(), y.size());
      const auto bound = kBound.find(t.type);
      const bool deq_ok = bound != kBound.end() && err <= bound->second;
      double mm_err = 0;
      if (matmul_supported(t.type)) {
        const int64_t cols = int64_t(t.ne[0]), rows = int64_t(t.ne[1]);
        const Weight w{t.type, q->tensor_data(t).data(), rows, cols};
        std::vector<float> x(size_t(cols * 5)), want(size_t(rows * 5)), got(size_t(rows * 5));
        for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(float(i) * 0.37f);
        matmul_reference(w, x.data(), 5, want.data());
        matmul(w, x.data(), 5, got.data(), pool);
        mm_err = rel_rms(got.data(), want.data(), want.size());
      }
      const bool pass = deq_ok && mm_err < 0.01;
      ok &= pass;
      std::printf("%s %-28s %-5s dequant rel rms %.4f (bound %.3g)  matmul vs reference %.5f\n",
                  pass ? "ok  " : "FAIL", t.name.c_str(), std::string(ggml_type_name(t.type)).c_str(), err,
                  bound != kBound.end() ? bound->second : 0.0, mm_err);
    }
  }
  std::printf(ok ? "all passed\n" : "FAILURES\n");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> a(argv + 1, argv + argc);
  try {
    if (a.size() == 3 && a[0] == "make-random") return make_random(a[1], a[2]);
    if (a.size() == 4 && a[0] == "quantize") return quantize(a[1], a[2], a[3]);
    if (a.size() == 3 && a[0] == "compare") return compare(a[1], a[2]);
    if (a.size() >= 3 && a[0] == "check") return check(a[1], std::vector<std::string>(a.begin() + 2, a.end()));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr,
               "usage: %s make-random <vocab.gguf> <out.gguf> | quantize <f32.gguf> <out.gguf> <type> |\n"
               "       compare <quantized.gguf> <f32.gguf> | check <f32.gguf> <quantized.gguf>...\n",
               argv[0]);
  return 2;
}
