#pragma once
// Pieces shared by the CUDA benchmarks (bench/gpu/*.cpp): graph-replay timing of repeated calls, the measured copy
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

// Median over `reps` timings of `inner` back-to-back calls of fn(i, stream), ms per call. The calls are captured
// once into a CUDA graph and the graph is replayed, so the time is the device's (the kernels and the gaps
// between them, as in the decode step's own graph), not the host's cost of launching them one by one. Three
// warm-up calls run first, outside the capture (first calls set kernel attributes and upload tables). `stream`
// null: a stream of its own.
inline double time_calls(const std::function<void(int, cudaStream_t)>& fn, int inner, int reps = 7,
                         cudaStream_t stream = nullptr) {
  cuda::check(cudaDeviceSynchronize(), "bench setup");  // inputs written on other streams
  cudaStream_t own = nullptr;
  if (!stream) {
    cuda::check(cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking), "bench stream");
    stream = own;
  }
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  auto release = [&] {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    if (own) cudaStreamDestroy(own);
  };
  try {
    for (int i = 0; i < 3; ++i) fn(i, stream);
    cuda::check(cudaStreamSynchronize(stream), "warm-up");
    cuda::check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "graph capture");
    for (int i = 0; i < inner; ++i) fn(i, stream);
    cuda::check(cudaStreamEndCapture(stream, &graph), "graph capture");
    cuda::check(cudaGraphInstantiate(&exec, graph, 0), "graph instantiate");
    cuda::check(cudaGraphLaunch(exec, stream), "graph launch");  // first replay uploads the graph
    cuda::EventTimer t;
    std::vector<double> ms;
    for (int r = 0; r < reps; ++r) {
      t.start(stream);
      cuda::check(cudaGraphLaunch(exec, stream), "graph launch");
      ms.push_back(t.stop_ms(stream) / inner);
    }
    release();
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  } catch (...) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
      cudaGraph_t partial = nullptr;  // a throw mid-capture leaves the stream capturing
      cudaStreamEndCapture(stream, &partial);
      if (partial) cudaGraphDestroy(partial);
    }
    cudaGetLastError();  // the failed capture's error is reported by the throw, not by the next launch check
    release();
    throw;
  }
}

// Device-to-device copy of 2 GiB, GB/s counting the bytes read and written: the rooflines' bandwidth. Timed on
// the stream, median of 7 runs of 5 copies, not through time_calls' graph: a graph's copy node moved only ~2.7
// TB/s where the same copy on a stream moves ~4.2 (H200, session 8).
inline double copy_bandwidth() {
  const size_t n = size_t(2) << 30;
  cuda::Buffer a(n), b(n);
  a.fill(0x3c);
  cuda::check(cudaDeviceSynchronize(), "copy setup");
  cuda::EventTimer t;
  std::vector<double> ms;
  for (int r = 0; r < 8; ++r) {
    t.start();
    for (int i = 0; i < 5; ++i) cuda::check(cudaMemcpyAsync(b.get(), a.get(), n, cudaMemcpyDeviceToDevice), "copy");
    if (const double m = t.stop_ms() / 5; r > 0) ms.push_back(m);  // the first run warms up
  }
  std::sort(ms.begin(), ms.end());
  return 2.0 * double(n) / (ms[ms.size() / 2] * 1e-3) / 1e9;
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
