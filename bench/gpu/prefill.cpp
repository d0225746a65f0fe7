// Prefill TTFT on the device (bench/gpu/run.sh part c): one GGUF (a 32-layer llama3-8b shape from
// `kvtax make-model`), every codec, a prompt of --length tokens through the batched prefill (cuBLAS GEMMs,
// tensor-core attention over the paged KV) in evals of max_batch() tokens, timed with the host clock from
// the first eval to the logits of the last token on the host.
//
// FLOP floor: 2 * (matmul parameters of every layer) * L + 2 * vocab * d (logits of the last row) + the
// causal attention, 4 * layers * heads * head_dim * L (L + 1) / 2, over the dense bf16 peak. The peak is
// the H200 SXM datasheet's 989.4 TFLOP/s (dense bf16, no sparsity): no kernel runs faster than that. The
// table also gives the floor at the rate cuBLAS reaches here on an 8192^3 bf16 product of random data.
// The attention alone is timed as well: layer 0's pages filled with random rows, then the prompt's chunks
// through prefill_attention as the prefill issues them, times the layers. With --trace, one more prefill per codec
// is traced in place (CUPTI, kernel_trace.h): what each kind of kernel adds to it, the rest of TTFT included.
#include <CLI/CLI.hpp>
#include <cublas_v2.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <utility>
#include <vector>

#include "cuda/device_decoder.h"
#include "cuda/gemm.h"
#include "cuda/ops.h"
#include "cuda/prefill_attention.h"
#include "cuda/runtime.h"
#include "gpu_bench_util.h"
#include "kernel_trace.h"
#include "model/model.h"

