// A generated token's time on the device, split where generate() spends it: the decoder's eval (the step, and the
// logits to the host) and the host between two evals (sampling, stop checks, the token's text). Greedy, a draw at
// temperature 1 with no cut (OpenAI's defaults) and llama.cpp's chain (top-k 40, top-p 0.95, min-p 0.05, temperature
// 0.8). The first two each two ways: the host sampling from the vocabulary's logits (eval) and the device picking the
// token (eval_pick); llama.cpp's chain on the host only (the device takes no cut: docs/perf.md, "Session 23"). Beside
// them, evals back to back, as kvtax_gpu_decode_bench times the step. Prompts of random token ids, prefilled in
// batches.
//   kvtax_gpu_generate_bench -m MODEL.gguf [--codecs f16,fp8] [--lengths 2048,32768] [-n 256]
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "cuda/device_model.h"
#include "engine/device.h"
#include "engine/generate.h"
#include "kv/cache.h"
#include "model/model.h"

namespace {

using namespace kvtax;
using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}
double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The device decoder with each single-token eval timed, and the gaps between them; pick off hides eval_pick.
struct TimedDecoder : Decoder {
  DeviceDecoder& d;
  bool pick;
  std::vector<double> eval_ms, gap_ms;
  Clock::time_point last{};
  TimedDecoder(DeviceDecoder& dec, bool use_pick) : d(dec), pick(use_pick) {}
  template <class F>
  auto timed(int n, F&& f) {
    const auto a = Clock::now();
    if (n == 1 && last != Clock::time_point{}) gap_ms.push_back(ms_between(last, a));
    auto r = f();
    last = Clock::now();
    if (n == 1) eval_ms.push_back(ms_between(a, last));
    return r;
  }
  void eval(const int32_t* t, int n, float* l, bool all) override {
    timed(n, [&] { return d.eval(t, n, l, all), 0; });
  }
  bool has_pick() const override { return pick; }
  int32_t eval_pick(const int32_t* t, int n, const TokenPick& p) override {
    return timed(n, [&] { return d.eval_pick(t, n, p); });
  }
  float* logits_row() override { return d.logits_row(); }
  int n_past() const override { return d.n_past(); }
  int max_context() const override { return d.max_context(); }
  int max_batch() const override { return d.max_batch(); }
  const Model& model() const override { return d.model(); }
  void reset() override { d.reset(); }
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string x; std::getline(in, x, ',');) out.push_back(x);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Where a generated token's time goes on the device"};
  std::string model_path, codecs = "f16,fp8", lengths = "2048,32768";
  int n_new = 256;
  app.add_option("-m,--model", model_path, "GGUF model")->required()->check(CLI::ExistingFile);
  app.add_option("--codecs", codecs, "KV codecs");
  app.add_option("--lengths", lengths, "Prompt tokens");
  app.add_option("-n", n_new, "Tokens generated per run")->check(CLI::Range(2, 100000));
  CLI11_PARSE(app, argc, argv);
  try {
    cuda::register_backend();
    auto model = Model::load(model_path);
    auto backend = open_device("cuda", *model);
    const int n_vocab = int(model->config().n_vocab);
    std::printf("%-5s %7s %-6s %-6s %9s %9s %9s %9s %11s\n", "kv", "prompt", "sample", "pick", "ITL ms", "eval ms",
                "host ms", "tok/s", "b2b eval");
    for (const std::string& codec : split(codecs))
      for (const std::string& ls : split(lengths)) {
        const int len = std::stoi(ls);
        auto dec = backend->decoder(parse_kv_spec(codec), len + n_new + 8, 0);
        dec->prepare(dec->max_batch());
        std::vector<int32_t> prompt(static_cast<size_t>(len));
        for (int i = 0; i < len; ++i) prompt[size_t(i)] = int32_t((int64_t(i) * 7919 + 13) % n_vocab);
        for (int run = 0; run < 5; ++run) {
          const bool on_device = run % 2 == 1;
          const int mode = run / 2;  // greedy, t=1, llama.cpp's chain
          dec->reset();
          TimedDecoder t(*dec, on_device);
          GenerateOptions g;
          g.max_tokens = n_new;
          g.stop_at_eog = false;
          SamplerOptions& so = g.sampler;
          if (mode == 1) so.temperature = 1.0f, so.top_k = 0, so.top_p = 1.0f, so.min_p = 0.0f;
          if (mode == 2) so.temperature = 0.8f, so.top_k = 40, so.top_p = 0.95f, so.min_p = 0.05f;
          const GenerateOutput out = generate(t, prompt, g);
          std::vector<double> itl;
          for (double s : out.stats.itl_s) itl.push_back(1e3 * s);
          // Evals back to back at the end of this context (no sampling between them).
          std::vector<double> b2b;
          const int32_t tok = 1;
          for (int i = 0; i < 4 && dec->n_past() < dec->max_context(); ++i) {
            const auto a = Clock::now();
            dec->eval(&tok, 1, dec->logits_row());
            b2b.push_back(ms_between(a, Clock::now()));
          }
          std::printf("%-5s %7d %-6s %-6s %9.3f %9.3f %9.3f %9.1f %11.3f\n", codec.c_str(), len,
                      mode == 0 ? "greedy" : mode == 1 ? "t=1" : "top-k", on_device ? "device" : "host", median(itl),
                      median(t.eval_ms), median(t.gap_ms), out.stats.decode_tok_s(), median(b2b));
          std::fflush(stdout);
        }
      }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvtax_gpu_generate_bench: %s\n", e.what());
    return 1;
  }
}
