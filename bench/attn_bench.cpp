// Decode attention alone (one query row) over the KV cache, every codec, at several depths.
// Reports time per call, GB/s of KV bytes the call must read, and that as a fraction of this machine's
// read bandwidth, measured here with a plain multi-threaded read loop over a buffer far larger than L3.
//   attn_bench [--threads 2] [--depths 4096,16384,32768,65536] [--codecs f16,q8,...] [--shapes 32/8,32/32]
//              [--head-dim 128] [--json]
#include <immintrin.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "attn/cpu/attention.h"
#include "bench_util.h"
#include "core/cpu.h"
#include "core/thread_pool.h"
#include "core/timer.h"
#include "kv/cache.h"
#include "read_bandwidth.h"

using namespace kvtax;

namespace {

using kvtax_bench::split;

// FMA lanes per second of all threads: 10 independent chains of 8-lane FMAs per thread, best of 3.
__attribute__((target("avx2,fma"))) double fma_lanes_per_thread(int64_t iters) {
  __m256 a[10];
  for (int j = 0; j < 10; ++j) a[j] = _mm256_set1_ps(0.001f * j);
  const __m256 m = _mm256_set1_ps(0.9999f), c = _mm256_set1_ps(1e-4f);
  const double t0 = now_seconds();
  for (int64_t i = 0; i < iters; ++i)
    #pragma GCC unroll 10
    for (int j = 0; j < 10; ++j) a[j] = _mm256_fmadd_ps(a[j], m, c);
  const double s = now_seconds() - t0;
  __m256 x = a[0];
  for (int j = 1; j < 10; ++j) x = _mm256_add_ps(x, a[j]);
  volatile float sink = _mm256_cvtss_f32(x);
  (void)sink;
  return double(iters) * 80 / s;
}
double simd_peak(ThreadPool& pool) {
  double best = 0;
  std::vector<double> r(pool.size());
  for (int rep = 0; rep < 3; ++rep) {
    pool.parallel_for(pool.size(), [&](int64_t b, int64_t e, int tid) {
      for (int64_t i = b; i < e; ++i) r[tid] = fma_lanes_per_thread(20'000'000);
    });
    double sum = 0;
    for (double x : r) sum += x;
    best = std::max(best, sum);
  }
  return best;
}

double process_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2;
  std::vector<int> depths = {4096, 16384, 32768, 65536};
  std::vector<std::string> codecs = {"f32", "f16", "bf16", "fp8", "q8", "q4", "q4r", "tq4", "tq3"};
  std::vector<std::string> shapes = {"32/8", "32/32"};
  bool json = false;
  int d = 128;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) { std::fprintf(stderr, "%s needs a value\n", a.c_str()); std::exit(2); }
      return argv[++i];
    };
    if (a == "--threads") threads = std::atoi(next().c_str());
    else if (a == "--depths") { depths.clear(); for (auto& s : split(next())) depths.push_back(std::atoi(s.c_str())); }
    else if (a == "--codecs") codecs = split(next());
    else if (a == "--shapes") shapes = split(next());
    else if (a == "--head-dim") d = std::atoi(next().c_str());
    else if (a == "--json") json = true;
    else { std::fprintf(stderr, "unknown option %s\n", a.c_str()); return 2; }
  }
  std::sort(depths.begin(), depths.end());
  ThreadPool pool(threads);
  const double bw = bench::read_bandwidth_gbs(pool);
  const double peak = simd_peak(pool);  // FMA lanes per second, all threads
  if (!json)
    std::printf("# cpu %s, %s kernels, %d threads, plain read bandwidth %.1f GB/s, FMA peak %.1f G lanes/s\n"
                "# bound = max(KV bytes / read bandwidth, 2 x heads x depth x head_dim FMA lanes / FMA peak)\n"
                "%-6s %-6s %7s %10s %10s %9s %8s %7s %9s %9s %8s\n", cpu_model_name().c_str(), simd_name(simd_level()),
                threads, bw, peak / 1e9, "shape", "codec", "depth", "ms", "cpu ms", "KV MB", "GB/s", "of bw", "GB/s cpu",
                "bound ms", "of bound");
  else
    std::printf("{\"cpu\": \"%s\", \"simd\": \"%s\", \"threads\": %d, \"read_bw_gbs\": %.2f, \"fma_lanes_per_s\": %.4g, "
                "\"rows\": [\n", cpu_model_name().c_str(), simd_name(simd_level()), threads, bw, peak);
  bool first = true;
  for (const auto& shp : shapes) {
    const int n_heads = std::atoi(shp.c_str()), n_kv = std::atoi(shp.c_str() + shp.find('/') + 1);
    for (const auto& codec : codecs) {
      const KvSpec spec = parse_kv_spec(codec);
      KvCache cache(KvShape{1, n_kv, d}, spec, size_t(depths.back()));
      std::mt19937 rng(1);
      std::normal_distribution<float> nd;
      const int chunk = 512;
      std::vector<float> k(size_t(chunk) * n_kv * d), v(k.size());
      for (auto& x : k) x = nd(rng);
      for (auto& x : v) x = nd(rng);
      std::vector<float> q(size_t(n_heads) * d), out(q.size());
      for (auto& x : q) x = nd(rng);
      for (int depth : depths) {
        while (cache.n_past() < depth) {
          const int n = std::min(chunk, depth - cache.n_past());
          cache.append(0, n, k.data(), v.data());
          cache.commit(n);
        }
        attention(cache, 0, q.data(), 1, n_heads, out.data(), pool);  // warm up
        std::vector<double> ts;
        const double t_start = now_seconds(), c_start = process_cpu_seconds();
        while (ts.size() < 5 || (now_seconds() - t_start < 0.5 && ts.size() < 200)) {
          const double t0 = now_seconds();
          attention(cache, 0, q.data(), 1, n_heads, out.data(), pool);
          ts.push_back(now_seconds() - t0);
        }
        // CPU time per thread per call: what the call costs when it has the cores to itself (this
        // machine may be shared; idle spinning of the pool's workers between calls is included).
        const double cpu = (process_cpu_seconds() - c_start) / double(ts.size()) / threads;
        std::sort(ts.begin(), ts.end());
        const double t = ts[ts.size() / 2];
        const double bytes = double(depth) * cache.bytes_per_token();
        const double gbs = bytes / t / 1e9;
        const double bound = std::max(bytes / (bw * 1e9), 2.0 * n_heads * depth * d / peak);
        if (!json)
          std::printf("%-6s %-6s %7d %10.3f %10.3f %9.1f %8.1f %6.0f%% %9.1f %9.3f %7.0f%%\n", shp.c_str(), codec.c_str(),
                      depth, t * 1e3, cpu * 1e3, bytes / 1e6, gbs, 100.0 * gbs / bw, bytes / cpu / 1e9, bound * 1e3,
                      100.0 * bound / t);
        else
          std::printf("%s  {\"shape\": \"%s\", \"codec\": \"%s\", \"depth\": %d, \"ms\": %.4f, \"cpu_ms\": %.4f, \"kv_bytes\": %.0f, "
                      "\"gbs\": %.3f, \"frac_bw\": %.4f, \"bound_ms\": %.4f, \"frac_bound\": %.4f}", first ? "" : ",\n",
                      shp.c_str(), codec.c_str(), depth,
                      t * 1e3, cpu * 1e3, bytes, gbs, gbs / bw, bound * 1e3, bound / t);
        first = false;
        std::fflush(stdout);
      }
    }
  }
  if (json) std::printf("\n]}\n");
  return 0;
}
