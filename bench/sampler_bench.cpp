// Next-token sampling over llama3's vocabulary (128256 logits: a dozen strong tokens over a long tail), per token,
// for the settings a user meets: greedy (the harness), OpenAI's defaults (temperature 1, no cut: `kvtax serve`'s
// default), llama.cpp's defaults (top-k 40, top-p 0.95, min-p 0.05) and top-p 0.9 alone. Each beside the way the
// sampler worked until session 21 (the whole vocabulary copied, then sorted or scanned), in the same process.
// On the GPU a decode step takes ~2 ms, so this host work is part of every token's time.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "engine/sampler.h"

namespace {

using kvtax::SamplerOptions;

std::vector<float> logits() {
  std::mt19937 g(1);
  std::normal_distribution<float> d(0.0f, 2.0f);
  std::vector<float> l(128256);
  for (float& x : l) x = d(g);
  for (int i = 0; i < 12; ++i) l[size_t(g() % l.size())] += 20.0f - 0.5f * float(i);
  return l;
}

SamplerOptions setting(int which) {
  SamplerOptions o;  // 0: greedy
  if (which == 1) o.temperature = 1.0f, o.top_k = 0, o.top_p = 1.0f, o.min_p = 0.0f;
  if (which == 2) o.temperature = 0.8f;  // the struct's defaults are llama.cpp's
  if (which == 3) o.temperature = 1.0f, o.top_k = 0, o.top_p = 0.9f, o.min_p = 0.0f;
  return o;
}

const char* kNames[] = {"greedy", "openai_t1_no_cut", "llama_defaults", "top_p_0.9"};

// The sampler's chain as it ran before: every logit copied into (logit, id) pairs, then max_element (greedy), or a
// full sort (no top-k) or partial sort (top-k) before the cuts and the draw.
int32_t copy_and_sort(const std::vector<float>& l, const SamplerOptions& o, std::mt19937_64& rng,
                      std::vector<std::pair<float, int32_t>>& c) {
  c.resize(l.size());
  for (size_t i = 0; i < l.size(); ++i) c[i] = {l[i], int32_t(i)};
  if (o.temperature <= 0.0f)
    return std::max_element(c.begin(), c.end(), [](const auto& a, const auto& b) { return a.first < b.first; })
        ->second;
  auto by = [](const auto& a, const auto& b) { return a.first > b.first; };
  size_t keep = c.size();
  if (o.top_k > 0 && size_t(o.top_k) < keep) {
    keep = size_t(o.top_k);
    std::partial_sort(c.begin(), c.begin() + std::ptrdiff_t(keep), c.end(), by);
  } else {
    std::sort(c.begin(), c.end(), by);
  }
  std::vector<double> p(keep);
  double sum = 0;
  for (size_t i = 0; i < keep; ++i) sum += p[i] = std::exp(double(c[i].first - c[0].first));
  if (o.top_p < 1.0f) {
    double cum = 0;
    for (size_t i = 0; i < keep; ++i)
      if ((cum += p[i] / sum) >= o.top_p) {
        keep = i + 1;
        break;
      }
  }
  if (o.min_p > 0.0f) {
    size_t i = 1;
    while (i < keep && p[i] >= o.min_p * p[0]) ++i;
    keep = i;
  }
  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += p[i] = std::exp(double(c[i].first - c[0].first) / o.temperature);
  double u = std::uniform_real_distribution<double>(0.0, total)(rng);
  size_t i = 0;
  while (i + 1 < keep && (u -= p[i]) >= 0) ++i;
  return c[i].second;
}

void BM_Sampler(benchmark::State& st) {
  const std::vector<float> l = logits();
  kvtax::Sampler s(setting(int(st.range(0))));
  for (auto _ : st) benchmark::DoNotOptimize(s.sample(l.data(), int(l.size())));
  st.SetLabel(kNames[st.range(0)]);
}

void BM_CopyAndSort(benchmark::State& st) {
  const std::vector<float> l = logits();
  const SamplerOptions o = setting(int(st.range(0)));
  std::mt19937_64 rng(0);
  std::vector<std::pair<float, int32_t>> c;
  for (auto _ : st) benchmark::DoNotOptimize(copy_and_sort(l, o, rng, c));
  st.SetLabel(kNames[st.range(0)]);
}

BENCHMARK(BM_Sampler)->DenseRange(0, 3)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_CopyAndSort)->DenseRange(0, 3)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
