// How long a load that hits L2 takes while the SMs have copies from DRAM in flight. The decode step's kernels read
// their input vector from L2 right after griddepcontrol.wait (x in the GEMVs, q in the attention), while their own
// weight or KV copies and their neighbours' are in flight (docs/cuda.md); ncu showed warps waiting there, and this
// measures the wait (H200: ~25 ns per KB in flight per SM when all of them copy, nothing when one does).
//
// Every SM runs one block (or one SM alone: --grid 1). Warp 0 issues `inflight` bytes of copies from a region of
// DRAM no round has read yet: bulk copies from lane 0 (cp.async.bulk, units of --unit bytes, an mbarrier each: the
// staged GEMVs and the attention's 1-byte codecs) or 16-byte cp.async from every lane (f16 attention). Then warp 1's
// lane 0 times, by clock64, a chain of --loads dependent loads of words already in L2 (ld.global.cg): the first
// load's cycles (what x's first use waits) and the chain's mean. Cycles become ns by the SM clock measured against
// %globaltimer. Table: median over the SMs of --rounds rounds.
// --stream MB: the steady state instead (stream_kernel): bandwidth and L2-hit latency by the bytes each SM keeps in
// flight.
//   kvtax_gpu_queue_bench [--kb 0,16,32,64,128,192] [--unit 2304] [--loads 8] [--rounds 20] [--grid 0 (all SMs)]
//                         [--stream 0]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "../bench_util.h"
#include "cuda_check.h"
#include "cuda/mma.cuh"