namespace kvtax {
namespace {

using gpu_bench::split;

constexpr double kDatasheetBf16 = 989.4e12;

// bf16 8192^3 through cuBLAS on random data, median of 10 after 3 warm-ups (FLOP/s).
double cublas_bf16_rate() {
  const int n = 8192;
  cuda::Buffer f(size_t(n) * n * 4), a(size_t(n) * n * 2), b(size_t(n) * n * 2), c(size_t(n) * n * 4);
  cuda::check(cuda::ops::fill_normal(f.as<float>(), int64_t(n) * n, 7, nullptr), "fill");
  cuda::check(cuda::detail::to_half(f.as<float>(), int64_t(n) * n, true, a.get(), nullptr), "bf16");
  cuda::check(cuda::ops::fill_normal(f.as<float>(), int64_t(n) * n, 8, nullptr), "fill");
  cuda::check(cuda::detail::to_half(f.as<float>(), int64_t(n) * n, true, b.get(), nullptr), "bf16");
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return 0;
  const float one = 1, zero = 0;
  cuda::EventTimer t;
  std::vector<float> ms;
  for (int i = 0; i < 13; ++i) {
    t.start();
    cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, &one, a.get(), CUDA_R_16BF, n, b.get(), CUDA_R_16BF, n, &zero,
                 c.get(), CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    const float x = t.stop_ms();
    if (i >= 3) ms.push_back(x);
  }
  cublasDestroy(h);
  cuda::check(cudaGetLastError(), "cuBLAS rate");
  std::sort(ms.begin(), ms.end());
  return 2.0 * n * double(n) * n / (ms[ms.size() / 2] * 1e-3);
}

double matmul_params(const Model& m) {
  double p = 0;
  for (const LayerWeights& w : m.layers())
    for (const Weight* x : {&w.wq, &w.wk, &w.wv, &w.wo, &w.w_gate, &w.w_up, &w.w_down})
      if (x->data) p += double(x->rows) * double(x->cols);
  return p;
}

// The GEMM side of one prefill of `length` tokens, timed alone with events: the products run_chunk issues
// (layer 0's matrices, chunks of mb rows, random 16-bit activations, gate|up written as 16-bit values, wo and
// down added into f32 values) times the layers. The inputs come as 16-bit values from the kernels before the
// products (the norm, the attention, SwiGLU), so no rounding pass is timed. BF16/F16/quantized weights only (F32
// returns zeros).
struct GemmTimes { double gemm = 0, dequant = 0; };

GemmTimes gemm_times(const cuda::CudaBackend& b, int mb, int length, cudaStream_t s) {
  const ModelConfig& c = b.model().config();
  const int64_t d = c.d_model, qd = c.n_heads * c.head_dim, kvd = c.n_kv_heads * c.head_dim, ff = c.d_ff;
  const cuda::CudaBackend::Layer& w = b.layers()[0];
  using Out = cuda::GemmRunner::Out;  // as the prefill writes them: wo and down add into the residual stream
  struct Call { const cuda::DeviceWeight* w; int64_t row0, rows; Out out; int input; };  // input 0..2
  std::vector<Call> calls;
  if (w.wqkv) {
    calls = {{w.wqkv.get(), 0, qd, Out::f32, 0}, {w.wqkv.get(), qd, kvd, Out::f32, 0},
             {w.wqkv.get(), qd + kvd, kvd, Out::f32, 0}};
  } else {
    calls = {{w.wq.get(), 0, qd, Out::f32, 0}, {w.wk.get(), 0, kvd, Out::f32, 0}, {w.wv.get(), 0, kvd, Out::f32, 0}};
  }
  calls.push_back({w.wo.get(), 0, d, Out::add, 1});
  if (w.gate_up) {
    calls.push_back({w.gate_up.get(), 0, 2 * ff, Out::half, 1});
  } else {
    calls.push_back({w.gate.get(), 0, ff, Out::half, 1});
    calls.push_back({w.up.get(), 0, ff, Out::half, 1});
  }
  calls.push_back({w.down.get(), 0, d, Out::add, 2});
  for (const Call& k : calls)
    if (k.w->type() == GgmlType::F32) return {};
  const int64_t widest = std::max(d, ff);
  cuda::Buffer x(size_t(mb) * widest * 4), y(size_t(mb) * 2 * widest * 4), h(size_t(mb) * widest * 2);
  y.fill(0);  // wo and down add into it
  cuda::Buffer dq(size_t(cuda::GemmRunner::kDequantRows) * widest * 2);
  cuda::check(cuda::ops::fill_normal(x.as<float>(), int64_t(mb) * widest, 17, s), "x");
  const bool bf = cuda::GemmRunner::takes_bf16(*calls[0].w);  // F16 weights take f16 input, the rest bf16
  cuda::check(cuda::detail::to_half(x.as<float>(), int64_t(mb) * widest, bf, h.get(), s), "x");
  cuda::GemmRunner G(s);
  cuda::EventTimer et;
  GemmTimes t;
  auto pass = [&](bool timed) {
    GemmTimes p;
    for (int off = 0; off < length; off += mb) {
      const int n = std::min(mb, length - off);
      for (const Call& k : calls) {
        et.start(s);
        G.run_rounded(*k.w, k.row0, k.rows, h.get(), n, y.get(), k.rows, k.out);
        p.gemm += et.stop_ms(s) * 1e-3;
        const GgmlType ty = k.w->type();
        if (ty == GgmlType::Q8_0 || ty == GgmlType::Q4_0 || ty == GgmlType::Q4_K) {
          et.start(s);
          for (int64_t r = 0; r < k.rows; r += cuda::GemmRunner::kDequantRows)
            cuda::check(cuda::detail::dequant_rows_bf16(ty, k.w->data(), k.w->row_bytes(), k.row0 + r,
                                                        std::min(cuda::GemmRunner::kDequantRows, k.rows - r),
                                                        int(k.w->cols()), dq.get(), s), "dequant");
          p.dequant += et.stop_ms(s) * 1e-3;
        }
      }
    }
    if (timed) t = p;
  };
  pass(false);  // warm-up: handle, scratch
  pass(true);
  t.gemm *= c.n_layers, t.dequant *= c.n_layers;
  return t;
}

int run(int argc, char** argv) {
  CLI::App app{"Prefill TTFT on the CUDA device vs the FLOP floor"};
  std::string model_path, codecs = "f32,f16,bf16,fp8,q8,q4,q4r,tq4,tq3", json, label;
  int length = 32768, reps = 1, chunk = 0;
  bool trace = false;
  app.add_option("-m,--model", model_path, "GGUF model")->required()->check(CLI::ExistingFile);
  app.add_option("--codecs", codecs, "KV codecs");
  app.add_option("--length", length, "prompt tokens")->check(CLI::Range(2, 1 << 20));
  app.add_option("--reps", reps, "timed prefills per codec (median)")->check(CLI::Range(1, 100));
  app.add_option("--label", label, "weights label for the table (default: the first layer's type)");
  app.add_option("--json", json, "append one JSON line per row to this file");
  app.add_option("--chunk", chunk, "prompt rows per prefill chunk (default: the decoder's)")
      ->check(CLI::Range(1, cuda::CudaDecoder::kMaxBatch));
  app.add_flag("--trace", trace, "after each codec's row, trace one more prefill (CUPTI): time added per kernel kind");
  CLI11_PARSE(app, argc, argv);
#ifndef KVTAX_HAVE_CUPTI
  if (trace) throw std::runtime_error("--trace: this build found no CUPTI headers");
#endif

  auto model = Model::load(model_path);
  const ModelConfig& c = model->config();
  if (label.empty()) label = std::string(ggml_type_name(model->layers()[0].wq.type));
  const double measured = cublas_bf16_rate();
  cuda::CudaBackend backend(*model);
  const double L = length, P = matmul_params(*model);
  const double attn_flop = 4.0 * c.n_layers * c.n_heads * c.head_dim * L * (L + 1) / 2;
  const double flop = 2.0 * P * L + 2.0 * double(c.n_vocab) * c.d_model + attn_flop;
  const double floor_s = flop / kDatasheetBf16, floor_meas = measured > 0 ? flop / measured : 0;
  std::printf("%s\nmodel %s: %u layers, %.2f G matmul parameters; prompt %d tokens: %.1f TFLOP (attention %.1f)\n"
              "floor %.3f s at the 989.4 TFLOP/s datasheet dense bf16 peak; %.3f s at the %.0f TFLOP/s cuBLAS "
              "reaches here (8192^3 bf16)\n",
              cuda::device_summary().c_str(), model_path.c_str(), c.n_layers, P / 1e9, length, flop / 1e12,
              attn_flop / 1e12, floor_s, floor_meas, measured / 1e12);
  std::printf("%-7s %-5s %7s %9s %9s %8s %9s %10s %9s\n", "weights", "KV", "prompt", "TTFT s", "tok/s", "x floor",
              "x cuBLAS", "attn s", "attn TF/s");
  std::ofstream jf;
  if (!json.empty()) jf.open(json, std::ios::app);
  std::vector<int32_t> toks(static_cast<size_t>(length));
  for (int i = 0; i < length; ++i) toks[size_t(i)] = int32_t((uint64_t(i) * 7919 + 13) % c.n_vocab);
  std::vector<float> logits(c.n_vocab);
  bool first = true;
  for (const std::string& codec : split(codecs)) {
    auto dec = backend.decoder(parse_kv_spec(codec), length + 8, 0);
    auto* cd = static_cast<cuda::CudaDecoder*>(dec.get());
    if (chunk > 0) cd->set_prefill_chunk(chunk);
    const int mb = cd->prefill_chunk();
    if (std::exchange(first, false)) {  // the GEMM side in the chunks the prefill runs (one weight type per model)
      const GemmTimes gt = gemm_times(backend, mb, length, nullptr);
      std::printf("prefill chunk: %d rows; breakdown of one prefill (events, each step alone): GEMM products %.3f s "
                  "(%.0f TFLOP/s over the matmul FLOP), of which weight dequantization %.3f s; attention per codec "
                  "below; the rest of TTFT is norms, RoPE, KV encode, residuals, SwiGLU, logits and launch gaps\n",
                  mb, gt.gemm, gt.gemm > 0 ? 2.0 * P * L / gt.gemm / 1e12 : 0.0, gt.dequant);
    }
    auto prefill = [&](int n) {
      dec->reset();
      for (int p = 0; p < n; p += mb) dec->eval(toks.data() + p, std::min(mb, n - p), logits.data());
    };
    prefill(std::min(length, 2 * mb));  // warm-up: cuBLAS handles, scratch, module load
    std::vector<double> s;
    for (int r = 0; r < reps; ++r) {
      const auto a = std::chrono::steady_clock::now();
      prefill(length);
      s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
    }
    std::sort(s.begin(), s.end());
    const double ttft = s[s.size() / 2];
    // The attention alone, over layer 0's pages filled with random rows.
    cd->fill_random(length, 99);
    const int nh = int(c.n_heads), hd = int(c.head_dim);
    cuda::Buffer q(size_t(mb) * nh * hd * 4), out(size_t(mb) * nh * hd * 4);
    cuda::EventTimer et;
    double attn_ms = 0;
    for (int p = 0; p < length; p += mb) {
      const int n = std::min(mb, length - p);
      cuda::check(cuda::ops::fill_normal(q.as<float>(), int64_t(n) * nh * hd, uint64_t(p) + 5, cd->stream()), "q");
      et.start(cd->stream());
      cuda::prefill_attention(cd->layer_view(0, p + n), q.as<float>(), n, p, nh, out.as<float>(), cd->stream());
      attn_ms += et.stop_ms(cd->stream());
    }
    const double attn_s = attn_ms * 1e-3 * c.n_layers;
    std::printf("%-7s %-5s %7d %9.3f %9.0f %8.2f %9.2f %10.3f %9.0f\n", label.c_str(), codec.c_str(), length, ttft,
                L / ttft, ttft / floor_s, floor_meas > 0 ? ttft / floor_meas : 0.0, attn_s, attn_flop / attn_s / 1e12);
    std::fflush(stdout);
#ifdef KVTAX_HAVE_CUPTI
    if (trace) {
      gpu_bench::KernelTrace tr;
      prefill(length);
      std::printf("%s", gpu_bench::trace_summary(tr.take(), 1).c_str());
      std::fflush(stdout);
    }
#endif
    if (jf)
      jf << fmt::format(R"({{"bench":"prefill","weights":"{}","kv":"{}","prompt":{},"ttft_s":{:.4f},)"
                        R"("floor_s":{:.4f},"x_floor":{:.3f},"cublas_tflops":{:.1f},"attn_s":{:.4f},)"
                        R"("attn_tflops":{:.1f},"reps":{},"min_s":{:.4f},"max_s":{:.4f},"chunk":{}}})",
                        label, codec, length, ttft, floor_s, ttft / floor_s, measured / 1e12, attn_s,
                        attn_flop / attn_s / 1e12, reps, s.front(), s.back(), mb)
         << "\n";
  }
  std::printf("device peak %.2f GiB (weights + KV pages + activations + prefill scratch)\n",
              backend.peak_device_bytes() / 1073741824.0);
  return 0;
}

}  // namespace
}  // namespace kvtax

int main(int argc, char** argv) {
  return kvtax::gpu_bench::guarded_main("kvtax_gpu_prefill_bench", kvtax::run, argc, argv);
}
