// Whole decode step on the device (bench/gpu/run.sh part b): one GGUF (e.g. a 32-layer llama3-8b shape
// from `kvtax make-model`), every codec, the KV filled to each depth with random vectors encoded on the
// device, then `--steps` single-token evals timed with the host clock (each ends with the logits on the
// host, as in generation). Roofline: the bytes one step must read (every weight matrix once, one
// embedding row, the KV at that depth) over the measured device-to-device copy bandwidth. Beside each step, "graph
// b2b": the step's graph launched --steps times back to back, the host out of the loop (its share is the difference:
// ~0.03 ms on the H200, docs/perf.md "Session 25"). With --parts, each
// row is followed by where the step's time goes (step_parts below); with --trace, by a timeline of `--steps`
// more steps in place (kernel_trace.h: what each kind of kernel adds to the step), every kernel appended to a CSV.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cuda/attention.h"
#include "cuda/device_decoder.h"
#include "cuda/gemv.h"
#include "cuda/kv_encode.h"
#include "cuda/ops.h"
#include "cuda/runtime.h"
#include "gpu_bench_util.h"
#include "model/model.h"
#ifdef KVTAX_HAVE_CUPTI
#include "kernel_trace.h"
#endif

namespace kvtax {
namespace {

using gpu_bench::copy_bandwidth;
using gpu_bench::split;

// The step's kernels by class, each class launched alone over every layer back to back on the decoder's stream
// (as the step launches them: the same matrices, shapes and fusions), captured into a CUDA graph and replayed,
// median of 5; ms per step. Where the step fuses its residual adds and norms into the wo and down GEMVs
// (CudaDecoder::fused_norm), there is no norms class: wo and down run with that epilogue, and the GEMVs after a
// norm with its 1/rms. Every layer's matrices are distinct, so each GEMV reads its weights from memory as
// in the step. The down GEMV of quantized weights includes its pass over x (SwiGLU). The step minus these
// classes is the rest: the embedding, the output norm, the logits' copy to the host, per-head q/k norms and
// biases where the model has them, and the gaps between kernels that PDL and the CUDA graph do not hide. Inputs
// are zeros (timing only).
struct StepPart {
  const char* name;
  double ms;
};

std::vector<StepPart> step_parts(const cuda::CudaBackend& b, cuda::CudaDecoder& cd, int depth) {
  const ModelConfig& c = b.model().config();
  const int nh = int(c.n_heads), hd = int(c.head_dim);
  const int64_t widest = std::max<int64_t>({c.d_model, c.d_ff, int64_t(nh) * hd, 2 * int64_t(c.d_ff), c.n_vocab});
  const cudaStream_t s = cd.stream();
  cuda::Buffer x(size_t(widest) * 4), u(size_t(widest) * 4), y(size_t(widest) * 4), q(size_t(nh) * hd * 4),
      att(size_t(nh) * hd * 4), gs(cuda::gemv_scratch_bytes(widest)),
      as(cuda::decode_scratch_bytes(cd.layer_view(0, depth), nh));
  const bool fused = cd.fused_norm();
  cuda::Buffer res(size_t(c.d_model) * 4), ns(cuda::gemv_scratch_bytes(c.d_model)), ss(size_t(c.d_model) / 32 * 8);
  for (const cuda::Buffer* z : {&x, &u, &y, &q, &gs, &res, &ns, &ss})
    cuda::check(cudaMemsetAsync(z->get(), 0, z->bytes(), s), "zero");
  // The step's fusions around a norm: the GEMV before it adds into the residual and writes the norm's input, the
  // GEMVs after it apply its 1/rms.
  auto into_norm = [&](cuda::GemvFusion f, const cuda::Buffer& norm) {
    if (fused) {
      f.res = res.as<float>(), f.norm_w = norm.as<float>(), f.norm_x = y.as<float>();
      f.norm_scratch = ns.get(), f.ss_part = ss.as<double>();
    }
    return f;
  };
  auto after_norm = [&](cuda::GemvFusion f) {
    if (fused) f.rms_part = ss.as<double>(), f.rms_n = int(c.d_model), f.rms_eps = c.rms_eps;
    return f;
  };
  auto gemv = [&](const cuda::DeviceWeight* w, cuda::GemvFusion f = {}) {
    if (w) cuda::gemv(*w, x.as<float>(), y.as<float>(), gs.get(), s, f);
  };
  // Inputs that follow a norm or the attention: quantized weights find x's codes in the scratch (the norm or the
  // attention's merge wrote them).
  auto codes_ready = [](const cuda::DeviceWeight* w) {
    return cuda::GemvFusion{nullptr, w && cuda::gemv_quantizes_x(w->type())};
  };
  // The residual add + norm before the attention and before the FFN, each writing x's codes where the GEMV
  // after it quantizes x (as the step's add_norm does).
  auto add_norm = [&](const cuda::Buffer& w, const cuda::DeviceWeight* next) {
    const bool codes = next && cuda::gemv_quantizes_x(next->type());
    cuda::check(cuda::ops::add_rmsnorm(x.as<float>(), y.as<float>(), w.as<float>(), u.as<float>(), int(c.d_model),
                                       c.rms_eps, s, codes ? cuda::detail::gemv_quant_x(gs.get(), c.d_model)
                                                           : cuda::detail::QuantX{}),
                "norm");
  };
  using Launch = std::function<void(const cuda::CudaBackend::Layer&, int)>;
  std::vector<std::pair<const char*, Launch>> classes;
  if (!fused)
    classes.push_back({"norms", [&](const auto& w, int) {
                         add_norm(w.attn_norm, w.wqkv ? w.wqkv.get() : w.wq.get());
                         add_norm(w.ffn_norm, w.gate_up ? w.gate_up.get() : w.gate.get());
                       }});
  const std::vector<std::pair<const char*, Launch>> step = {
      {"kv_encode", [&](const auto&, int l) {  // RoPE + encode of one token, rewriting the row at depth - 1
         const float* k = y.as<float>();
         cuda::encode_kv_rope(cd.layer_target(l), q.as<float>(), nh, k, k + size_t(c.n_kv_heads) * hd, 1, depth - 1,
                              b.rope(), s);
       }},
      {"qkv", [&](const auto& w, int) {
         for (const auto* m : {w.wqkv.get(), w.wq.get(), w.wk.get(), w.wv.get()}) gemv(m, after_norm(codes_ready(m)));
       }},
      {"attention", [&](const auto& w, int l) {  // with the int8 codes of its output where wo quantizes x
         cuda::decode_attention(cd.layer_view(l, depth), q.as<float>(), nh, att.as<float>(), as.get(), s,
                                cuda::gemv_quantizes_x(w.wo->type()) ? gs.get() : nullptr);
       }},
      {"wo", [&](const auto& w, int) { gemv(w.wo.get(), into_norm(codes_ready(w.wo.get()), w.ffn_norm)); }},
      {"gate_up", [&](const auto& w, int) {
         if (w.gate_up && !cuda::gemv_quantizes_x(w.gate_up->type()))
           gemv(w.gate_up.get(), after_norm(cuda::GemvFusion{nullptr, false, true}));  // SwiGLU in the epilogue
         else
           for (const auto* m : {w.gate_up.get(), w.gate.get(), w.up.get()}) gemv(m, after_norm(codes_ready(m)));
       }},
      {"down", [&](const auto& w, int) {
         const auto f = cuda::gemv_quantizes_x(w.down->type()) ? cuda::GemvFusion{u.as<float>()} : cuda::GemvFusion{};
         gemv(w.down.get(), into_norm(f, w.attn_norm));  // (the step's last layer makes the output norm instead)
       }},
  };
  classes.insert(classes.end(), step.begin(), step.end());
  // One graph per class, replayed 5 times (median): the device's time, as in the step's own graph.
  auto median_ms = [&](const std::function<void()>& fn) {
    return gpu_bench::time_calls([&](int, cudaStream_t) { fn(); }, 1, 5, s);
  };
  std::vector<StepPart> parts;
  for (const auto& [name, launch] : classes)
    parts.push_back({name, median_ms([&] {
                       for (int l = 0; l < int(b.layers().size()); ++l) launch(b.layers()[size_t(l)], l);
                     })});
  const cuda::DeviceWeight& out = b.output();
  parts.push_back({"logits", median_ms([&] { gemv(&out, codes_ready(&out)); })});
  return parts;
}

constexpr int kMaxWarmup = 400;

int run(int argc, char** argv) {
  CLI::App app{"Whole-model decode step on the CUDA device vs the bandwidth roofline"};
  std::string model_path, codecs = "f16,fp8,q8,q4r", depths = "2048,8192,32768,131072", json, label, trace;
  int steps = 32;
  bool parts = false;
  double copy_gbs = 0;
  app.add_option("-m,--model", model_path, "GGUF model")->required()->check(CLI::ExistingFile);
  app.add_option("--codecs", codecs, "KV codecs");
  app.add_option("--depths", depths, "KV depths in tokens");
  app.add_option("--steps", steps, "timed decode steps per depth (median)")->check(CLI::Range(3, 10000));
  int warmup_ms = 300;
  app.add_option("--warmup-ms", warmup_ms,
                 "milliseconds of untimed steps before each row's timed ones (at least 3 steps, at most 400)")
      ->check(CLI::Range(0, 60000));
  app.add_option("--copy-gbs", copy_gbs, "copy bandwidth in GB/s (default: measured here)");
  app.add_option("--label", label, "weights label for the table (default: the first layer's type)");
  app.add_option("--json", json, "append one JSON line per row to this file");
  app.add_flag("--parts", parts, "after each row, the step's time by kernel class (each class alone, all layers)");
  app.add_option("--trace", trace, "after each row, trace --steps more steps (CUPTI) and append every kernel to this CSV");
  bool caller_logits = false;
  app.add_flag("--caller-logits", caller_logits,
               "each step's logits into a buffer of the bench's own (a host copy after the device's), not read in the "
               "decoder's page-locked row as generate() reads them");
  CLI11_PARSE(app, argc, argv);
#ifndef KVTAX_HAVE_CUPTI
  if (!trace.empty()) throw std::runtime_error("--trace: this build found no CUPTI headers");
#endif

  auto model = Model::load(model_path);
  const ModelConfig& c = model->config();
  if (label.empty()) label = std::string(ggml_type_name(model->layers()[0].wq.type));
  if (copy_gbs <= 0) copy_gbs = copy_bandwidth();
  const auto t0 = std::chrono::steady_clock::now();
  cuda::CudaBackend backend(*model);
  const double upload_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto& E = backend.embedding();
  const bool tied = &backend.output() == &E;
  // One step reads every matrix once and one embedding row (the whole table when it is also the output).
  const double weight_read = double(backend.weight_bytes()) - (tied ? 0.0 : double(E.bytes())) + double(E.row_bytes());
  std::printf("%s\nmodel %s: %u layers, weights %.2f GiB on the device (uploaded in %.1f s), %.2f GB read per step; "
              "copy bandwidth %.0f GB/s\n",
              cuda::device_summary().c_str(), model_path.c_str(), c.n_layers, backend.weight_bytes() / 1073741824.0,
              upload_s, weight_read / 1e9, copy_gbs);
  {
    // The host's share of a step that ends with the logits on the host, median of 50 each: their copy into pageable
    // memory, into page-locked memory (as the step does), and from there into the caller's buffer.
    const size_t bytes = size_t(c.n_vocab) * 4;
    cuda::Buffer dev(bytes);
    dev.fill(0);
    std::vector<float> pageable(c.n_vocab);
    cuda::HostBuffer pinned(bytes);
    auto median_us = [&](auto&& copy) {
      std::vector<double> us;
      for (int i = 0; i < 50; ++i) {
        const auto a = std::chrono::steady_clock::now();
        copy();
        us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - a).count());
      }
      std::sort(us.begin(), us.end());
      return us[us.size() / 2];
    };
    auto from_device = [&](void* dst) {
      return median_us([&] { cuda::check(cudaMemcpy(dst, dev.get(), bytes, cudaMemcpyDeviceToHost), "logits copy"); });
    };
    const double pageable_us = from_device(pageable.data()), pinned_us = from_device(pinned.as<void>());
    const double host_us = median_us([&] { std::memcpy(pageable.data(), pinned.as<void>(), bytes); });
    std::printf("logits to the host (%.0f KB): %.1f us into pageable memory; %.1f us into page-locked memory, then %.1f "
                "us into the caller's buffer\n",
                bytes / 1024.0, pageable_us, pinned_us, host_us);
  }
  std::printf("%-6s %-5s %7s %10s %9s %10s %9s %8s\n", "weights", "KV", "depth", "KV MB", "ms/tok", "floor ms",
              "% roof", "tok/s");
  std::ofstream jf;
  if (!json.empty()) jf.open(json, std::ios::app);
  const std::vector<std::string> depth_list = split(depths);
  int max_depth = 0;
  for (const auto& d : depth_list) max_depth = std::max(max_depth, std::stoi(d));
  std::vector<int32_t> tok(1, 1);
  std::vector<float> logits(c.n_vocab);
  for (const std::string& codec : split(codecs)) {
    // Room for the warm-up, the timed steps and (--trace) as many traced ones after the deepest fill.
    const int room = (trace.empty() ? 1 : 2) * steps + kMaxWarmup + 8;
    auto dec = backend.decoder(parse_kv_spec(codec), max_depth + room, 0);
    auto* cd = static_cast<cuda::CudaDecoder*>(dec.get());
    float* out = caller_logits ? logits.data() : cd->logits_row();
    for (const std::string& ds : depth_list) {
      const int depth = std::stoi(ds);
      cd->fill_random(depth, 1234 + uint64_t(depth));
      // Warm-up: pages, module load, and --warmup-ms of settling. Right after a 17 GB pool was freed (f16 at 128k), the
      // median of the next decoder's 2k steps, its first ~60 ms of them, was 0.35 ms higher, in host time (session 20).
      const auto w0 = std::chrono::steady_clock::now();
      int warm = 0;
      const auto settle = std::chrono::milliseconds(warmup_ms);
      for (; warm < kMaxWarmup && (warm < 3 || std::chrono::steady_clock::now() - w0 < settle); ++warm)
        cd->eval(tok.data(), 1, out);
      std::vector<double> ms;
      for (int i = 0; i < steps; ++i) {
        tok[0] = int32_t((i * 7919 + 13) % int(c.n_vocab));
        const auto a = std::chrono::steady_clock::now();
        cd->eval(tok.data(), 1, out);
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
      }
      std::sort(ms.begin(), ms.end());
      const double med = ms[ms.size() / 2];
      double b2b = 0;  // ms per step with the step's graph launched back to back (no host between steps)
      if (cd->has_graph()) {
        cd->replay_graph(2);
        const auto a = std::chrono::steady_clock::now();
        cd->replay_graph(steps);
        b2b = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count() / steps;
      }
      const double kv_bytes = double(depth + warm + steps / 2) * double(dec->kv_bytes_per_token());
      const double floor_ms = (weight_read + kv_bytes) / (copy_gbs * 1e9) * 1e3;
      std::printf("%-7s %-5s %7d %10.0f %9.3f %10.3f %8.1f%% %8.1f", label.c_str(), codec.c_str(), depth,
                  kv_bytes / 1e6, med, floor_ms, 100.0 * floor_ms / med, 1e3 / med);
      if (b2b > 0) std::printf("  graph b2b %.3f ms (%.1f%%)", b2b, 100.0 * floor_ms / b2b);
      std::printf("\n");
      std::fflush(stdout);
      if (jf)
        jf << fmt::format(R"({{"bench":"decode_step","weights":"{}","kv":"{}","depth":{},"ms_per_token":{:.4f},)"
                          R"("floor_ms":{:.4f},"pct_roofline":{:.2f},"weight_bytes":{:.0f},"kv_bytes":{:.0f},)"
                          R"("copy_gbs":{:.0f},"steps":{},"min_ms":{:.4f},"max_ms":{:.4f},"graph_b2b_ms":{:.4f}}})",
                          label, codec, depth, med, floor_ms, 100.0 * floor_ms / med, weight_read, kv_bytes,
                          copy_gbs, steps, ms.front(), ms.back(), b2b)
           << "\n";
      if (parts) {
        const std::vector<StepPart> p = step_parts(backend, *cd, depth);
        double sum = 0;
        std::string line, js;
        for (const StepPart& x : p) {
          sum += x.ms;
          line += fmt::format(" {} {:.3f}", x.name, x.ms);
          js += fmt::format(R"(,"{}_ms":{:.4f})", x.name, x.ms);
        }
        std::printf("  parts (ms per step, each class alone):%s | rest %.3f\n", line.c_str(), med - sum);
        std::fflush(stdout);
        if (jf)
          jf << fmt::format(R"({{"bench":"decode_step_parts","weights":"{}","kv":"{}","depth":{},"ms_per_token":{:.4f})",
                            label, codec, depth, med)
             << js << fmt::format(R"(,"rest_ms":{:.4f}}})", med - sum) << "\n";
      }
#ifdef KVTAX_HAVE_CUPTI
      if (!trace.empty()) {
        gpu_bench::KernelTrace tr;
        for (int i = 0; i < steps; ++i) cd->eval(tok.data(), 1, out);
        const std::vector<gpu_bench::KernelRecord> rec = tr.take();
        std::printf("%s", gpu_bench::trace_summary(rec, steps).c_str());
        std::fflush(stdout);
        std::ofstream tf(trace, std::ios::app);
        if (!tf) throw std::runtime_error("--trace: cannot append to " + trace);
        uint64_t t0 = UINT64_MAX;
        for (const auto& r : rec) t0 = std::min(t0, r.start_ns);
        for (const auto& r : rec)
          tf << fmt::format("{},{},{},\"{}\",{},{},{},{}\n", label, codec, depth, r.name, r.grid, r.block,
                            r.start_ns - t0, r.end_ns - t0);
      }
#endif
    }
  }
  std::printf("device peak %.2f GiB (weights + KV pages + activations)\n", backend.peak_device_bytes() / 1073741824.0);
  return 0;
}

}  // namespace
}  // namespace kvtax

int main(int argc, char** argv) {
  return kvtax::gpu_bench::guarded_main("kvtax_gpu_decode_bench", kvtax::run, argc, argv);
}
