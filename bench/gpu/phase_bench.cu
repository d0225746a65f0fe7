// What a dependency costs inside one persistent kernel whose weight copies run on across it.
//
// The decode step's kernels each add 1.3-3.5 us past their bytes (docs/cuda.md): the path from griddepcontrol.wait
// to the kernel's end, while the next kernel can copy only what its resident blocks have room for. link_bench
// measured the hand-off alone (flags slower than PDL), queue_bench that an L2 hit waits ~25 ns per KB every SM keeps
// in flight. Neither asks what happens when the bytes in flight are few but the room for landed bytes is large: a
// persistent kernel can keep copying into free ring slots while its consumers wait on a dependency, with a short
// window in flight, so the dependency's own loads wait little.
//
// One block per SM: lane 0 of --producers warps streams the block's units (--unit bytes) through a ring of --ring KB,
// at most --window KB of them in flight (unit k goes out once unit k - window has landed and unit k - ring has been
// used), and consumer warp c of --warps takes units c, c + warps, ... A phase is --mb MB over all blocks. In `dep`
// mode a phase's consumers first wait until every block has finished the phase before (a counter, release / acquire
// at GPU scope, as a persistent decode step would), then read x (4096 floats in L2, written by the blocks in the
// phase before; every value is checked, so the dependency is real), then take the phase's units, write their block's
// share of the next x and add to the counter. `free` mode does the same without the wait. --work FMAs per 16 bytes
// set the consumers' instructions per byte.
// The table gives us per phase (median of --reps launches) for each window and ring, both modes: `dep - free` is
// what the wait costs when copies run on across it. The same bytes as a chain of PDL kernels: link_bench.
//   kvtax_gpu_phase_bench [--mb 9.4,14.2,33,66] [--phases 48] [--window 36,72] [--ring 72,200] [--warps 16]
//                         [--producers 8] [--work 8] [--unit 2304] [--reps 5] [--boundary 2]
// --boundary sets what `free` mode does between phases: 0 nothing (one stream), 1 the consumers' barriers, 2 also
// x's loads, the phase's writes and the counter (all of a dependency but the wait; the default).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "../bench_util.h"
#include "cuda_check.h"
#include "cuda/mma.cuh"

