// Times the CUDA kernels against the device's measured copy bandwidth: decode attention for every KV
// codec (llama3-8b shape: 32 query / 8 KV heads, head_dim 128) at several depths, and decode GEMV for
// every weight type. Inputs are random (never zeros) and rotated over enough copies that each timed
// call reads from device memory, not from the 50 MB L2. Prints a table; --json writes one line per row.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#if KVTAX_HAVE_CUBLAS
#include <cublas_v2.h>
#endif

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "core/f16.h"
#include "cuda/attention.h"
#include "cuda/gemv.h"
#include "cuda/runtime.h"
#include "gpu_bench_util.h"
#include "ggml/quants.h"
#include "ggml/types.h"
#include "kv/codecs/codec.h"
#include "kv/rotation.h"

namespace kvtax {
namespace {

using gpu_bench::copy_bandwidth;
using gpu_bench::time_calls;

constexpr size_t kRotateBytes = size_t(768) << 20;  // at least this much data between two reads of a copy

std::vector<float> normal(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

struct Row {
  std::string what, variant;
  int64_t size;  // depth (attention) or rows x cols (GEMV)
  double us, bytes, gbs, pct_copy;
};

void bench_attention(const std::vector<int>& depths, const std::vector<std::string>& codecs, double copy_gbs,
                     std::vector<Row>& rows) {
  const int n_kv = 8, n_heads = 32, d = 128, pool = 4096;
  const auto q = normal(size_t(n_heads) * d, 1);
  cuda::Buffer qd(q.size() * 4), out(q.size() * 4);
  qd.upload(q.data(), q.size() * 4);
  for (int ci = 0; ci < kv::kNumCodecs; ++ci) {
    const auto c = kv::CodecId(ci);
    const kv::CodecInfo& info = kv::codec(c);
    if (!codecs.empty() && std::find(codecs.begin(), codecs.end(), info.name) == codecs.end()) continue;
    const size_t rb = info.row_bytes(d);
    // A pool of encoded random rows per head, tiled along the context.
    std::vector<uint8_t> kp(size_t(pool) * rb), vp(size_t(pool) * rb);
    const auto kf = normal(size_t(pool) * d, 10 + ci), vf = normal(size_t(pool) * d, 20 + ci);
    std::vector<float> tmp(d);
    for (int t = 0; t < pool; ++t) {
      for (auto [src, dst] : {std::pair{kf.data(), kp.data()}, std::pair{vf.data(), vp.data()}}) {
        std::copy(src + size_t(t) * d, src + size_t(t + 1) * d, tmp.begin());
        if (info.rotated) kv::rotate(tmp.data(), d, tmp.data());
        info.encode(tmp.data(), d, dst + size_t(t) * rb);
      }
    }
    for (int L : depths) {
      const double bytes = 2.0 * n_kv * double(L) * rb;
      const int copies = int(std::clamp<double>(std::ceil(double(kRotateBytes) / bytes), 1, 64));
      std::vector<std::unique_ptr<cuda::DeviceKv>> kvs;
      for (int i = 0; i < copies; ++i) {
        kvs.push_back(std::make_unique<cuda::DeviceKv>(c, n_kv, d, L));
        for (int h = 0; h < n_kv; ++h)
          for (int p = 0; p < L; p += pool) {
            const int n = std::min(pool, L - p);
            kvs.back()->write_rows(h, p, n, kp.data(), vp.data());
          }
      }
      cuda::Buffer scratch(cuda::decode_scratch_bytes(*kvs[0], n_heads));
      const double ms = time_calls(
          [&](int i, cudaStream_t st) {
            cuda::decode_attention(*kvs[i % copies], qd.as<float>(), n_heads, out.as<float>(), scratch.get(), st);
          },
          20);
      const double gbs = bytes / (ms * 1e-3) / 1e9;
      rows.push_back({"attention", info.name, L, ms * 1e3, bytes, gbs, 100.0 * gbs / copy_gbs});
      std::fprintf(stderr, "attention %-5s %7d: %8.1f us %7.0f GB/s (%d splits)\n", info.name, L, ms * 1e3, gbs,
                   cuda::decode_splits(*kvs[0], n_heads));
    }
  }
}

struct GemvShape { int64_t rows, cols; };

// The GEMV table over `shapes` x `types` (empty: the llama3-8b shapes and every staged type), so that a profiler can be
// pointed at one of them.
void bench_gemv(double copy_gbs, std::vector<Row>& rows, std::vector<GemvShape> shapes, std::vector<GgmlType> types) {
  if (shapes.empty()) shapes = {{4096, 4096}, {14336, 4096}, {4096, 14336}};
  if (types.empty()) types = {GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K};
#if KVTAX_HAVE_CUBLAS
  cublasHandle_t blas;
  if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS) blas = nullptr;
#endif
  for (const GemvShape& s : shapes) {
    const auto x = normal(size_t(s.cols), 3);
    cuda::Buffer xd(x.size() * 4), y(size_t(s.rows) * 4), scratch(cuda::gemv_scratch_bytes(s.cols));
    xd.upload(x.data(), x.size() * 4);
    const int distinct = 512;
    const auto wf = normal(size_t(distinct) * s.cols, 4);
    for (GgmlType t : types) {
      const size_t rb = ggml_row_bytes(t, uint64_t(s.cols));
      std::vector<uint8_t> pool(rb * distinct), full(rb * s.rows);
      for (int r = 0; r < distinct; ++r) quantize_row(t, wf.data() + size_t(r) * s.cols, pool.data() + r * rb, s.cols);
      for (int64_t r = 0; r < s.rows; ++r) std::copy_n(pool.data() + (r % distinct) * rb, rb, full.data() + r * rb);
      const double bytes = double(rb) * s.rows;
      const int copies = int(std::clamp<double>(std::ceil(double(kRotateBytes) / bytes), 1, 128));
      std::vector<std::unique_ptr<cuda::DeviceWeight>> ws;
      for (int i = 0; i < copies; ++i) ws.push_back(std::make_unique<cuda::DeviceWeight>(t, s.rows, s.cols, full.data()));
      const double ms = time_calls(
          [&](int i, cudaStream_t st) {
            cuda::gemv(*ws[i % copies], xd.as<float>(), y.as<float>(), scratch.get(), st);
          },
          50);
      const double gbs = bytes / (ms * 1e-3) / 1e9;
      rows.push_back({"gemv", std::string(ggml_type_name(t)), s.rows * 100000 + s.cols, ms * 1e3, bytes, gbs,
                      100.0 * gbs / copy_gbs});
      std::fprintf(stderr, "gemv %-5s %6ldx%-6ld: %7.2f us %7.0f GB/s\n", std::string(ggml_type_name(t)).c_str(),
                   long(s.rows), long(s.cols), ms * 1e3, gbs);
      if (t == GgmlType::Q8_0 || t == GgmlType::Q4_0 || t == GgmlType::Q4_K) {
        for (int rpw : {1, 2, 4}) {  // rows per warp of the quantized kernels (the default picks by shape)
          cuda::set_gemv_rows_per_warp(rpw);
          const double rms = time_calls(
              [&](int i, cudaStream_t st) {
                cuda::gemv(*ws[i % copies], xd.as<float>(), y.as<float>(), scratch.get(), st);
              },
              50);
          const double rg = bytes / (rms * 1e-3) / 1e9;
          rows.push_back({fmt::format("gemv-r{}", rpw), std::string(ggml_type_name(t)), s.rows * 100000 + s.cols,
                          rms * 1e3, bytes, rg, 100.0 * rg / copy_gbs});
        }
        cuda::set_gemv_rows_per_warp(0);
      }
      {
        // As the decode step runs it (cuda/gemv.h's fusions): quantized types with x's codes already in the
        // scratch (the norm wrote them), float types with the SwiGLU pairs epilogue (rows/2 outputs).
        const bool q = cuda::gemv_quantizes_x(t);
        if (q) cuda::gemv(*ws[0], xd.as<float>(), y.as<float>(), scratch.get());  // the codes, once
        const cuda::GemvFusion f{nullptr, q, !q};
        const double fms = time_calls(
            [&](int i, cudaStream_t st) {
              cuda::gemv(*ws[i % copies], xd.as<float>(), y.as<float>(), scratch.get(), st, f);
            },
            50);
        const double fg = bytes / (fms * 1e-3) / 1e9;
        rows.push_back({q ? "gemv-xready" : "gemv-swiglu", std::string(ggml_type_name(t)), s.rows * 100000 + s.cols,
                        fms * 1e3, bytes, fg, 100.0 * fg / copy_gbs});
      }
#if KVTAX_HAVE_CUBLAS
      if (blas && (t == GgmlType::F16 || t == GgmlType::BF16)) {
        // cuBLAS on the same weights (x converted to the weight type: GemmEx needs equal A/B types).
        std::vector<uint16_t> xh(x.size());
        for (size_t i = 0; i < x.size(); ++i) xh[i] = t == GgmlType::F16 ? f32_to_f16(x[i]) : f32_to_bf16(x[i]);
        cuda::Buffer xhd(xh.size() * 2);
        xhd.upload(xh.data(), xh.size() * 2);
        const cudaDataType dt = t == GgmlType::F16 ? CUDA_R_16F : CUDA_R_16BF;
        const float one = 1.0f, zero = 0.0f;
        bool ok = true;
        double bms = 0;
        try {  // cuBLAS inside a graph capture: a reference row only, so a refusal skips it
          bms = time_calls(
              [&](int i, cudaStream_t st) {
                // Row-major W (rows x cols) is column-major cols x rows: y = W^T-as-stored x.
                ok &= cublasSetStream(blas, st) == CUBLAS_STATUS_SUCCESS &&
                      cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, int(s.rows), 1, int(s.cols), &one,
                                   ws[i % copies]->data(), dt, int(s.cols), xhd.get(), dt, int(s.cols), &zero,
                                   y.get(), CUDA_R_32F, int(s.rows), CUBLAS_COMPUTE_32F,
                                   CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS;
              },
              50);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "cuBLAS row skipped: %s\n", e.what());
          ok = false;
        }
        if (ok) {
          const double bg = bytes / (bms * 1e-3) / 1e9;
          rows.push_back({"gemv-cublas", std::string(ggml_type_name(t)), s.rows * 100000 + s.cols, bms * 1e3, bytes,
                          bg, 100.0 * bg / copy_gbs});
        }
      }
#endif
    }
  }
#if KVTAX_HAVE_CUBLAS
  if (blas) cublasDestroy(blas);
#endif
}

int main_impl(int argc, char** argv) {
  CLI::App app{"kvtax CUDA kernel benchmark"};
  std::vector<int> depths{2048, 8192, 32768, 131072};
  std::vector<std::string> codecs;
  std::string json;
  int waves = 1;
  bool no_gemv = false, no_attn = false;
  app.add_option("--depths", depths, "attention context depths")->delimiter(',');
  app.add_option("--codecs", codecs, "KV codecs to time (default: all)")->delimiter(',');
  app.add_option("--waves", waves, "attention grid size in waves of resident blocks");
  app.add_option("--json", json, "write one JSON object per result line here");
  app.add_flag("--no-gemv", no_gemv);
  app.add_flag("--no-attention", no_attn);
  std::vector<std::string> gemv_shapes, gemv_types;
  app.add_option("--gemv-shapes", gemv_shapes, "GEMV shapes ROWSxCOLS (default: 4096x4096,14336x4096,4096x14336)")
      ->delimiter(',');
  app.add_option("--gemv-types", gemv_types, "GEMV weight types (default: f16,bf16,q8_0,q4_0,q4_K)")->delimiter(',');
  CLI11_PARSE(app, argc, argv);
  std::vector<GemvShape> shapes;
  for (const std::string& sh : gemv_shapes) {
    GemvShape g{};
    char x = 0, rest = 0;
    const int got = std::sscanf(sh.c_str(), "%" SCNd64 "%c%" SCNd64 "%c", &g.rows, &x, &g.cols, &rest);
    if (got != 3 || x != 'x' || g.rows < 1 || g.cols < 1 || g.cols % 256 != 0) {
      std::fprintf(stderr, "--gemv-shapes: '%s' is not ROWSxCOLS with COLS a multiple of 256\n", sh.c_str());
      return 2;
    }
    shapes.push_back(g);
  }
  std::vector<GgmlType> types;
  for (const std::string& name : gemv_types) {
    const auto t = ggml_type_from_name(name);
    if (!t) {
      std::fprintf(stderr, "--gemv-types: unknown type '%s'\n", name.c_str());
      return 2;
    }
    types.push_back(*t);
  }
  if (!cuda::available()) {
    std::fprintf(stderr, "no CUDA device\n");
    return 2;
  }
  const std::string dev = cuda::device_summary();
  std::printf("device: %s\n", dev.c_str());
  const double copy_gbs = copy_bandwidth();
  std::printf("device-to-device copy: %.0f GB/s (read + write); attention grid: %d wave(s)\n", copy_gbs, waves);
  std::vector<Row> rows;
  cuda::set_decode_waves(waves);
  if (!no_attn) bench_attention(depths, codecs, copy_gbs, rows);
  if (!no_gemv) bench_gemv(copy_gbs, rows, shapes, types);
  std::printf("\n%-12s %-6s %14s %10s %10s %9s %7s\n", "kernel", "type", "size", "us", "MB", "GB/s", "%copy");
  for (const Row& r : rows) {
    const std::string size = r.what == "attention" ? fmt::format("ctx {}", r.size)
                                                   : fmt::format("{}x{}", r.size / 100000, r.size % 100000);
    std::printf("%-12s %-6s %14s %10.2f %10.1f %9.0f %6.1f%%\n", r.what.c_str(), r.variant.c_str(), size.c_str(),
                r.us, r.bytes / 1e6, r.gbs, r.pct_copy);
  }
  if (!json.empty()) {
    std::ofstream f(json);
    f << fmt::format("{{\"device\":\"{}\",\"copy_gbs\":{:.1f}}}\n", dev, copy_gbs);
    for (const Row& r : rows)
      f << fmt::format("{{\"kernel\":\"{}\",\"type\":\"{}\",\"size\":{},\"us\":{:.3f},\"bytes\":{:.0f},\"gbs\":{:.1f},"
                       "\"pct_copy\":{:.2f}}}\n",
                       r.what, r.variant, r.size, r.us, r.bytes, r.gbs, r.pct_copy);
  }
  return 0;
}

}  // namespace
}  // namespace kvtax

int main(int argc, char** argv) {
  return kvtax::gpu_bench::guarded_main("kvtax_gpu_bench", kvtax::main_impl, argc, argv);
}
