// Usage: check <dir of f32 originals> <dir of quantized tensors>...
// Decodes llama.cpp-quantized tensors with kvtax's dequantizers and checks the error against the
// f32 originals (a wrong layout gives errors near 1, not a few percent), then runs kvtax's matmul
// on them against matmul_reference. Exit status 1 on any failure.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "ggml/quants.h"
#include "ops/cpu/matmul.h"

using namespace kvtax;

namespace {
std::vector<uint8_t> slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}
double rel_rms(const float* a, const float* b, size_t n) {
  double e = 0, s = 0;
  for (size_t i = 0; i < n; ++i) e += (double(a[i]) - b[i]) * (double(a[i]) - b[i]), s += double(b[i]) * b[i];
  return std::sqrt(e / s);
}
// ~1.5x what llama.cpp's quantizers reach on N(0,1) weights.
const std::map<GgmlType, double> kBound = {
    {GgmlType::Q8_0, 0.008}, {GgmlType::Q6_K, 0.027}, {GgmlType::Q5_K, 0.055}, {GgmlType::Q4_K, 0.11},
    {GgmlType::Q4_0, 0.13},  {GgmlType::Q4_1, 0.12},  {GgmlType::Q5_0, 0.065}, {GgmlType::Q5_1, 0.06},
    {GgmlType::Q3_K, 0.23},  {GgmlType::Q2_K, 0.45},  {GgmlType::F16, 0.001}, {GgmlType::BF16, 0.005}};
}  // namespace

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s <f32 dir> <quantized dir>...\n", argv[0]);
    return 2;
  }
  ThreadPool pool(2);
  bool ok = true;
  for (int a = 2; a < argc; ++a) {
    for (const auto& e : fs::directory_iterator(argv[a])) {
      const std::string fn = e.path().filename().string();  // name.type.ne0.ne1.bin
      const auto p4 = fn.rfind(".bin"), p3 = fn.rfind('.', p4 - 1), p2 = fn.rfind('.', p3 - 1),
                 p1 = fn.rfind('.', p2 - 1);
      const std::string name = fn.substr(0, p1);
      const auto type = GgmlType(std::stoi(fn.substr(p1 + 1, p2 - p1 - 1)));
      const int64_t ne0 = std::stoll(fn.substr(p2 + 1, p3 - p2 - 1)), ne1 = std::stoll(fn.substr(p3 + 1, p4 - p3 - 1));
      const auto q = slurp(e.path().string());
      const auto orig = slurp(std::string(argv[1]) + "/" + name + ".0." + std::to_string(ne0) + "." +
                              std::to_string(ne1) + ".bin");
      if (orig.size() != size_t(ne0 * ne1) * 4 || q.size() != ggml_row_bytes(type, uint64_t(ne0)) * size_t(ne1)) {
        std::printf("FAIL %s: size mismatch\n", fn.c_str());
        ok = false;
        continue;
      }
      std::vector<float> y(size_t(ne0 * ne1));
      dequantize_row(type, q.data(), y.data(), ne0 * ne1);
      const double err = rel_rms(y.data(), reinterpret_cast<const float*>(orig.data()), y.size());
      const auto bound = kBound.find(type);
      const bool deq_ok = bound != kBound.end() && err <= bound->second;
      double mm_err = 0;
      if (matmul_supported(type)) {
        const Weight w{type, q.data(), ne1, ne0};
        std::vector<float> x(size_t(ne0 * 5)), ref(size_t(ne1 * 5)), got(size_t(ne1 * 5));
        for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(float(i) * 0.37f);
        matmul_reference(w, x.data(), 5, ref.data());
        matmul(w, x.data(), 5, got.data(), pool);
        mm_err = rel_rms(got.data(), ref.data(), ref.size());
      }
      const bool pass = deq_ok && mm_err < 0.01;
      ok &= pass;
      std::printf("%s %-28s %-5s dequant rel rms %.4f  matmul vs reference %.5f\n", pass ? "ok  " : "FAIL",
                  name.c_str(), std::string(ggml_type_name(type)).c_str(), err, mm_err);
    }
  }
  std::printf(ok ? "all passed\n" : "FAILURES\n");
  return ok ? 0 : 1;
}
