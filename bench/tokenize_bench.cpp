// Tokenizer throughput on 1 MiB of text (the fixture test inputs repeated: mixed scripts, emoji,
// code-like whitespace) for each fixture vocabulary. Vocabularies: $KVTAX_VOCAB_DIR or
// ../shared/fixtures/vocab next to the source tree; missing ones are skipped.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace {

std::filesystem::path vocab_dir() {
  if (const char* e = std::getenv("KVTAX_VOCAB_DIR")) return e;
  return std::filesystem::path(__FILE__).parent_path() / ".." / ".." / "shared" / "fixtures" / "vocab";
}

std::string text_1mib(const std::filesystem::path& inp) {
  std::ifstream in(inp, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string unit = ss.str(), out;
  if (unit.empty()) unit = "The quick brown fox jumps over the lazy dog. ";
  while (out.size() < (1u << 20)) out += unit;
  out.resize(1u << 20);
  return out;
}

void BM_Encode(benchmark::State& state, const char* name) {
  const auto path = vocab_dir() / (std::string("ggml-vocab-") + name + ".gguf");
  if (!std::filesystem::exists(path)) {
    state.SkipWithError(("missing " + path.string()).c_str());
    return;
  }
  const auto file = kvtax::gguf::File::open(path.string());
  const auto tok = kvtax::tok::Tokenizer::from_gguf(*file);
  const std::string text = text_1mib(path.string() + ".inp");
  size_t n_tokens = 0;
  for (auto _ : state) {
    auto ids = tok->encode(text, true, false);
    n_tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(text.size()));
  state.counters["tokens"] = double(n_tokens);
}

void BM_Load(benchmark::State& state, const char* name) {
  const auto path = vocab_dir() / (std::string("ggml-vocab-") + name + ".gguf");
  if (!std::filesystem::exists(path)) {
    state.SkipWithError(("missing " + path.string()).c_str());
    return;
  }
  const auto file = kvtax::gguf::File::open(path.string());
  for (auto _ : state) benchmark::DoNotOptimize(kvtax::tok::Tokenizer::from_gguf(*file).get());
}

}  // namespace

BENCHMARK_CAPTURE(BM_Encode, llama_spm, "llama-spm")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Encode, llama_bpe, "llama-bpe")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Encode, qwen2, "qwen2")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Encode, gpt2, "gpt-2")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Encode, phi3, "phi-3")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Load, llama_bpe, "llama-bpe")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Load, qwen2, "qwen2")->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
