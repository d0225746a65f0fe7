// Quality of each KV codec: mean KL divergence of the next-token distributions from those with a base
// KV type (default f16), teacher-forced over a text, scored the way llama-perplexity --kl-divergence
// scores (so the two can stand side by side): the tokens (BOS added as the vocabulary asks) are cut into
// chunks of --ctx tokens, each chunk runs from an empty cache with its first token set to BOS (when the
// vocabulary adds one), and positions ctx/2 .. ctx-2 are scored against the token that follows.
//   kld_bench -m FILE -f TEXT [--ctx 512] [--chunks K] [--kv SPEC]... [--base f16] [-t T] [--json]
// Prints per codec: mean KLD (nats) with its standard error, max KLD, and how often the top token agrees.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/thread_pool.h"
#include "core/timer.h"
#include "model/forward.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

using namespace kvtax;

namespace {

struct Options {
  std::string model, text, base = "f16";
  std::vector<std::string> kv = {"f32", "f16", "bf16", "fp8", "q8", "q4", "q4r", "tq4", "tq3"};
  int ctx = 512, chunks = 0, threads = 0;
  bool json = false;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "kld_bench: %s\nusage: kld_bench -m FILE -f TEXT [--ctx 512] [--chunks K] [--kv SPEC]... [--base f16] "
               "[-t T] [--json]\n",
               why.c_str());
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  std::vector<std::string> kv;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json") { o.json = true; continue; }
    if (i + 1 >= argc) usage(a + " needs a value");
    const std::string v = argv[++i];
    auto num = [&](int lo) {
      char* end = nullptr;
      const long x = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end || x < lo || x > (1 << 24)) usage(a + " needs an integer >= " + std::to_string(lo));
      return int(x);
    };
    if (a == "-m") o.model = v;
    else if (a == "-f") o.text = v;
    else if (a == "--ctx") o.ctx = num(4);
    else if (a == "--chunks") o.chunks = num(1);
    else if (a == "--kv") kv.push_back(v);  // repeatable (a KV spec may itself hold commas)
    else if (a == "--base") o.base = v;
    else if (a == "-t") o.threads = num(0);
    else usage("unknown option " + a);
  }
  if (o.model.empty() || o.text.empty()) usage("-m FILE and -f TEXT are required");
  if (!kv.empty()) o.kv = kv;
  return o;
}

// log-softmax in double of one row of logits.
void log_softmax(const float* l, int n, std::vector<double>& out) {
  const float mx = *std::max_element(l, l + n);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += std::exp(double(l[i]) - mx);
  const double lse = mx + std::log(sum);
  out.resize(size_t(n));
  for (int i = 0; i < n; ++i) out[size_t(i)] = double(l[i]) - lse;
}

struct Tally {
  double sum = 0, sum2 = 0, max = 0;
  long count = 0, same_top = 0;
};