namespace {

using namespace kvtax::cuda::detail;  // the bulk copies and mbarriers of cuda/mma.cuh

void check(cudaError_t e, const char* what) { kvtax_bench::cuda_check(e, "queue_bench", what); }

enum class Mode { bulk, cp_async };
constexpr int kMaxUnits = 128, kHotWords = 1024;

struct Args {
  const uint8_t* dram;  // this round's region: inflight bytes per block
  const unsigned* hot;  // kHotWords words in L2, hot[i] = (i + 97) % kHotWords: a chain of dependent loads
  int inflight, unit, loads, smem_bytes;  // smem_bytes: the dynamic shared memory (its last word: the loads' sink)
  long long* first;  // per block: cycles of the first load
  long long* mean;   // per block: mean cycles of the chain
  unsigned* sink;
};

__device__ __forceinline__ unsigned load_l2(const unsigned* p) {
  unsigned v;
  asm volatile("ld.global.cg.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

template <Mode M>
__global__ void __launch_bounds__(64) queue_kernel(Args a) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ __align__(8) uint64_t bars[kMaxUnits];
  const int smem_bytes = a.smem_bytes;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const uint8_t* src = a.dram + size_t(blockIdx.x) * a.inflight;
  const int units = a.inflight / a.unit;
  if constexpr (M == Mode::bulk) {
    if (threadIdx.x == 0)
      for (int u = 0; u < units; ++u) mbar_init(smem_addr(&bars[u]), 1);
  }
  __syncthreads();
  if (warp == 0) {
    if constexpr (M == Mode::bulk) {
      if (lane == 0)
        for (int u = 0; u < units; ++u) {
          mbar_expect_bytes(smem_addr(&bars[u]), a.unit);
          bulk_copy(smem_addr(smem + size_t(u) * a.unit), src + size_t(u) * a.unit, a.unit, smem_addr(&bars[u]));
        }
    } else {
      for (int i = lane * 16; i < a.inflight; i += 32 * 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_addr(smem + i)), "l"(src + i) : "memory");
      asm volatile("cp.async.commit_group;" ::: "memory");
    }
  }
  __syncthreads();  // the copies are issued (not landed) before the timed loads
  if (warp == 1 && lane == 0) {
    // Each load's value goes to shared memory before the clock is read: a warp issues in order, so the store, and the
    // clock read behind it, wait for the load.
    volatile unsigned* seen = reinterpret_cast<volatile unsigned*>(smem + smem_bytes - 4);
    unsigned idx = blockIdx.x % kHotWords;
    const long long t0 = clock64();
    idx = load_l2(a.hot + idx);
    *seen = idx;
    const long long t1 = clock64();
    for (int i = 1; i < a.loads; ++i) idx = load_l2(a.hot + idx);
    *seen = idx;
    const long long t2 = clock64();
    a.first[blockIdx.x] = t1 - t0;
    a.mean[blockIdx.x] = (t2 - t0) / a.loads;
    a.sink[blockIdx.x] = idx;
  }
  if (warp == 0) {  // drain the copies before the block (and its shared memory) goes
    if constexpr (M == Mode::bulk) {
      if (lane == 0)
        for (int u = 0; u < units; ++u) mbar_wait(smem_addr(&bars[u]), 0);
    } else {
      asm volatile("cp.async.wait_all;" ::: "memory");
    }
  }
}

// Steady state: each block streams `stream` bytes through `inflight` bytes of ring, split over up to 16 warps whose
// lane 0 each refill a unit as soon as it lands (the staged GEMV's warps: one ring each), and a timing warp takes a
// single L2-hit load every ~2 us meanwhile. `fence`: each copy after fence.proxy.async, as bulk_copy issues them in
// the kernels (its reads of the stage before the copy's writes). Per block: its start and end (%globaltimer, for
// the bandwidth) and the median of its loads' cycles.
constexpr int kStreamWarps = 16;
struct StreamArgs {
  const uint8_t* dram;
  const unsigned* hot;
  long long stream;
  int inflight, unit;
  bool fence;
  unsigned long long *start, *end;
  long long* load;
};

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void __launch_bounds__(32 * (kStreamWarps + 1)) stream_kernel(StreamArgs a) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ __align__(8) uint64_t bars[kMaxUnits];
  __shared__ int running;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, units_in = a.inflight / a.unit;
  const int warps = min(kStreamWarps, units_in), depth = units_in / warps;  // producer warps, units each
  const long long units = a.stream / a.unit;
  const uint8_t* src = a.dram + size_t(blockIdx.x) * size_t(a.stream);
  if (threadIdx.x == 0) {
    for (int u = 0; u < warps * depth; ++u) mbar_init(smem_addr(&bars[u]), 1);
    running = warps;
  }
  __syncthreads();
  if (threadIdx.x == 0) a.start[blockIdx.x] = global_ns();
  if (warp < warps && lane == 0) {  // units w, w + warps, ... of the block's region, ring slots [w depth, ..)
    const long long mine = (units - warp + warps - 1) / warps;
    auto slot = [&](long long k) { return warp * depth + int(k % depth); };
    auto issue = [&](long long k) {
      const uint32_t bar = smem_addr(&bars[slot(k)]);
      const uint32_t dst = smem_addr(smem + size_t(slot(k)) * a.unit);
      const uint8_t* from = src + size_t(warp + k * warps) * a.unit;
      mbar_expect_bytes(bar, a.unit);
      if (a.fence) bulk_copy<true>(dst, from, a.unit, bar);
      else bulk_copy<false>(dst, from, a.unit, bar);
    };
    for (long long k = 0; k < min(mine, (long long)depth); ++k) issue(k);
    for (long long k = 0; k < mine; ++k) {
      mbar_wait(smem_addr(&bars[slot(k)]), unsigned(k / depth) & 1);
      if (k + depth < mine) issue(k + depth);
    }
    if (atomicSub(&running, 1) == 1) a.end[blockIdx.x] = global_ns();
  }
  if (warp == kStreamWarps && lane == 0) {
    constexpr int kSamples = 15;
    long long t[kSamples];
    volatile unsigned* seen = reinterpret_cast<volatile unsigned*>(smem + a.inflight);
    volatile int* live = &running;
    int n = 0;
    for (unsigned idx = blockIdx.x % kHotWords; n < kSamples && *live > 0; ++n) {
      const long long c = clock64();
      while (clock64() - c < 4000) {}  // ~2 us apart
      const long long t0 = clock64();
      idx = load_l2(a.hot + idx);
      *seen = idx;
      t[n] = clock64() - t0;
    }
    for (int i = 1; i < n; ++i)  // sorted: the median of the samples taken while the stream ran
      for (int j = i; j > 0 && t[j - 1] > t[j]; --j) {
        const long long x = t[j];
        t[j] = t[j - 1], t[j - 1] = x;
      }
    a.load[blockIdx.x] = n ? t[n / 2] : -1;
  }
}

// The hot words into L2 before each round (the copies of the round before may have pushed them out).
__global__ void warm_kernel(const unsigned* hot, unsigned* sink) {
  unsigned v = 0;
  for (int i = threadIdx.x; i < kHotWords; i += blockDim.x) v += load_l2(hot + i);
  if (v == 0xffffffffu) *sink = v;
}

// SM cycles per ns: clock64 against %globaltimer over ~1 ms.
__global__ void clock_kernel(double* out) {
  unsigned long long g0, g1;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g0));
  const long long c0 = clock64();
  do asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g1));
  while (g1 - g0 < 1000000ull);
  *out = double(clock64() - c0) / double(g1 - g0);
}

