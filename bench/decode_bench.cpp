// Whole-model decode and prefill speed through the normal forward path (Forward::eval), with the memory
// figures that go with them.
//   decode:  the KV cache is brought to --depth D by tiling a short real prefill (engine/kv_fill.h), then
//            N single-token steps are timed. Prints tok/s, ms/token, KV bytes, weight bytes, peak RSS,
//            peak RSS - (weights read + KV bytes), and the fraction of the read bandwidth (measured here
//            with a plain read loop) that (weights + KV) bytes per token reach.
//   prefill: --prefill P times a P-token prompt at depth 0 (chunks of --batch, default 512), median of --reps.
//   decode_bench -m FILE [--kv SPEC] [--depth D] [-n N] [-t T] [--prefix P0] [--batch B] [--prefill P]
//                [--reps R] [--no-bw] [--json]
// --json prints one JSON object per run on one line (bench/decode_vs_llama.sh appends these to its results).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attn/cpu/attention.h"
#include "bench_util.h"
#include "core/cpu.h"
#include "core/error.h"
#include "core/memory.h"
#include "core/thread_pool.h"
#include "core/timer.h"
#include "engine/kv_fill.h"
#include "model/forward.h"
#include "model/model.h"
#include "read_bandwidth.h"

using namespace kvtax;

namespace {

using kvtax_bench::status_bytes;

struct Options {
  std::string model, kv = "f16";
  int depth = 0, n = 32, threads = 0, prefix = 64, batch = 0, prefill = 0, reps = 3;
  bool bw = true, json = false;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "decode_bench: %s\nusage: decode_bench -m FILE [--kv SPEC] [--depth D] [-n N] [-t T] [--prefix P0] "
               "[--batch B] [--prefill P] [--reps R] [--no-bw] [--json]\n",
               why);
  std::exit(2);
}

int int_arg(const std::string& name, const char* v, int lo) {
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (*v == '\0' || *end != '\0' || x < lo || x > (1L << 30)) usage((name + " needs an integer >= " + std::to_string(lo)).c_str());
  return int(x);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--no-bw") { o.bw = false; continue; }
    if (a == "--json") { o.json = true; continue; }
    if (i + 1 >= argc) usage((a + " needs a value").c_str());
    const char* v = argv[++i];
    if (a == "-m" || a == "--model") o.model = v;
    else if (a == "--kv") o.kv = v;
    else if (a == "--depth") o.depth = int_arg(a, v, 0);
    else if (a == "-n") o.n = int_arg(a, v, 1);
    else if (a == "-t" || a == "--threads") o.threads = int_arg(a, v, 0);
    else if (a == "--prefix") o.prefix = int_arg(a, v, 1);
    else if (a == "--batch") o.batch = int_arg(a, v, 1);
    else if (a == "--prefill") o.prefill = int_arg(a, v, 1);
    else if (a == "--reps") o.reps = int_arg(a, v, 1);
    else usage(("unknown option " + a).c_str());
  }
  if (o.model.empty()) usage("-m FILE is required");
  return o;
}

std::vector<int32_t> random_tokens(int n, uint32_t n_vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(size_t(std::max(n, 0)));
  for (auto& x : t) x = int32_t(rng() % n_vocab);
  return t;
}

