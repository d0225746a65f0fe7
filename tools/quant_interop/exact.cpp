// Bit-level format check against llama.cpp, both directions, via GGUF files:
//   exact quantize <f32.gguf> <out.gguf> <type>  every 2-D tensor quantized with kvtax's quantizer
//   exact compare <quantized.gguf> <f32.gguf>    kvtax's dequantization of each quantized tensor vs
//                                                the f32 values llama.cpp decoded from the same bytes
// (llama-quantize --allow-requantize ... F32 does the decoding). Exit status 1 on a mismatch.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "ggml/quants.h"
#include "gguf/gguf.h"

using namespace kvtax;

namespace {

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

int compare(const std::string& quant_path, const std::string& f32_path) {
  const auto q = gguf::File::open(quant_path);
  const auto ref = gguf::File::open(f32_path);
  bool ok = true;
  int checked = 0;
  for (const auto& t : q->tensors()) {
    if (t.type == GgmlType::F32) continue;
    const auto* rt = ref->tensor(t.name);
    if (!rt || rt->type != GgmlType::F32 || rt->n_elements() != t.n_elements()) fail("{}: no f32 twin", t.name);
    const int64_t n = int64_t(t.n_elements());
    std::vector<float> mine(static_cast<size_t>(n));
    dequantize_row(t.type, q->tensor_data(t).data(), mine.data(), n);
    const auto* theirs = reinterpret_cast<const float*>(ref->tensor_data(*rt).data());
    double max_diff = 0, max_abs = 0;
    int64_t differing = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double d = std::fabs(double(mine[size_t(i)]) - theirs[i]);
      differing += d != 0;
      max_diff = std::max(max_diff, d);
      max_abs = std::max(max_abs, double(std::fabs(theirs[i])));
    }
    // Identical formulas may still round differently in the last bit (operation order).
    const bool pass = max_diff <= 1e-6 * max_abs;
    ok &= pass;
    ++checked;
    std::printf("%s %-26s %-5s differing %lld/%lld, max |diff| %.3g (max |value| %.3g)\n", pass ? "ok  " : "FAIL",
                t.name.c_str(), std::string(ggml_type_name(t.type)).c_str(), (long long)differing, (long long)n,
                max_diff, max_abs);
  }
  if (checked == 0) fail("{}: no quantized tensors", quant_path);
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc == 5 && std::string(argv[1]) == "quantize") return quantize(argv[2], argv[3], argv[4]);
    if (argc == 4 && std::string(argv[1]) == "compare") return compare(argv[2], argv[3]);
    std::fprintf(stderr, "usage: %s quantize <f32.gguf> <out.gguf> <type> | compare <quant.gguf> <f32.gguf>\n", argv[0]);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