namespace {

using namespace kvtax::cuda::detail;  // the bulk copies and mbarriers of cuda/mma.cuh

void check(cudaError_t e, const char* what) { kvtax_bench::cuda_check(e, "phase_bench", what); }

constexpr int kX = 4096, kXPerBlock = 32, kMaxSlots = 128, kXLoads = 4;  // x: float4s per consumer thread

struct Args {
  const uint8_t* w;   // phases x blocks x units_phase units
  float* x;           // two buffers of kX floats: phase p reads x[p % 2], writes x[(p + 1) % 2]
  unsigned* done;     // blocks that have finished each phase's writes (one counter per launch, counting on)
  unsigned* errors;   // consumers that found x not as the phase before wrote it
  float* sink;
  int phases, units_phase, unit, window, ring, work;  // window, ring: units
  int producers;                                      // warps whose lane 0 issues copies (one lane alone issues
                                                      // ~1 TB/s: queue_bench, session 34)
  int boundary;  // free mode's phase boundary: 0 none (consumers never stop), 1 the barriers, 2 also x and the counter
  bool dep;
};

__device__ __forceinline__ unsigned load_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void add_release(unsigned* p, unsigned v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void consumers_sync(int threads) {  // named barrier 1: the consumer warps only
  asm volatile("bar.sync 1, %0;" ::"r"(threads) : "memory");
}

// What block b writes into x in phase p (and what every block checks it read in phase p + 1).
__device__ __forceinline__ float x_value(int p, int i) { return float((p * 7 + i) % 1024); }

__global__ void phase_kernel(Args a) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ __align__(8) uint64_t full[kMaxSlots], empty[kMaxSlots];
  float* x_s = reinterpret_cast<float*>(smem + size_t(a.ring) * a.unit);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, consumers = blockDim.x / 32 - a.producers;
  const int total = a.phases * a.units_phase;
  if (threadIdx.x == 0)
    for (int s = 0; s < a.ring; ++s) mbar_init(smem_addr(&full[s]), 1), mbar_init(smem_addr(&empty[s]), 1);
  __syncthreads();
  // Unit k of this block: phase k / units_phase, at its place among the phase's blocks.
  auto src = [&](int k) {
    const int p = k / a.units_phase, u = k % a.units_phase;
    return a.w + ((size_t(p) * gridDim.x + blockIdx.x) * a.units_phase + u) * size_t(a.unit);
  };
  if (warp < a.producers) {  // lane 0 of producer warp w issues units w, w + producers, ...
    if (lane != 0) return;
    for (int k = warp; k < total; k += a.producers) {
      const int s = int(k % a.ring);
      if (k >= a.window) {  // unit k - window has landed: at most `window` units in flight
        const int j = k - a.window;
        mbar_wait(smem_addr(&full[j % a.ring]), unsigned(j / a.ring) & 1);
      }
      if (k >= a.ring) mbar_wait(smem_addr(&empty[s]), unsigned(k / a.ring - 1) & 1);  // slot's last unit used
      mbar_expect_bytes(smem_addr(&full[s]), a.unit);
      bulk_copy(smem_addr(smem + size_t(s) * a.unit), src(k), a.unit, smem_addr(&full[s]));
    }
    return;
  }
  const int c = warp - a.producers, ct = threadIdx.x - 32 * a.producers;
  float acc = 0.0f;
  const int boundary = a.dep ? 2 : a.boundary;
  // x of phase p into shared memory, every load in flight before any is used (one trip to L2, as the staged GEMVs
  // stage theirs), checked against what the phase before wrote where the consumers waited for it.
  auto read_x = [&](int p) {
    const float4* xin = reinterpret_cast<const float4*>(a.x + (p % 2) * kX);
    float4 v[kXLoads];
#pragma unroll
    for (int j = 0; j < kXLoads; ++j) {
      const int i = ct + j * 32 * consumers;
      v[j] = i < kX / 4 ? __ldcg(xin + i) : make_float4(0, 0, 0, 0);
    }
    unsigned bad = 0;
#pragma unroll
    for (int j = 0; j < kXLoads; ++j) {
      const int i = ct + j * 32 * consumers;
      if (i >= kX / 4) continue;
      const float e[4] = {v[j].x, v[j].y, v[j].z, v[j].w};
      for (int q = 0; q < 4; ++q)
        if (a.dep && p > 0 && e[q] != x_value(p - 1, 4 * i + q)) ++bad;
      reinterpret_cast<float4*>(x_s)[i] = v[j];
    }
    if (bad) atomicAdd(a.errors, bad);
  };
  for (int p = 0; p < a.phases; ++p) {
    if (a.dep && p > 0) {
      if (ct == 0)
        while (load_acquire(a.done) < unsigned(p) * gridDim.x) {
        }
      consumers_sync(32 * consumers);
    }
    if (boundary == 2) read_x(p);
    if (boundary > 0) consumers_sync(32 * consumers);
    // Consumer c takes units k = c mod consumers, and the ring is a multiple of the consumers: each slot has one
    // consumer, which takes its units in order, so no consumer waits on a slot a lap ahead of the one it left.
    const int k0 = p * a.units_phase, k1 = k0 + a.units_phase;
    for (int k = k0 + ((c - k0) % consumers + consumers) % consumers; k < k1; k += consumers) {
      const int u = k - k0, s = k % a.ring;
      mbar_wait(smem_addr(&full[s]), unsigned(k / a.ring) & 1);
      const uint4* unit = reinterpret_cast<const uint4*>(smem + size_t(s) * a.unit);
      for (int i = lane; i < a.unit / 16; i += 32) {
        const uint4 w4 = unit[i];
        float t = __uint_as_float((w4.x ^ w4.y ^ w4.z ^ w4.w) & 0x3fffffffu) * x_s[(i + 144 * u) & (kX - 1)];
        for (int r = 0; r < a.work; ++r) t = fmaf(t, 0.999f, 1e-3f);  // the decode's instructions per byte
        acc += t;
      }
      __syncwarp();
      if (lane == 0) mbar_arrive(smem_addr(&empty[s]));
    }
    if (boundary == 0) continue;
    // The phase's output: this block's kXPerBlock values of the next x, once all its consumers are done.
    consumers_sync(32 * consumers);
    if (boundary < 2) continue;
    if (ct < kXPerBlock && blockIdx.x * kXPerBlock + ct < kX)
      a.x[((p + 1) % 2) * kX + blockIdx.x * kXPerBlock + ct] = x_value(p, blockIdx.x * kXPerBlock + ct);
    consumers_sync(32 * consumers);
    if (ct == 0) add_release(a.done, 1);  // after the barrier: every consumer's writes are ordered before it
  }
  if (acc == 1234.5f) a.sink[blockIdx.x] = acc;  // keeps the products
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<double> mbs = {9.4, 14.2, 33.0, 66.0};
  std::vector<int> windows = {36, 72}, rings = {72, 200};
  int phases = 48, warps = 16, producers = 8, work = 8, unit = 2304, reps = 5, boundary = 2;
  const std::pair<const char*, int*> int_flags[] = {{"--phases", &phases}, {"--warps", &warps},
                                                    {"--producers", &producers}, {"--boundary", &boundary},
                                                    {"--work", &work}, {"--unit", &unit}, {"--reps", &reps}};
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "phase_bench: %s needs a value\n", f.c_str());
      return 2;
    }
    const std::string v = argv[++i];
    const auto list = kvtax_bench::split(v);
    auto* known = std::find_if(std::begin(int_flags), std::end(int_flags), [&](const auto& p) { return f == p.first; });
    if (known != std::end(int_flags)) {
      *known->second = std::atoi(v.c_str());
    } else if (f == "--mb") {
      mbs.clear();
      for (const std::string& x : list) mbs.push_back(std::atof(x.c_str()));
    } else if (f == "--window" || f == "--ring") {
      std::vector<int>& to = f == "--ring" ? rings : windows;
      to.clear();
      for (const std::string& x : list) to.push_back(std::atoi(x.c_str()));
    } else {
      std::fprintf(stderr, "phase_bench: unknown flag %s\n", f.c_str());
      return 2;
    }
  }
  if (mbs.empty() || windows.empty() || rings.empty()) {
    std::fprintf(stderr, "phase_bench: --mb, --window and --ring need at least one value\n");
    return 2;
  }
  const int max_ring = *std::max_element(rings.begin(), rings.end());
  if (unit < 16 || unit % 16 || phases < 2 || warps < 8 || producers < 1 || warps + producers > 32 || boundary < 0 ||
      boundary > 2 || work < 0 || reps < 1 || max_ring * 1024 / unit > kMaxSlots || max_ring > 210) {
    std::fprintf(stderr,
                 "phase_bench: --unit a multiple of 16, --phases >= 2, --warps >= 8, --warps + --producers <= 32, "
                 "--boundary 0-2, --ring at most 210 KB and %d units\n",
                 kMaxSlots);
    return 2;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // rows as they are measured (a killed run keeps them)
  int dev = 0, sms = 0;
  check(cudaGetDevice(&dev), "device");
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "SM count");
  const int threads = 32 * (warps + producers);
  const size_t smem = size_t(max_ring) * 1024 + kX * 4;
  check(cudaFuncSetAttribute(phase_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)), "smem");
  int per_sm = 0;
  check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, phase_kernel, threads, smem), "occupancy");
  if (per_sm < 1) {
    std::fprintf(stderr, "phase_bench: a block of %d threads and %zu bytes does not fit an SM\n", threads, smem);
    return 1;
  }
  // Largest phase's bytes x phases, so every launch reads DRAM (60 MB of L2 hold only its last phases).
  const double max_mb = *std::max_element(mbs.begin(), mbs.end());
  const int max_units = int(max_mb * 1e6 / sms / unit + 0.5);
  const size_t w_bytes = size_t(phases) * sms * max_units * unit;
  uint8_t* w = nullptr;
  float* x = nullptr;
  unsigned *done = nullptr, *errors = nullptr;
  float* sink = nullptr;
  check(cudaMalloc(&w, w_bytes), "weights");
  check(cudaMemset(w, 0x3c, w_bytes), "weights");
  check(cudaMalloc(&x, 2 * kX * 4), "x");
  check(cudaMalloc(&done, 4), "counter");
  check(cudaMalloc(&errors, 4), "errors");
  check(cudaMemset(errors, 0, 4), "errors");
  check(cudaMalloc(&sink, size_t(sms) * 4), "sink");
  cudaEvent_t e0, e1;
  check(cudaEventCreate(&e0), "event");
  check(cudaEventCreate(&e1), "event");

  std::printf("# %d blocks (one per SM), %d copying + %d consumer warps, %d-byte units, %d phases, %d FMAs per 16 "
              "bytes, free mode's boundary %d; us per phase, median of %d\n",
              sms, producers, warps, unit, phases, work, boundary, reps);
  std::printf("%8s %9s %8s %10s %10s %10s %10s %10s\n", "MB", "window KB", "ring KB", "free us", "dep us", "dep-free",
              "free GB/s", "dep GB/s");
  const int slot_step = std::lcm(producers, warps);
  for (double mb : mbs) {
    const int units_phase = std::max(1, int(mb * 1e6 / sms / unit + 0.5));
    const double bytes = double(units_phase) * unit * sms;
    for (int ring_kb : rings)
      for (int window_kb : windows) {
        // The ring a multiple of both the producers and the consumers, the window of the producers: each slot then
        // has one producer and one consumer, each taking its units in order, so a barrier's phase cannot move on
        // twice while one of them waits on it.
        const int ring = ring_kb * 1024 / unit / slot_step * slot_step;
        const int window = std::min(ring, window_kb * 1024 / unit / producers * producers);
        if (window_kb > ring_kb || ring < 2 || window < 1 || ring > kMaxSlots) continue;
        double us[2] = {0, 0};
        for (const bool dep : {false, true}) {
          std::vector<float> t;
          for (int r = 0; r <= reps; ++r) {
            check(cudaMemset(done, 0, 4), "counter");
            check(cudaMemset(x, 0, 2 * kX * 4), "x");
            Args a{w, x, done, errors, sink, phases, units_phase, unit, window, ring, work, producers, boundary, dep};
            check(cudaEventRecord(e0), "event");
            phase_kernel<<<sms, threads, smem>>>(a);
            check(cudaEventRecord(e1), "event");
            check(cudaEventSynchronize(e1), "run");
            float ms = 0;
            check(cudaEventElapsedTime(&ms, e0, e1), "elapsed");
            if (r > 0) t.push_back(ms);  // the first launch warms up
          }
          std::sort(t.begin(), t.end());
          us[dep] = 1e3 * t[t.size() / 2] / phases;
        }
        unsigned bad = 0;
        check(cudaMemcpy(&bad, errors, 4, cudaMemcpyDeviceToHost), "errors");
        if (bad) {
          std::fprintf(stderr, "phase_bench: %u reads of x did not see the phase before's values\n", bad);
          return 1;
        }
        std::printf("%8.1f %9d %8d %10.2f %10.2f %10.2f %10.0f %10.0f\n", bytes / 1e6, window * unit / 1024,
                    ring * unit / 1024, us[0], us[1], us[1] - us[0], bytes / (us[0] * 1e3), bytes / (us[1] * 1e3));
      }
  }
  for (void* p : {static_cast<void*>(w), static_cast<void*>(x), static_cast<void*>(done), static_cast<void*>(errors),
                  static_cast<void*>(sink)})
    cudaFree(p);
  return 0;
}
