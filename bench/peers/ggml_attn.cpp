// llama.cpp's CPU attention kernel (ggml_flash_attn_ext) alone, one query row, at the same shapes and
// depths as kvtax_attn_bench, so bench/attn_vs_llama.sh can print ratios from one run of each.
// Built on demand against the llama.cpp build in ~/.cache/kvtax/peers (never in CI, never committed):
//   ggml_attn [--threads 2] [--depths 4096,...] [--types f16,q8_0,q4_0] [--shapes 32/8,32/32]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "ggml-cpu.h"
#include "ggml.h"
#include "../bench_util.h"

namespace {

using kvtax_bench::split;

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

ggml_type type_of(const std::string& s) {
  if (s == "f16") return GGML_TYPE_F16;
  if (s == "q8_0") return GGML_TYPE_Q8_0;
  if (s == "q4_0") return GGML_TYPE_Q4_0;
  std::fprintf(stderr, "unknown type %s (f16, q8_0, q4_0)\n", s.c_str());
  std::exit(2);
}

// Random N(0,1) rows written in the tensor's type.
void fill(ggml_tensor* t, std::mt19937& rng) {
  std::normal_distribution<float> nd;
  const int64_t row = t->ne[0], rows = ggml_nrows(t);
  std::vector<float> buf(size_t(row) * 256);
  for (int64_t r0 = 0; r0 < rows; r0 += 256) {
    const int64_t n = std::min<int64_t>(256, rows - r0);
    for (int64_t i = 0; i < n * row; ++i) buf[i] = nd(rng);
    char* dst = static_cast<char*>(t->data) + r0 * t->nb[1];
    if (t->type == GGML_TYPE_F32) std::copy(buf.begin(), buf.begin() + n * row, reinterpret_cast<float*>(dst));
    else if (t->type == GGML_TYPE_F16) ggml_fp32_to_fp16_row(buf.data(), reinterpret_cast<ggml_fp16_t*>(dst), n * row);
    else ggml_quantize_chunk(t->type, buf.data(), dst, 0, n, row, nullptr);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2;
  std::vector<int> depths = {4096, 16384, 32768, 65536};
  std::vector<std::string> types = {"f16", "q8_0", "q4_0"};
  std::vector<std::string> shapes = {"32/8", "32/32"};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) { std::fprintf(stderr, "%s needs a value\n", a.c_str()); return 2; }
    const std::string v = argv[++i];
    if (a == "--threads") threads = std::atoi(v.c_str());
    else if (a == "--depths") { depths.clear(); for (auto& s : split(v)) depths.push_back(std::atoi(s.c_str())); }
    else if (a == "--types") types = split(v);
    else if (a == "--shapes") shapes = split(v);
    else { std::fprintf(stderr, "unknown option %s\n", a.c_str()); return 2; }
  }
  ggml_cpu_init();
  const int d = 128;
  std::printf("%-6s %-6s %7s %10s %9s\n", "shape", "type", "depth", "ms", "KV MB");
  for (const auto& shp : shapes) {
    const int n_heads = std::atoi(shp.c_str()), n_kv = std::atoi(shp.c_str() + shp.find('/') + 1);
    for (const auto& tname : types) {
      const ggml_type type = type_of(tname);
      for (int depth : depths) {
        const size_t kv_bytes = 2 * ggml_row_size(type, d) * size_t(depth) * n_kv;
        ggml_init_params ip{kv_bytes + size_t(n_heads) * d * 8 + (size_t(64) << 20), nullptr, false};
        ggml_context* ctx = ggml_init(ip);
        ggml_tensor* q = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, d, 1, n_heads, 1);
        ggml_tensor* k = ggml_new_tensor_4d(ctx, type, d, depth, n_kv, 1);
        ggml_tensor* v = ggml_new_tensor_4d(ctx, type, d, depth, n_kv, 1);
        std::mt19937 rng(1);
        fill(q, rng);
        fill(k, rng);
        fill(v, rng);
        ggml_tensor* out = ggml_flash_attn_ext(ctx, q, k, v, nullptr, 1.0f / std::sqrt(float(d)), 0.0f, 0.0f);
        ggml_flash_attn_ext_set_prec(out, GGML_PREC_F32);
        ggml_cgraph* gf = ggml_new_graph(ctx);
        ggml_build_forward_expand(gf, out);
        ggml_graph_compute_with_ctx(ctx, gf, threads);  // warm-up
        std::vector<double> ts;
        const double t_start = now();
        while (ts.size() < 5 || (now() - t_start < 0.5 && ts.size() < 200)) {
          const double t0 = now();
          ggml_graph_compute_with_ctx(ctx, gf, threads);
          ts.push_back(now() - t0);
        }
        std::sort(ts.begin(), ts.end());
        std::printf("%-6s %-6s %7d %10.3f %9.1f\n", shp.c_str(), tname.c_str(), depth, ts[ts.size() / 2] * 1e3,
                    kv_bytes / 1e6);
        std::fflush(stdout);
        ggml_free(ctx);
      }
    }
  }
  return 0;
}