// Weight bytes one decode step reads: every matrix except the token embedding, of which it reads one row
// (unless the output projection is the embedding itself).
size_t weight_bytes_per_token(const Model& m) {
  const Weight& e = m.token_embd();
  const size_t row = ggml_row_bytes(e.type, uint64_t(e.cols));
  return m.weight_bytes() - (m.config().tied_output ? 0 : row * size_t(e.rows)) + row;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

constexpr double kMiB = 1048576.0;

nlohmann::json run_decode(const Options& o, const Model& model, ThreadPool& pool) {
  const ModelConfig& c = model.config();
  const int batch = o.batch > 0 ? o.batch : std::min(o.prefix, 512);
  const int ctx = o.depth + o.n + 1;  // + the untimed warm-up step
  Forward fw(model, parse_kv_spec(o.kv), ctx, batch, pool);
  const double t_fill = now_seconds();
  fill_kv_by_tiling(fw, random_tokens(o.prefix, c.n_vocab, 1), o.depth);
  const double fill_s = now_seconds() - t_fill;

  std::vector<float> logits(c.n_vocab);
  int32_t tok = random_tokens(1, c.n_vocab, 2)[0];
  auto step = [&] {
    fw.eval(&tok, 1, logits.data());
    tok = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  };
  step();  // warm-up: first touch of this step's buffers
  std::vector<double> ts;
  const double t0 = now_seconds();
  for (int i = 0; i < o.n; ++i) {
    const double s = now_seconds();
    step();
    ts.push_back(now_seconds() - s);
  }
  const double total = now_seconds() - t0;

  const size_t peak = peak_rss_bytes(), rss_file = status_bytes("RssFile:"), rss_anon = status_bytes("RssAnon:");
  const size_t w_read = weight_bytes_per_token(model), kv = fw.cache().bytes_used();
  // KV bytes a step reads, at the mean depth of the timed steps (a window keeps at most window + sinks).
  const KvPolicy& pol = fw.cache().policy();
  double attended = o.depth + 1 + (o.n + 1) / 2.0;
  if (pol.window > 0) attended = std::min(attended, double(pol.window + pol.sinks));
  const double kv_read = fw.cache().bytes_per_token() * attended;
  const double ms = total / o.n * 1e3;
  nlohmann::json j = {
      {"mode", "decode"}, {"depth", o.depth}, {"n", o.n}, {"prefix", o.prefix}, {"batch", batch},
      {"tok_s", o.n / total}, {"ms_per_token", ms}, {"ms_median", median(ts) * 1e3}, {"fill_s", fill_s},
      {"kv_bytes", kv}, {"kv_bytes_per_token", fw.cache().bytes_per_token()}, {"kv_read_per_step", kv_read},
      {"weight_bytes_read_per_step", w_read}, {"peak_rss_bytes", peak}, {"rss_file_bytes", rss_file},
      {"rss_anon_bytes", rss_anon}, {"scratch_bytes", fw.scratch_bytes() + attention_scratch_peak()},
      {"overhead_mib", (double(peak) - double(w_read) - double(kv)) / kMiB}};
  if (o.bw) {
    const double bw = bench::read_bandwidth_gbs(pool);
    j["read_bw_gbs"] = bw;
    j["frac_bw"] = (double(w_read) + kv_read) / (ms * 1e-3) / 1e9 / bw;
  }
  return j;
}

nlohmann::json run_prefill(const Options& o, const Model& model, ThreadPool& pool) {
  const ModelConfig& c = model.config();
  const int batch = o.batch > 0 ? o.batch : std::min(o.prefill, 512);
  Forward fw(model, parse_kv_spec(o.kv), o.prefill, batch, pool);
  const auto prompt = random_tokens(o.prefill, c.n_vocab, 3);
  std::vector<float> logits(c.n_vocab);
  auto prefill = [&] {
    fw.reset();
    for (int i = 0; i < o.prefill; i += batch) fw.eval(prompt.data() + i, std::min(batch, o.prefill - i), logits.data());
  };
  fw.eval(prompt.data(), std::min(o.prefill, 16), logits.data());  // warm-up: fault the weights in
  std::vector<double> ts;
  for (int r = 0; r < o.reps; ++r) {
    const double t0 = now_seconds();
    prefill();
    ts.push_back(now_seconds() - t0);
  }
  const double t = median(ts);
  nlohmann::json j = {{"mode", "prefill"}, {"prompt", o.prefill}, {"batch", batch}, {"reps", o.reps},
                      {"tok_s", o.prefill / t}, {"best_tok_s", o.prefill / *std::min_element(ts.begin(), ts.end())},
                      {"s_median", t}, {"peak_rss_bytes", peak_rss_bytes()},
                      {"scratch_bytes", fw.scratch_bytes() + attention_scratch_peak()}};
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  try {
    auto model = Model::load(o.model);
    const ModelConfig& c = model->config();
    ThreadPool pool(o.threads);
    nlohmann::json j = o.prefill > 0 ? run_prefill(o, *model, pool) : run_decode(o, *model, pool);
    j["engine"] = "kvtax";
    j["model"] = o.model;
    j["kv"] = parse_kv_spec(o.kv).str();
    j["threads"] = pool.size();
    j["weight_bytes"] = model->weight_bytes();
    j["simd"] = simd_name(simd_level());
    if (o.json) {
      std::printf("%s\n", j.dump().c_str());
      return 0;
    }
    std::printf("# %s: %s, %u layers, d %u, %u/%u heads, head_dim %u, vocab %u, weights %.1f MiB; %s, %s, %d threads\n",
                o.model.c_str(), c.arch.c_str(), c.n_layers, c.d_model, c.n_heads, c.n_kv_heads, c.head_dim, c.n_vocab,
                model->weight_bytes() / kMiB, cpu_model_name().c_str(), simd_name(simd_level()), pool.size());
    if (o.prefill > 0) {
      std::printf("prefill  kv %-6s prompt %6d: %9.2f tok/s (median of %d, best %.2f), peak RSS %.1f MiB\n",
                  o.kv.c_str(), o.prefill, j["tok_s"].get<double>(), o.reps, j["best_tok_s"].get<double>(),
                  j["peak_rss_bytes"].get<double>() / kMiB);
      return 0;
    }
    std::printf("decode   kv %-6s depth %6d n %4d: %9.3f tok/s, %9.3f ms/token (median %.3f) | KV %.1f MiB, "
                "weights read %.1f MiB/token | peak RSS %.1f MiB, RSS - (weights + KV) %.1f MiB | fill %.1f s",
                o.kv.c_str(), o.depth, o.n, j["tok_s"].get<double>(), j["ms_per_token"].get<double>(),
                j["ms_median"].get<double>(), j["kv_bytes"].get<double>() / kMiB,
                j["weight_bytes_read_per_step"].get<double>() / kMiB, j["peak_rss_bytes"].get<double>() / kMiB,
                j["overhead_mib"].get<double>(), j["fill_s"].get<double>());
    if (o.bw) std::printf(" | read bw %.1f GB/s, decode reaches %.0f%%", j["read_bw_gbs"].get<double>(),
                          100 * j["frac_bw"].get<double>());
    std::printf("\n");
  } catch (const Error& e) {
    std::fprintf(stderr, "decode_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
