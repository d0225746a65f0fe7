// Whole decode step on the device (bench/gpu/run.sh part b): one GGUF (e.g. a 32-layer llama3-8b shape
// from `kvtax make-model`), every codec, the KV filled to each depth with random vectors encoded on the
// device, then `--steps` single-token evals timed with the host clock (each ends with the logits on the
// host, as in generation). Roofline: the bytes one step must read (every weight matrix once, one
// embedding row, the KV at that depth) over the measured device-to-device copy bandwidth.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <vector>

#include "cuda/device_decoder.h"
#include "cuda/runtime.h"
#include "model/model.h"

namespace kvtax {
namespace {

double copy_bandwidth() {
  const size_t n = size_t(2) << 30;
  cuda::Buffer a(n), b(n);
  a.fill(0x3c);
  cuda::EventTimer t;
  std::vector<float> ms;
  for (int i = 0; i < 8; ++i) {
    t.start();
    cuda::check(cudaMemcpyAsync(b.get(), a.get(), n, cudaMemcpyDeviceToDevice), "copy");
    ms.push_back(t.stop_ms());
  }
  std::sort(ms.begin(), ms.end());
  return 2.0 * double(n) / (ms[ms.size() / 2] * 1e-3) / 1e9;  // bytes read + written
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t a = 0;
  while (a <= s.size()) {
    const size_t b = std::min(s.find(',', a), s.size());
    if (b > a) out.push_back(s.substr(a, b - a));
    a = b + 1;
  }
  return out;
}

int run(int argc, char** argv) {
  CLI::App app{"Whole-model decode step on the CUDA device vs the bandwidth roofline"};
  std::string model_path, codecs = "f16,fp8,q8,q4r", depths = "2048,8192,32768,131072", json, label;
  int steps = 32;
  double copy_gbs = 0;
  app.add_option("-m,--model", model_path, "GGUF model")->required()->check(CLI::ExistingFile);
  app.add_option("--codecs", codecs, "KV codecs");
  app.add_option("--depths", depths, "KV depths in tokens");
  app.add_option("--steps", steps, "timed decode steps per depth (median)")->check(CLI::Range(3, 10000));
  app.add_option("--copy-gbs", copy_gbs, "copy bandwidth in GB/s (default: measured here)");
  app.add_option("--label", label, "weights label for the table (default: the first layer's type)");
  app.add_option("--json", json, "append one JSON line per row to this file");
  CLI11_PARSE(app, argc, argv);

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
    auto dec = backend.decoder(parse_kv_spec(codec), max_depth + steps + 8, 0);
    auto* cd = static_cast<cuda::CudaDecoder*>(dec.get());
    for (const std::string& ds : depth_list) {
      const int depth = std::stoi(ds);
      cd->fill_random(depth, 1234 + uint64_t(depth));
      for (int i = 0; i < 3; ++i) cd->eval(tok.data(), 1, logits.data());  // warm-up (pages, module load)
      std::vector<double> ms;
      for (int i = 0; i < steps; ++i) {
        tok[0] = int32_t((i * 7919 + 13) % int(c.n_vocab));
        const auto a = std::chrono::steady_clock::now();
        cd->eval(tok.data(), 1, logits.data());
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
      }
      std::sort(ms.begin(), ms.end());
      const double med = ms[ms.size() / 2];
      const double kv_bytes = double(depth + 3 + steps / 2) * double(dec->kv_bytes_per_token());
      const double floor_ms = (weight_read + kv_bytes) / (copy_gbs * 1e9) * 1e3;
      std::printf("%-7s %-5s %7d %10.0f %9.3f %10.3f %8.1f%% %8.1f\n", label.c_str(), codec.c_str(), depth,
                  kv_bytes / 1e6, med, floor_ms, 100.0 * floor_ms / med, 1e3 / med);
      std::fflush(stdout);
      if (jf)
        jf << fmt::format(R"({{"bench":"decode_step","weights":"{}","kv":"{}","depth":{},"ms_per_token":{:.4f},)"
                          R"("floor_ms":{:.4f},"pct_roofline":{:.2f},"weight_bytes":{:.0f},"kv_bytes":{:.0f},)"
                          R"("copy_gbs":{:.0f},"steps":{},"min_ms":{:.4f},"max_ms":{:.4f}}})",
                          label, codec, depth, med, floor_ms, 100.0 * floor_ms / med, weight_read, kv_bytes,
                          copy_gbs, steps, ms.front(), ms.back())
           << "\n";
    }
  }
  std::printf("device peak %.2f GiB (weights + KV pages + activations)\n", backend.peak_device_bytes() / 1073741824.0);
  return 0;
}

}  // namespace
}  // namespace kvtax

int main(int argc, char** argv) {
  try {
    return kvtax::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvtax_gpu_decode_bench: %s\n", e.what());
    return 1;
  }
}