long long median(std::vector<long long> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// What both tables share: the grid, the DRAM the copies read (per_round bytes a round, rounds apart), the words in
// L2, the per-block results and the SM clock.
struct Setup {
  int grid = 0, unit = 0, rounds = 0;
  size_t per_round = 0, dram_bytes = 0, smem = 0;
  uint8_t* dram = nullptr;
  unsigned *hot = nullptr, *sink = nullptr;
  long long *first = nullptr, *mean = nullptr;
  unsigned long long *start = nullptr, *end = nullptr;
  double cycles_per_ns = 0;

  template <class T>
  std::vector<T> fetch(const T* d) const {
    std::vector<T> v(static_cast<size_t>(grid));
    check(cudaMemcpy(v.data(), d, v.size() * sizeof(T), cudaMemcpyDeviceToHost), "results");
    return v;
  }
};

// Bursts: the copies issued, then the timed loads; ns of the first load and of the chain's mean per load.
void burst_table(const Setup& S, const std::vector<int>& kbs, int loads, int sms) {
  std::printf("# %d blocks (one per SM of %d), %d-byte bulk units, %d dependent L2 loads, %d rounds; SM clock %.3f "
              "GHz\n",
              S.grid, sms, S.unit, loads, S.rounds, S.cycles_per_ns);
  std::printf("%-9s %8s %14s %12s %14s %12s\n", "copies", "KB/SM", "first cycles", "first ns", "chain cycles",
              "chain ns");
  size_t offset = 0;
  for (const Mode m : {Mode::bulk, Mode::cp_async})
    for (int kb : kbs) {
      std::vector<long long> f_all, m_all;
      const int inflight = kb * 1024 / S.unit * S.unit;  // whole units (cp.async takes the same bytes)
      for (int r = 0; r < S.rounds; ++r) {
        warm_kernel<<<1, 256>>>(S.hot, S.sink);
        if (offset + S.per_round > S.dram_bytes) offset = 0;
        Args a{S.dram + offset, S.hot, inflight, S.unit, loads, int(S.smem), S.first, S.mean, S.sink};
        offset += (size_t(S.grid) * inflight + 4095) / 4096 * 4096;
        if (m == Mode::bulk) queue_kernel<Mode::bulk><<<S.grid, 64, S.smem>>>(a);
        else queue_kernel<Mode::cp_async><<<S.grid, 64, S.smem>>>(a);
        check(cudaGetLastError(), "launch");
        const auto f = S.fetch(S.first), mm = S.fetch(S.mean);
        if (r == 0) continue;  // the first round warms the instruction caches and the hot words
        f_all.insert(f_all.end(), f.begin(), f.end());
        m_all.insert(m_all.end(), mm.begin(), mm.end());
      }
      const long long fc = median(f_all), mc = median(m_all);
      std::printf("%-9s %8d %14lld %12.0f %14lld %12.0f\n", m == Mode::bulk ? "bulk" : "cp.async", inflight / 1024, fc,
                  double(fc) / S.cycles_per_ns, mc, double(mc) / S.cycles_per_ns);
    }
}

// Steady state: GB/s over the whole grid (first start to last end) and the L2-hit loads' median ns, with and without
// the proxy fence before each copy.
void stream_table(const Setup& S, const std::vector<int>& kbs, int stream_mb) {
  std::printf("# %d blocks streaming %d MB each, %d-byte bulk units, up to %d warps copying; SM clock %.3f GHz\n",
              S.grid, stream_mb, S.unit, kStreamWarps, S.cycles_per_ns);
  std::printf("%8s %6s %12s %12s %12s %12s\n", "KB/SM", "warps", "GB/s fence", "load ns", "GB/s none", "load ns");
  const size_t block_bytes = (size_t(stream_mb) << 20) / S.unit * S.unit;
  for (int kb : kbs) {
    const int units_in = kb * 1024 / S.unit, warps = std::min(kStreamWarps, units_in);
    if (units_in == 0) continue;
    const int inflight = units_in / warps * warps * S.unit;
    std::printf("%8d %6d", inflight / 1024, warps);
    for (const bool fence : {true, false}) {
      std::vector<double> gbs;
      std::vector<long long> lat;
      for (int r = 0; r < S.rounds; ++r) {
        warm_kernel<<<1, 256>>>(S.hot, S.sink);
        StreamArgs a{S.dram + (r % 2) * S.per_round, S.hot, (long long)stream_mb << 20, inflight, S.unit, fence,
                     S.start, S.end, S.first};
        stream_kernel<<<S.grid, 32 * (kStreamWarps + 1), S.smem>>>(a);
        check(cudaGetLastError(), "launch");
        const auto s0 = S.fetch(S.start), s1 = S.fetch(S.end);
        const double ns = double(*std::max_element(s1.begin(), s1.end()) - *std::min_element(s0.begin(), s0.end()));
        gbs.push_back(double(S.grid) * double(block_bytes) / ns);
        for (long long v : S.fetch(S.first))
          if (v >= 0) lat.push_back(v);
      }
      std::sort(gbs.begin(), gbs.end());
      std::printf(" %12.0f %12.0f", gbs[gbs.size() / 2], double(median(lat)) / S.cycles_per_ns);
    }
    std::printf("\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> kbs = {0, 16, 32, 64, 128, 192};
  int unit = 2304, loads = 8, rounds = 20, grid = 0, stream_mb = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "queue_bench: %s needs a value\n", f.c_str());
      return 2;
    }
    const std::string v = argv[++i];
    if (f == "--kb") {
      kbs.clear();
      for (const std::string& s : kvtax_bench::split(v)) kbs.push_back(std::atoi(s.c_str()));
    } else if (f == "--unit") {
      unit = std::atoi(v.c_str());
    } else if (f == "--loads") {
      loads = std::atoi(v.c_str());
    } else if (f == "--rounds") {
      rounds = std::atoi(v.c_str());
    } else if (f == "--grid") {
      grid = std::atoi(v.c_str());
    } else if (f == "--stream") {
      stream_mb = std::atoi(v.c_str());
    } else {
      std::fprintf(stderr, "queue_bench: unknown flag %s\n", f.c_str());
      return 2;
    }
  }
  if (unit < 16 || unit % 16 != 0 || loads < 1 || rounds < 1 || grid < 0 || stream_mb < 0 || stream_mb > 64) {
    std::fprintf(stderr, "queue_bench: --unit a multiple of 16, --loads, --rounds >= 1, --grid >= 0, --stream 0-64\n");
    return 2;
  }
  int max_kb = 0;
  for (int kb : kbs) {
    if (kb < 0 || kb * 1024 / unit > kMaxUnits || kb > 200) {
      std::fprintf(stderr, "queue_bench: %d KB in flight: 0 to 200, at most %d units\n", kb, kMaxUnits);
      return 2;
    }
    max_kb = std::max(max_kb, kb);
  }
  int dev = 0, sms = 0;
  check(cudaGetDevice(&dev), "device");
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "SM count");
  Setup S;
  S.grid = grid ? grid : sms, S.unit = unit, S.rounds = rounds;
  // Enough DRAM that no round reads what an earlier one left in L2 (60 MB): rounds x modes x the largest grid's bytes.
  S.per_round = std::max(size_t(S.grid) * max_kb * 1024, size_t(S.grid) * (size_t(stream_mb) << 20)) + 4096;
  S.dram_bytes = stream_mb ? 2 * S.per_round : S.per_round * rounds * 2 + (256 << 20);
  S.smem = size_t(max_kb) * 1024 + 16;  // the copies' stages, then the loads' sink
  check(cudaMalloc(&S.dram, S.dram_bytes), "DRAM buffer");
  check(cudaMemset(S.dram, 1, S.dram_bytes), "DRAM buffer");
  std::vector<unsigned> h(kHotWords);
  for (int i = 0; i < kHotWords; ++i) h[size_t(i)] = unsigned((i + 97) % kHotWords);
  check(cudaMalloc(&S.hot, kHotWords * 4), "hot words");
  check(cudaMemcpy(S.hot, h.data(), kHotWords * 4, cudaMemcpyHostToDevice), "hot words");
  const size_t n = size_t(S.grid);
  check(cudaMalloc(&S.sink, n * 4), "sink");
  for (long long** p : {&S.first, &S.mean}) check(cudaMalloc(p, n * 8), "results");
  for (unsigned long long** p : {&S.start, &S.end}) check(cudaMalloc(p, n * 8), "results");
  double* cpn = nullptr;
  check(cudaMalloc(&cpn, 8), "clock");
  clock_kernel<<<1, 1>>>(cpn);
  check(cudaMemcpy(&S.cycles_per_ns, cpn, 8, cudaMemcpyDeviceToHost), "clock");
  for (const void* k : {reinterpret_cast<const void*>(queue_kernel<Mode::bulk>),
                        reinterpret_cast<const void*>(queue_kernel<Mode::cp_async>),
                        reinterpret_cast<const void*>(stream_kernel)})
    check(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(S.smem)), "smem");
  if (stream_mb) stream_table(S, kbs, stream_mb);
  else burst_table(S, kbs, loads, sms);
  for (void* p : {static_cast<void*>(S.dram), static_cast<void*>(S.hot), static_cast<void*>(S.sink),
                  static_cast<void*>(S.first), static_cast<void*>(S.mean), static_cast<void*>(S.start),
                  static_cast<void*>(S.end), static_cast<void*>(cpn)})
    cudaFree(p);
  return 0;
}
