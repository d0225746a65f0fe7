#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/f16.h"
#include "core/memory.h"
#include "core/thread_pool.h"

using namespace kvtax;

TEST(F16, RoundTripsEveryHalf) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_to_f32(uint16_t(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_f16(f), h) << h;
  }
}

TEST(F16, RoundsToNearestEven) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(1.0f + 1.0f / 2048), 0x3c00);           // tie -> even
  EXPECT_EQ(f32_to_f16(1.0f + 3.0f / 2048), 0x3c02);           // tie -> even (up)
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);                     // overflows to inf
  EXPECT_EQ(f32_to_f16(5.9604644775390625e-8f), 0x0001);       // smallest subnormal
  EXPECT_EQ(f32_to_f16(2.98e-8f), 0x0000);
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(NAN))));
}

TEST(BF16, RoundTripAndRounding) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  for (uint32_t h = 0; h < 65536; h += 7) {
    const float f = bf16_to_f32(uint16_t(h));
    if (!std::isnan(f)) { EXPECT_EQ(f32_to_bf16(f), h); }
  }
}

TEST(ThreadPool, CoversRangeExactlyOnce) {
  for (int nth : {1, 2, 3, 5}) {
    ThreadPool pool(nth);
    for (int64_t n : {0, 1, 2, 7, 1000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      for (int rep = 0; rep < 50; ++rep)
        pool.parallel_for(n, [&](int64_t b, int64_t e, int) {
          for (int64_t i = b; i < e; ++i) hits[size_t(i)]++;
        });
      for (auto& h : hits) EXPECT_EQ(h.load(), 50);
    }
  }
}

TEST(Memory, PeakIsAtLeastCurrent) {
  const size_t rss = rss_bytes();
  EXPECT_GT(rss, 0u);
  EXPECT_GE(peak_rss_bytes(), rss);
  std::vector<char> big(64 << 20);
  std::memset(big.data(), 1, big.size());
  EXPECT_GE(peak_rss_bytes(), rss + (60u << 20));
}