// Runs one chunk from an empty cache; calls score(position, logits) for positions first .. n-2.
template <typename F>
void run_chunk(Forward& fw, const int32_t* tokens, int n, int first, F&& score) {
  fw.reset();
  const int n_vocab = int(fw.model().config().n_vocab), B = fw.max_batch();
  std::vector<float> logits(size_t(B) * n_vocab);
  for (int i = 0; i < first; i += B) fw.eval(tokens + i, std::min(B, first - i), logits.data());
  for (int i = first; i < n - 1; i += B) {
    const int m = std::min(B, n - 1 - i);
    fw.eval(tokens + i, m, logits.data(), /*all_logits=*/true);
    for (int j = 0; j < m; ++j) score(i + j, &logits[size_t(j) * n_vocab]);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  try {
    auto model = Model::load(o.model);
    const auto& tok = model->tokenizer();
    const int n_vocab = int(model->config().n_vocab);
    std::ifstream in(o.text, std::ios::binary);
    if (!in) fail("cannot read text file '{}'", o.text);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::vector<int32_t> tokens = tok.encode(ss.str(), /*add_special=*/true, /*parse_special=*/false);
    int n_chunks = int(tokens.size() / size_t(o.ctx));
    if (o.chunks > 0) n_chunks = std::min(n_chunks, o.chunks);
    if (n_chunks < 1) fail("{} has {} tokens, fewer than one {}-token chunk", o.text, tokens.size(), o.ctx);
    const int first = o.ctx / 2, scored = o.ctx - 1 - first;

    ThreadPool pool(o.threads);
    const int batch = std::min(o.ctx, 512);
    std::vector<Tally> tally(o.kv.size());
    std::vector<double> lp_codec;
    std::vector<std::vector<double>> lp_base(static_cast<size_t>(scored));
    std::vector<int> top_base(static_cast<size_t>(scored));
    const double t0 = now_seconds();
    for (int c = 0; c < n_chunks; ++c) {
      std::vector<int32_t> chunk(tokens.begin() + size_t(c) * o.ctx, tokens.begin() + size_t(c + 1) * o.ctx);
      if (tok.add_bos()) chunk[0] = tok.bos();
      {
        Forward fw(*model, parse_kv_spec(o.base), o.ctx, batch, pool);
        run_chunk(fw, chunk.data(), o.ctx, first, [&](int pos, const float* l) {
          log_softmax(l, n_vocab, lp_base[size_t(pos - first)]);
          top_base[size_t(pos - first)] = int(std::max_element(l, l + n_vocab) - l);
        });
      }
      for (size_t k = 0; k < o.kv.size(); ++k) {
        Forward fw(*model, parse_kv_spec(o.kv[k]), o.ctx, batch, pool);
        Tally& t = tally[k];
        run_chunk(fw, chunk.data(), o.ctx, first, [&](int pos, const float* l) {
          log_softmax(l, n_vocab, lp_codec);
          const std::vector<double>& b = lp_base[size_t(pos - first)];
          double kl = 0;
          for (int i = 0; i < n_vocab; ++i) kl += std::exp(b[size_t(i)]) * (b[size_t(i)] - lp_codec[size_t(i)]);
          kl = std::max(kl, 0.0);  // rounding can leave a tiny negative for identical distributions
          t.sum += kl;
          t.sum2 += kl * kl;
          t.max = std::max(t.max, kl);
          t.count++;
          t.same_top += int(std::max_element(l, l + n_vocab) - l) == top_base[size_t(pos - first)];
        });
      }
      if (!o.json)
        std::fprintf(stderr, "chunk %d/%d done, %.0f s\n", c + 1, n_chunks, now_seconds() - t0);
    }

    nlohmann::json rows = nlohmann::json::array();
    if (!o.json)
      std::printf("# %s, text %s: %zu tokens, %d chunks of %d, %d scored positions each, base KV %s\n"
                  "%-10s %14s %12s %12s %10s\n", o.model.c_str(), o.text.c_str(), tokens.size(), n_chunks, o.ctx,
                  scored, o.base.c_str(), "kv", "mean KLD", "+-", "max KLD", "same top");
    for (size_t k = 0; k < o.kv.size(); ++k) {
      const Tally& t = tally[k];
      const double mean = t.sum / t.count;
      const double var = t.sum2 / t.count - mean * mean;
      const double err = t.count > 10 && var > 0 ? std::sqrt(var / (t.count - 1)) : 0;
      const double top = double(t.same_top) / t.count;
      if (o.json)
        rows.push_back({{"kv", o.kv[k]}, {"mean_kld", mean}, {"kld_stderr", err}, {"max_kld", t.max},
                        {"same_top", top}, {"positions", t.count}});
      else
        std::printf("%-10s %14.6g %12.3g %12.4g %9.2f%%\n", o.kv[k].c_str(), mean, err, t.max, 100 * top);
    }
    if (o.json)
      std::printf("%s\n", nlohmann::json{{"engine", "kvtax"}, {"model", o.model}, {"text", o.text},
                                         {"tokens", tokens.size()}, {"ctx", o.ctx}, {"chunks", n_chunks},
                                         {"base", o.base}, {"threads", pool.size()}, {"rows", rows}}
                              .dump()
                              .c_str());
  } catch (const Error& e) {
    std::fprintf(stderr, "kld_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
