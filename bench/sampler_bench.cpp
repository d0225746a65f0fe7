// Next-token sampling over llama3's vocabulary (128256 logits: a dozen strong tokens over a long tail), per token,
// for the settings a user meets: greedy (the harness), OpenAI's defaults (temperature 1, no cut: `kvtax serve`'s
// default), llama.cpp's defaults (top-k 40, top-p 0.95, min-p 0.05) and top-p 0.9 alone. Each beside the way the
// sampler worked until session 21 (ReferenceSampler: the whole vocabulary copied, then scanned or sorted).
// On the GPU a decode step takes ~2 ms, so this host work is part of every token's time.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "engine/sampler.h"
#include "engine/sampler_reference.h"

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

void BM_Sampler(benchmark::State& st) {
  const std::vector<float> l = logits();
  kvtax::Sampler s(setting(int(st.range(0))));
  for (auto _ : st) benchmark::DoNotOptimize(s.sample(l.data(), int(l.size())));
  st.SetLabel(kNames[st.range(0)]);
}

// The chain as it ran before (engine/sampler_reference.h): every logit copied, then scanned or sorted.
void BM_CopyAndSort(benchmark::State& st) {
  const std::vector<float> l = logits();
  kvtax::ReferenceSampler s(setting(int(st.range(0))));
  for (auto _ : st) benchmark::DoNotOptimize(s.sample(l.data(), int(l.size())));
  st.SetLabel(kNames[st.range(0)]);
}

BENCHMARK(BM_Sampler)->DenseRange(0, 3)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_CopyAndSort)->DenseRange(0, 3)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
