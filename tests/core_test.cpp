#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/f16.h"
#include "core/find_upward.h"
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

// The nearest ancestor of the working directory holding the path (the executable's ancestors, searched first, do not
// hold this test's unique name), files and directories told apart.
TEST(FindUpward, NearestAncestorOfTheWorkingDirectory) {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("kvtax-find-" + std::to_string(::getpid()));
  const std::string rel = "kvtax-find-" + std::to_string(::getpid()) + "-mark/x.txt";
  fs::create_directories(root / "a/b/c");
  fs::create_directories(root / "a" / fs::path(rel).parent_path());
  std::ofstream(root / "a" / rel) << "x";
  const fs::path before = fs::current_path();
  fs::current_path(root / "a/b/c");
  EXPECT_EQ(kvtax::find_upward(rel, kvtax::PathKind::file), (root / "a" / rel).string());
  EXPECT_EQ(kvtax::find_upward(fs::path(rel).parent_path().string(), kvtax::PathKind::directory),
            (root / "a" / fs::path(rel).parent_path()).string());
  EXPECT_EQ(kvtax::find_upward(rel, kvtax::PathKind::directory), "");  // a file, not a directory
  EXPECT_EQ(kvtax::find_upward(rel + ".missing", kvtax::PathKind::file), "");
  fs::current_path(before);
  fs::remove_all(root);
}
