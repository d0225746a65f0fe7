// The device KV encoder vs the CPU encoders of kv/codecs, byte for byte, on fresh random rows (Gaussian,
// outlier channels, a zero row, a row of equal magnitudes). Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "cuda/kv_encode.h"
#include "cuda/ops.h"
#include "cuda_test_util.h"
#include "kv/codecs/codec.h"
#include "kv/rotation.h"
#include "kv_test_util.h"

namespace kvtax {
namespace {

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

// RoPE fused into the encoder (the decode step's path) vs ops::rope_qk then encode_kv: the same cache bytes and
// the same rotated q, for plain, NeoX and per-pair-factor (llama3) rotations, at a device-read position.
TEST(CudaKvEncode, FusedRopeMatchesRopeThenEncode) {
  REQUIRE_GPU();
  const int d = 128, nq = 32, nkv = 8, P = cuda::kv_page_tokens();
  std::vector<float> factors(d / 2);
  for (int i = 0; i < d / 2; ++i) factors[size_t(i)] = 1.0f + 0.125f * float(i % 7);
  cuda::Buffer fd(factors.size() * 4);
  fd.upload(factors.data(), factors.size() * 4);
  uint64_t seed = 77;
  for (kv::CodecId c : {kv::CodecId::f16, kv::CodecId::fp8, kv::CodecId::q4r, kv::CodecId::tq3})
    for (int variant = 0; variant < 3; ++variant) {
      cuda::ops::RopeParams rp;
      rp.neox = variant == 1;
      rp.dim = variant == 1 ? 64 : d;  // NeoX over part of the head
      rp.theta_scale = std::pow(500000.0f, -2.0f / float(rp.dim));
      rp.factor = variant == 2 ? fd.as<float>() : nullptr;
      const auto q = kvtax::testing::gaussian(size_t(nq) * d, seed++, 1.0f);
      const auto kv = kvtax::testing::gaussian(size_t(2 * nkv) * d, seed++, 1.0f);
      const int pos = P + 44 + 37 * variant;  // in the table's second entry: physical page 0
      const size_t page = cuda::kv_page_bytes(c, nkv, d), rb = kv::codec(c).row_bytes(d);
      std::vector<int32_t> table = {1, 0};
      cuda::Buffer tab(8), posd(4);
      tab.upload(table.data(), 8);
      posd.upload(&pos, 4);
      std::vector<uint8_t> got[2];
      std::vector<float> qgot[2];
      for (int fused = 0; fused < 2; ++fused) {
        cuda::Buffer qd(q.size() * 4), kd(size_t(nkv) * d * 4), vd(size_t(nkv) * d * 4), pool(2 * page);
        qd.upload(q.data(), q.size() * 4);
        kd.upload(kv.data(), size_t(nkv) * d * 4);
        vd.upload(kv.data() + size_t(nkv) * d, size_t(nkv) * d * 4);
        pool.fill(0x5a);
        const cuda::KvTarget t{c, nkv, d, rb, page, pool.as<uint8_t>(), tab.as<int32_t>()};
        if (fused) {
          cuda::encode_kv_rope(t, qd.as<float>(), nq, kd.as<float>(), vd.as<float>(), 1, 0, rp, nullptr,
                               posd.as<int>());
        } else {
          cuda::check(cuda::ops::rope_qk(qd.as<float>(), nq, kd.as<float>(), nkv, d, posd.as<int>(), rp, nullptr),
                      "rope");
          cuda::encode_kv(t, kd.as<float>(), vd.as<float>(), 1, 0, nullptr, posd.as<int>());
        }
        cuda::check(cudaDeviceSynchronize(), "fused rope test");
        got[fused].resize(2 * page);
        pool.download(got[fused].data(), got[fused].size());
        qgot[fused].resize(q.size());
        qd.download(qgot[fused].data(), q.size() * 4);
      }
      EXPECT_EQ(got[0], got[1]) << kv::codec(c).name << " variant " << variant;
      EXPECT_EQ(qgot[0], qgot[1]) << kv::codec(c).name << " variant " << variant;
      EXPECT_NE(qgot[1], q) << "q was not rotated";
      // K head 0's row landed in physical page 0 at slot pos % P.
      const auto row = got[1].begin() + std::ptrdiff_t(size_t(pos % P) * rb);
      EXPECT_FALSE(std::all_of(row, row + std::ptrdiff_t(rb), [](uint8_t b) { return b == 0x5a; }))
          << kv::codec(c).name;
    }
}

// rotate_q: q leaves the fused kernel roped and then rotated as the rotated codecs rotate K (the CPU's rotation of the
// roped q, to rounding: the device takes the CPU's butterfly order); codecs that are not rotated refuse it.
TEST(CudaKvEncode, FusedQRotationIsTheCpuRotation) {
  REQUIRE_GPU();
  const int nq = 8, nkv = 2;
  uint64_t seed = 900;
  for (int d : {64, 128, 256})
    for (kv::CodecId c : {kv::CodecId::q4r, kv::CodecId::tq4, kv::CodecId::tq3}) {
      cuda::ops::RopeParams rp;
      rp.dim = d;
      rp.theta_scale = std::pow(500000.0f, -2.0f / float(d));
      const auto q = kvtax::testing::gaussian(size_t(nq) * d, seed++, 1.0f);
      const auto kv = kvtax::testing::gaussian(size_t(2 * nkv) * d, seed++, 1.0f);
      const int pos = 37;
      const size_t page = cuda::kv_page_bytes(c, nkv, d), rb = kv::codec(c).row_bytes(d);
      std::vector<int32_t> table = {0};
      cuda::Buffer tab(4), posd(4), kd(size_t(nkv) * d * 4), vd(size_t(nkv) * d * 4), pool(page);
      tab.upload(table.data(), 4);
      posd.upload(&pos, 4);
      kd.upload(kv.data(), size_t(nkv) * d * 4);
      vd.upload(kv.data() + size_t(nkv) * d, size_t(nkv) * d * 4);
      const cuda::KvTarget t{c, nkv, d, rb, page, pool.as<uint8_t>(), tab.as<int32_t>()};
      std::vector<float> qgot[2];
      for (int rot = 0; rot < 2; ++rot) {
        cuda::Buffer qd(q.size() * 4);
        qd.upload(q.data(), q.size() * 4);
        cuda::encode_kv_rope(t, qd.as<float>(), nq, kd.as<float>(), vd.as<float>(), 1, 0, rp, nullptr,
                             posd.as<int>(), rot == 1);
        cuda::check(cudaDeviceSynchronize(), "fused q rotation test");
        qgot[rot].resize(q.size());
        qd.download(qgot[rot].data(), q.size() * 4);
      }
      std::vector<float> want = qgot[0];
      for (int h = 0; h < nq; ++h) kv::rotate(want.data() + size_t(h) * d, d, want.data() + size_t(h) * d);
      EXPECT_LE(kvtax::testing::rel_l2(qgot[1], want), 1e-6) << kv::codec(c).name << " d " << d;
      EXPECT_GT(kvtax::testing::rel_l2(qgot[1], qgot[0]), 0.1) << kv::codec(c).name << " d " << d << ": not rotated";
    }
  cuda::Buffer q(128 * 4), k(128 * 4), v(128 * 4), tab(4), pool(cuda::kv_page_bytes(kv::CodecId::f16, 1, 128));
  const cuda::KvTarget t{kv::CodecId::f16, 1, 128, kv::codec(kv::CodecId::f16).row_bytes(128),
                         cuda::kv_page_bytes(kv::CodecId::f16, 1, 128), pool.as<uint8_t>(), tab.as<int32_t>()};
  cuda::ops::RopeParams rp;
  rp.dim = 128;
  EXPECT_THROW(cuda::encode_kv_rope(t, q.as<float>(), 1, k.as<float>(), v.as<float>(), 1, 0, rp, nullptr, nullptr,
                                    true),
               Error);
}

}  // namespace
}  // namespace kvtax
