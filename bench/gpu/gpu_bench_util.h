#pragma once
// Pieces shared by the CUDA benchmarks (bench/gpu/*.cpp): event timing of repeated calls, the measured copy
// bandwidth every roofline divides by, and a main() that reports errors as one line.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <functional>
#include <vector>

#include "../bench_util.h"
#include "cuda/runtime.h"

namespace kvtax::gpu_bench {

using kvtax_bench::split;

// Median over `reps` timings of `inner` back-to-back calls of fn(i), after 3 warm-up calls; ms per call.
inline double time_calls(const std::function<void(int)>& fn, int inner, int reps = 7) {
  for (int i = 0; i < 3; ++i) fn(i);
  cuda::check(cudaDeviceSynchronize(), "warm-up");
  cuda::EventTimer t;
  std::vector<double> ms;
  int k = 0;
  for (int r = 0; r < reps; ++r) {
    t.start();
    for (int i = 0; i < inner; ++i) fn(k++);
    ms.push_back(t.stop_ms() / inner);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Device-to-device copy of 2 GiB, GB/s counting the bytes read and written: the rooflines' bandwidth.
inline double copy_bandwidth() {
  const size_t n = size_t(2) << 30;
  cuda::Buffer a(n), b(n);
  a.fill(0x3c);
  const double ms = time_calls(
      [&](int) { cuda::check(cudaMemcpyAsync(b.get(), a.get(), n, cudaMemcpyDeviceToDevice), "copy"); }, 5);
  return 2.0 * double(n) / (ms * 1e-3) / 1e9;
}

// A benchmark's main(): an exception becomes "name: message" on stderr and exit status 1.
inline int guarded_main(const char* name, int (*run)(int, char**), int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", name, e.what());
    return 1;
  }
}

}  // namespace kvtax::gpu_bench
