#pragma once
// This machine's read bandwidth: every thread sums its own contiguous share of a buffer far larger than
// the last-level cache (a plain read loop, 4 independent accumulators). Best of `passes` passes.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/cpu.h"
#include "core/thread_pool.h"
#include "core/timer.h"

namespace kvtax::bench {

__attribute__((target("avx2"))) inline uint64_t read_sum_avx2(const uint8_t* p, size_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 128 <= n; i += 128) {
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  const __m256i s = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
  return uint64_t(_mm256_extract_epi64(s, 0) + _mm256_extract_epi64(s, 1) + _mm256_extract_epi64(s, 2) +
                  _mm256_extract_epi64(s, 3));
}

inline uint64_t read_sum_scalar(const uint8_t* p, size_t n) {
  const auto* q = reinterpret_cast<const uint64_t*>(p);
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  for (size_t i = 0; i + 4 <= n / 8; i += 4) s0 += q[i], s1 += q[i + 1], s2 += q[i + 2], s3 += q[i + 3];
  return s0 + s1 + s2 + s3;
}

// GB/s (1e9 bytes/s). The buffer is freed before returning (call it after reading peak RSS).
inline double read_bandwidth_gbs(ThreadPool& pool, size_t bytes = size_t(512) << 20, int passes = 5) {
  const int nth = pool.size();
  const size_t share = bytes / size_t(nth) / 128 * 128;
  auto* buf = static_cast<uint8_t*>(std::aligned_alloc(64, share * size_t(nth)));
  pool.run([&](int tid, int) { std::memset(buf + share * size_t(tid), 1, share); });  // first touch per thread
  std::vector<uint64_t> sink(size_t(nth), 0);
  const bool avx2 = cpu().avx2;
  double best = 0;
  for (int p = 0; p < passes; ++p) {
    const double t0 = now_seconds();
    pool.run([&](int tid, int) {
      const uint8_t* b = buf + share * size_t(tid);
      sink[size_t(tid)] += avx2 ? read_sum_avx2(b, share) : read_sum_scalar(b, share);
    });
    best = std::max(best, double(share * size_t(nth)) / (now_seconds() - t0) / 1e9);
  }
  volatile uint64_t keep = 0;
  for (uint64_t s : sink) keep = keep + s;
  std::free(buf);
  return best;
}

}  // namespace kvtax::bench
