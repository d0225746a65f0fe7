// The device KV encoder vs the CPU encoders of kv/codecs, byte for byte, on fresh random rows (Gaussian,
// outlier channels, a zero row, a row of equal magnitudes). Skips without a GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "cuda/kv_encode.h"
#include "kv/codecs/codec.h"
#include "kv/rotation.h"
#include "kv_test_util.h"

namespace kvtax {
namespace {

#define REQUIRE_GPU() \
  if (!cuda::available()) GTEST_SKIP() << "no CUDA device"

TEST(CudaKvEncode, EveryCodecMatchesCpuBitForBit) {
  REQUIRE_GPU();
  uint64_t seed = 4242;
  for (int d : {64, 128, 256}) {
    const int n = 300;
    std::vector<float> x = kvtax::testing::outliers(size_t(n), d, seed++);
    const auto g = kvtax::testing::gaussian(size_t(100) * d, seed++, 0.01f);
    std::copy(g.begin(), g.end(), x.begin());  // small values: fp8 subnormals, f16 rounding near 0
    std::fill(x.begin() + size_t(200) * d, x.begin() + size_t(201) * d, 0.0f);  // zero row
    for (int i = 0; i < d; ++i) x[size_t(201) * d + i] = i % 2 ? 0.75f : -0.75f;  // ties for q4's maximum
    cuda::Buffer xd(x.size() * 4);
    xd.upload(x.data(), x.size() * 4);
    for (int ci = 0; ci < kv::kNumCodecs; ++ci) {
      const kv::CodecInfo& c = kv::codec(kv::CodecId(ci));
      const size_t rb = c.row_bytes(d);
      cuda::Buffer rows(rb * n + 4);
      rows.fill(0xa5);  // poison: every byte must be written
      cuda::encode_rows(c.id, d, xd.as<float>(), n, rows.as<uint8_t>());
      cuda::check(cudaDeviceSynchronize(), "encode test");
      std::vector<uint8_t> got(rb * n + 4), want(rb * n);
      rows.download(got.data(), got.size());
      std::vector<float> tmp(static_cast<size_t>(d));
      for (int r = 0; r < n; ++r) {
        std::copy(x.begin() + size_t(r) * d, x.begin() + size_t(r + 1) * d, tmp.begin());
        if (c.rotated) kv::rotate(tmp.data(), d, tmp.data());
        c.encode(tmp.data(), d, want.data() + size_t(r) * rb);
      }
      int bad_rows = 0, first_bad = -1;
      for (int r = 0; r < n; ++r)
        if (std::memcmp(got.data() + size_t(r) * rb, want.data() + size_t(r) * rb, rb) != 0) {
          ++bad_rows;
          if (first_bad < 0) first_bad = r;
        }
      EXPECT_EQ(bad_rows, 0) << c.name << " d " << d << ": first differing row " << first_bad;
      for (int i = 0; i < 4; ++i) EXPECT_EQ(got[rb * n + i], 0xa5) << c.name << ": wrote past the last row";
    }
  }
}

}  // namespace
}  // namespace kvtax
