// Continuous batching's gain at decode: S streams decoded one token each per step, either in ONE
// ForwardPass call (the weights read once per step for all of them, as `kvtax serve` does) or one call per
// stream (one at a time, the weights read S times). Every stream first holds --depth prompt tokens
// (untimed); then -n steps are timed; median of --reps. Prints aggregate decode tok/s per stream count.
//   batch_decode_bench [-m FILE] [--kv SPEC] [--streams 1,2,4] [--depth D] [-n N] [-t T] [--reps R]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "core/timer.h"
#include "model/default_model.h"
#include "model/forward.h"
#include "model/model.h"

using namespace kvtax;

namespace {

struct Options {
  std::string model, kv = "f16";
  std::vector<int> streams = {1, 2, 4};
  int depth = 256, n = 64, threads = 0, reps = 3;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "batch_decode_bench: %s\nusage: batch_decode_bench [-m FILE] [--kv SPEC] [--streams 1,2,4] "
               "[--depth D] [-n N] [-t T] [--reps R]\n",
               why);
  std::exit(2);
}

int int_arg(const char* v, int lo) {
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (*v == '\0' || *end != '\0' || x < lo || x > (1L << 20)) usage("an option needs a positive integer");
  return int(x);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) usage(("missing value after " + a).c_str());
    const char* v = argv[++i];
    if (a == "-m") o.model = v;
    else if (a == "--kv") o.kv = v;
    else if (a == "--depth") o.depth = int_arg(v, 1);
    else if (a == "-n") o.n = int_arg(v, 1);
    else if (a == "-t") o.threads = int_arg(v, 1);
    else if (a == "--reps") o.reps = int_arg(v, 1);
    else if (a == "--streams") {
      o.streams.clear();
      for (std::string s = v; !s.empty();) {
        const size_t c = s.find(',');
        o.streams.push_back(int_arg(s.substr(0, c).c_str(), 1));
        s = c == std::string::npos ? "" : s.substr(c + 1);
      }
    } else usage(("unknown option " + a).c_str());
  }
  return o;
}

int32_t argmax(const float* l, int n) { return int32_t(std::max_element(l, l + n) - l); }

// Seconds for n decode steps of every stream, batched (one call per step) or one stream per call.
double decode(ForwardPass& pass, std::vector<std::unique_ptr<KvCache>>& caches, std::vector<int32_t>& next,
              std::vector<std::vector<float>>& logits, int depth, int n, bool batched) {
  const int S = int(caches.size()), n_vocab = int(logits[0].size());
  for (auto& c : caches) c->truncate(depth);
  std::vector<SeqRows> rows(static_cast<size_t>(S));
  const double t0 = now_seconds();
  for (int step = 0; step < n; ++step) {
    for (int s = 0; s < S; ++s) rows[size_t(s)] = {caches[size_t(s)].get(), &next[size_t(s)], 1, logits[size_t(s)].data(), false};
    if (batched) {
      pass.eval(rows);
    } else {
      for (const SeqRows& r : rows) pass.eval({&r, 1});
    }
    for (int s = 0; s < S; ++s) next[size_t(s)] = argmax(logits[size_t(s)].data(), n_vocab);
  }
  return now_seconds() - t0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    const std::string path = model_or_default(o.model);
    auto model = Model::load(path);
    const auto& c = model->config();
    const KvSpec spec = parse_kv_spec(o.kv);
    const KvShape shape{int(c.n_layers), int(c.n_kv_heads), int(c.head_dim)};
    ThreadPool pool(o.threads);
    constexpr int kChunk = 256;
    ForwardPass pass(*model, std::max(kChunk, *std::max_element(o.streams.begin(), o.streams.end())), pool);
    std::printf("model %s, KV %s, depth %d, %d steps, %d threads, median of %d\n\n", path.c_str(), spec.str().c_str(),
                o.depth, o.n, pool.size(), o.reps);
    std::printf("| streams | one at a time tok/s | batched tok/s | batched / one at a time |\n|---|---|---|---|\n");
    std::mt19937 rng(7);
    for (int S : o.streams) {
      std::vector<std::unique_ptr<KvCache>> caches;
      std::vector<std::vector<float>> logits(size_t(S), std::vector<float>(c.n_vocab));
      std::vector<int32_t> first(static_cast<size_t>(S));
      for (int s = 0; s < S; ++s) {
        caches.push_back(std::make_unique<KvCache>(shape, spec, size_t(o.depth + o.n + 1), kChunk));
        std::vector<int32_t> prompt(size_t(o.depth));
        for (auto& t : prompt) t = int32_t(rng() % c.n_vocab);
        for (int i = 0; i < o.depth; i += kChunk) {
          const SeqRows r{caches.back().get(), prompt.data() + i, std::min(kChunk, o.depth - i), logits[size_t(s)].data(), false};
          pass.eval({&r, 1});
        }
        first[size_t(s)] = argmax(logits[size_t(s)].data(), int(c.n_vocab));
      }
      std::vector<double> one, batch;
      for (int r = 0; r < o.reps; ++r) {
        std::vector<int32_t> next = first;
        one.push_back(decode(pass, caches, next, logits, o.depth, o.n, false));
        next = first;
        batch.push_back(decode(pass, caches, next, logits, o.depth, o.n, true));
      }
      std::sort(one.begin(), one.end());
      std::sort(batch.begin(), batch.end());
      const double tok = double(S) * o.n, t1 = one[one.size() / 2], tb = batch[batch.size() / 2];
      std::printf("| %d | %.1f | %.1f | %.2fx |\n", S, tok / t1, tok / tb, t1 / tb);
      std::fflush(stdout);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "batch_decode_bench: %s\n", e.what());
    return 1;
  }
}
