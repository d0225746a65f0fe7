// Matmul throughput: decode matvecs as GB/s of weight bytes streamed (compare with the read
// bandwidth measured by BM_ReadBandwidth in the same run) and 512-token prefill as GFLOP/s.
// Weights rotate over enough copies to exceed the last-level cache, so decode reads come from DRAM.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "core/cpu.h"
#include "core/thread_pool.h"
#include "ggml/quants.h"
#include "ops/cpu/matmul.h"
#include "read_bandwidth.h"

using namespace kvtax;

namespace {

constexpr size_t kRotateBytes = size_t(256) << 20;  // > any L3 we expect to run on

struct AlignedFree {
  void operator()(uint8_t* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<uint8_t, AlignedFree>;
Buffer alloc(size_t bytes) {
  return Buffer(static_cast<uint8_t*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)));
}

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0, 1);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// rows x cols weights of type t: 16 distinct random rows repeated (content does not affect speed).
Buffer make_weights(GgmlType t, int64_t rows, int64_t cols) {
  const size_t stride = ggml_row_bytes(t, uint64_t(cols));
  Buffer buf = alloc(stride * size_t(rows));
  const auto src = random_floats(size_t(16 * cols), 1);
  for (int64_t r = 0; r < std::min<int64_t>(16, rows); ++r)
    quantize_row(t, src.data() + r * cols, buf.get() + size_t(r) * stride, cols);
  for (int64_t r = 16; r < rows; ++r) std::memcpy(buf.get() + size_t(r) * stride, buf.get() + size_t(r % 16) * stride, stride);
  return buf;
}

ThreadPool& pool(int n) {
  static std::unique_ptr<ThreadPool> p;
  if (!p || p->size() != n) p = std::make_unique<ThreadPool>(n);
  return *p;
}

const uint8_t* read_buffer() {
  static const Buffer buf = [] {
    Buffer b = alloc(kRotateBytes);
    std::memset(b.get(), 1, kRotateBytes);
    return b;
  }();
  return buf.get();
}

// One pass of every thread summing its contiguous share of a buffer larger than the LLC.
void read_pass(ThreadPool& p, std::vector<uint64_t>& sink) {
  p.run([&](int tid, int n) {
    const size_t chunk = kRotateBytes / size_t(n) / 128 * 128;
    const uint8_t* base = read_buffer() + chunk * size_t(tid);
    sink[size_t(tid)] += cpu().avx2 ? bench::read_sum_avx2(base, chunk) : bench::read_sum_scalar(base, chunk);
  });
  benchmark::DoNotOptimize(sink.data());
}

// Mean rate of a few read passes, in bytes/s, taken next to each decode run (a shared machine's
// bandwidth drifts, so a figure from the start of the run would not be comparable).
double read_bandwidth_now(ThreadPool& p) {
  std::vector<uint64_t> sink(static_cast<size_t>(p.size()));
  constexpr int kPasses = 4;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kPasses; ++i) read_pass(p, sink);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return double(kRotateBytes) * kPasses / s;
}

// Machine read bandwidth.
void BM_ReadBandwidth(benchmark::State& state) {
  ThreadPool& p = pool(int(state.range(0)));
  std::vector<uint64_t> sink(static_cast<size_t>(p.size()));
  for (auto _ : state) read_pass(p, sink);
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(kRotateBytes));
}

// Decode: one token, rows x 4096 weights, rotating over copies that together exceed the LLC.
void BM_Decode(benchmark::State& state) {
  const auto type = GgmlType(state.range(0));
  const int64_t rows = state.range(1), cols = 4096;
  const int nth = int(state.range(2));
  const size_t bytes = ggml_row_bytes(type, uint64_t(cols)) * size_t(rows);
  const size_t copies = std::max<size_t>(1, (kRotateBytes + bytes - 1) / bytes);
  std::vector<Buffer> w;
  w.push_back(make_weights(type, rows, cols));
  for (size_t i = 1; i < copies; ++i) {
    w.push_back(alloc(bytes));
    std::memcpy(w.back().get(), w[0].get(), bytes);
  }
  const auto x = random_floats(size_t(cols), 2);
  std::vector<float> y(static_cast<size_t>(rows));
  ThreadPool& p = pool(nth);
  const double read_bw = read_bandwidth_now(p);
  size_t i = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    matmul({type, w[i].get(), rows, cols}, x.data(), 1, y.data(), p);
    benchmark::DoNotOptimize(y.data());
    i = (i + 1) % copies;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(bytes));
  // Achieved weight-read rate as a fraction of the read loop's rate measured just before.
  state.counters["read_GB/s"] = read_bw / 1e9;
  state.counters["of_read"] = double(bytes) * double(state.iterations()) / secs / read_bw;
  state.SetLabel(std::string(ggml_type_name(type)) + " " + simd_name(simd_level()));
}

// Decode on a 1024 x 4096 matrix that stays in the last-level cache: the kernels' compute ceiling,
// to tell a memory-bound decode from a compute-bound one.
void BM_DecodeHot(benchmark::State& state) {
  const auto type = GgmlType(state.range(0));
  const int64_t rows = 1024, cols = 4096;
  const Buffer w = make_weights(type, rows, cols);
  const auto x = random_floats(size_t(cols), 2);
  std::vector<float> y(static_cast<size_t>(rows));
  ThreadPool& p = pool(1);
  for (auto _ : state) {
    matmul({type, w.get(), rows, cols}, x.data(), 1, y.data(), p);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(ggml_row_bytes(type, uint64_t(cols)) * size_t(rows)));
  state.SetLabel(std::string(ggml_type_name(type)) + " " + simd_name(simd_level()));
}

// Prefill: 512 tokens through a 4096 x 4096 matrix; reports GFLOP/s (2 flops per weight per token).
void BM_Prefill(benchmark::State& state) {
  const auto type = GgmlType(state.range(0));
  const int64_t rows = 4096, cols = 4096, ntok = 512;
  const int nth = int(state.range(1));
  const Buffer w = make_weights(type, rows, cols);
  const auto x = random_floats(size_t(ntok * cols), 3);
  std::vector<float> y(static_cast<size_t>(ntok * rows));
  ThreadPool& p = pool(nth);
  for (auto _ : state) {
    matmul({type, w.get(), rows, cols}, x.data(), ntok, y.data(), p);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * double(rows * cols * ntok) * double(state.iterations()), benchmark::Counter::kIsRate,
                         benchmark::Counter::kIs1000);
  state.SetLabel(std::string(ggml_type_name(type)) + " " + simd_name(simd_level()));
}

const GgmlType kTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,
                           GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

void decode_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"type", "rows", "threads"});
  for (GgmlType t : kTypes)
    for (int64_t rows : {4096, 14336})
      for (int nth : {1, 2}) b->Args({int64_t(t), rows, nth});
}

void prefill_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"type", "threads"});
  for (GgmlType t : kTypes) b->Args({int64_t(t), 2});
}

}  // namespace

BENCHMARK(BM_ReadBandwidth)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Decode)->Apply(decode_args)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DecodeHot)->ArgName("type")->Apply([](benchmark::internal::Benchmark* b) {
  for (GgmlType t : kTypes) b->Arg(int64_t(t));
})->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Prefill)->Apply(prefill_args)->UseRealTime()->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
