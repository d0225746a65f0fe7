// CUDA decode attention vs float64 references on fresh random inputs, every codec. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/f16.h"
#include "cuda/attention.h"
#include "cuda_test_util.h"
#include "kv/cache.h"
#include "kv/rotation.h"
#include "kv_test_util.h"

namespace kvtax {
namespace {

using kvtax::testing::gaussian;
using kvtax::testing::outliers;
using kvtax::testing::rel_l2;

struct Shape { int n_kv, n_heads, d, len; };

// float64 attention of one query per head (at the last position) over decoded rows (k, v: [len][n_kv*d]).
std::vector<double> exact(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                          const Shape& s) {
  return kvtax::testing::exact_attention(q, k, v, s.n_kv, s.n_heads, s.d, s.len - 1, 1);
}

struct Result {
  std::vector<float> gpu;
  std::vector<double> stored;  // exact attention over the rows as stored (decoded)
  std::vector<double> input;   // exact attention over the unquantized inputs
};

// K with outlier channels (as real K has) or plain Gaussian. q_rotated (rotated codecs): the kernel gets q rotated
// on the host, as the KV encode rotates it in the decode step, and is told so.
// kv_scale: K and V times kv_scale, q over it (the same scores).
Result run(kv::CodecId c, const Shape& s, uint64_t seed, bool k_outliers = true, bool q_rotated = false,
           float kv_scale = 1.0f) {
  KvCache cache({1, s.n_kv, s.d}, parse_kv_spec(kv::codec(c).name), size_t(s.len));
  auto k = k_outliers ? outliers(size_t(s.len) * s.n_kv, s.d, seed) : gaussian(size_t(s.len) * s.n_kv * s.d, seed);
  auto v = gaussian(size_t(s.len) * s.n_kv * s.d, seed + 1);
  auto q = gaussian(size_t(s.n_heads) * s.d, seed + 2);
  for (float& x : k) x *= kv_scale;
  for (float& x : v) x *= kv_scale;
  for (float& x : q) x /= kv_scale;
  for (int p = 0; p < s.len; p += KvCache::kDefaultMaxChunk) {
    const int n = std::min(KvCache::kDefaultMaxChunk, s.len - p);
    const size_t off = size_t(p) * s.n_kv * s.d;
    cache.append(0, n, k.data() + off, v.data() + off);
    cache.commit(n);
  }
  std::vector<float> kd(k.size()), vd(v.size());
  for (int t = 0; t < s.len; ++t)
    for (int h = 0; h < s.n_kv; ++h) {
      const size_t off = (size_t(t) * s.n_kv + h) * s.d;
      cache.read_token(0, t, h, kd.data() + off, vd.data() + off);
    }

  cuda::DeviceKv dkv(c, s.n_kv, s.d, s.len);
  dkv.fill(0xff);  // rows past the context hold NaN codes: a kernel that lets one into the output fails
  dkv.copy_from(cache, 0);
  cuda::Buffer qd(q.size() * 4), out(q.size() * 4), scratch(cuda::decode_scratch_bytes(dkv, s.n_heads));
  std::vector<float> qr = q;
  if (q_rotated)
    for (int h = 0; h < s.n_heads; ++h) kv::rotate(qr.data() + size_t(h) * s.d, s.d, qr.data() + size_t(h) * s.d);
  qd.upload(qr.data(), qr.size() * 4);
  out.fill(0xff);  // NaN: any output the kernels do not write fails the finiteness check
  scratch.fill(0xff);
  cuda::decode_attention(dkv, qd.as<float>(), s.n_heads, out.as<float>(), scratch.get(), nullptr, nullptr, q_rotated);
  cuda::check(cudaDeviceSynchronize(), "attention test");
  Result r;
  r.gpu.resize(q.size());
  out.download(r.gpu.data(), q.size() * 4);
  r.stored = exact(q, kd, vd, s);
  r.input = exact(q, k, v, s);
  return r;
}

bool all_finite(const std::vector<float>& v) {
  for (float x : v)
    if (!std::isfinite(x)) return false;
  return true;
}

// Kernel error vs the float64 attention over the decoded rows, for every codec and shape: GQA groups of 1, 4, 7, 8,
// 16 and 20 heads (two row groups of the tensor-core kernel), head_dim 64/128/256, contexts shorter than a tile,
// odd, on and past page boundaries (256 tokens), and long enough for many chunks. f32 runs the scalar kernel in f32
// over exactly the stored values (2e-5). The others run on the tensor cores, where q, the decoded K/V and the
// softmax weights are rounded to f16 (11-bit significands, f32 accumulation): ~1e-3 from float64 with the outlier
// channels of K; a wrong fragment, mask, scale or chunk gives O(1). Bound 4e-3, as for the prefill kernel. bf16
// meets its exact values with q and the weights each split into two bf16 halves (~16 bits), within f32's bound
// (worst 6.9e-6, H200, session 32).
double kernel_bound(kv::CodecId c) {
  return c == kv::CodecId::f32 || c == kv::CodecId::bf16 ? 2e-5 : 4e-3;
}

TEST(CudaAttention, EveryCodecMatchesStoredRows) {
  REQUIRE_GPU();
  const Shape shapes[] = {{8, 32, 128, 1},    {8, 32, 128, 77},  {2, 14, 64, 1000}, {1, 16, 256, 513},
                          {8, 32, 128, 20000}, {4, 4, 64, 4099}, {2, 16, 128, 256}, {1, 20, 128, 257},
                          {4, 64, 64, 3001},   {1, 1, 256, 300}, {2, 8, 128, 15},   {8, 32, 128, 4111}};
  uint64_t seed = 1000;
  for (int ci = 0; ci < kv::kNumCodecs; ++ci) {
    const auto c = kv::CodecId(ci);
    double worst = 0;
    for (const Shape& s : shapes) {
      const Result r = run(c, s, seed++);
      ASSERT_TRUE(all_finite(r.gpu)) << kv::codec(c).name << " len " << s.len << ": unwritten or NaN output";
      const double e = rel_l2(r.gpu, r.stored);
      worst = std::max(worst, e);
      EXPECT_LE(e, kernel_bound(c)) << kv::codec(c).name << " kv " << s.n_kv << " heads " << s.n_heads << " d " << s.d
                                    << " len " << s.len;
    }
    std::printf("[cuda-attention] %-4s worst rel-L2 vs float64 over the stored rows %.2e\n", kv::codec(c).name, worst);
  }
}

// q rotated before the kernel (the decode step's KV encode does it) gives the attention over the stored rows, in the
// GQA form (groups up to 8 heads) and the rows form, for every rotated codec.
TEST(CudaAttention, PreRotatedQueryMatchesStoredRows) {
  REQUIRE_GPU();
  const Shape shapes[] = {{8, 32, 128, 4111}, {2, 14, 64, 1000}, {1, 16, 256, 513}, {1, 20, 128, 257}};
  uint64_t seed = 3000;
  for (auto c : {kv::CodecId::q4r, kv::CodecId::tq4, kv::CodecId::tq3})
    for (const Shape& s : shapes) {
      const Result r = run(c, s, seed++, true, true);
      ASSERT_TRUE(all_finite(r.gpu)) << kv::codec(c).name << " len " << s.len << ": unwritten or NaN output";
      EXPECT_LE(rel_l2(r.gpu, r.stored), kernel_bound(c))
          << kv::codec(c).name << " kv " << s.n_kv << " heads " << s.n_heads << " d " << s.d << " len " << s.len;
    }
}

// bf16 KV keeps f32's range on the tensor cores: K and V beyond f16's largest value (65504), q scaled down to the
// same scores, match the stored rows; rounded to f16 anywhere, they would be inf.
TEST(CudaAttention, Bf16BeyondTheF16Range) {
  REQUIRE_GPU();
  const Shape shapes[] = {{8, 32, 128, 4111}, {2, 14, 64, 1000}, {1, 16, 256, 513}};
  uint64_t seed = 4000;
  for (const Shape& s : shapes) {
    const Result r = run(kv::CodecId::bf16, s, seed++, true, false, 1e6f);
    ASSERT_TRUE(all_finite(r.gpu)) << "len " << s.len << ": inf or NaN output";
    EXPECT_LE(rel_l2(r.gpu, r.stored), kernel_bound(kv::CodecId::bf16)) << "d " << s.d << " len " << s.len;
  }
}

// The page table is honoured: the same rows with their pages stored in reverse order give the same output
// (bit for bit: same kernel, same chunks), and a launch that reads the length from device memory with a grid
// sized for the whole capacity (the CUDA-graph path) matches the host-length launch to rounding (other chunks:
// other running maxima, so other f16 roundings of the softmax weights; a wrong chunk gives O(1)).
TEST(CudaAttention, PagedAndDeviceLengthMatch) {
  REQUIRE_GPU();
  const Shape s{2, 8, 128, 1300};
  for (auto c : {kv::CodecId::f16, kv::CodecId::fp8, kv::CodecId::q4r, kv::CodecId::bf16}) {
    KvCache cache({1, s.n_kv, s.d}, parse_kv_spec(kv::codec(c).name), size_t(s.len));
    const auto k = outliers(size_t(s.len) * s.n_kv, s.d, 5 + int(c));
    const auto v = gaussian(size_t(s.len) * s.n_kv * s.d, 6 + int(c));
    const auto q = gaussian(size_t(s.n_heads) * s.d, 7 + int(c));
    for (int p = 0; p < s.len; p += KvCache::kDefaultMaxChunk) {
      const int n = std::min(KvCache::kDefaultMaxChunk, s.len - p);
      cache.append(0, n, k.data() + size_t(p) * s.n_kv * s.d, v.data() + size_t(p) * s.n_kv * s.d);
      cache.commit(n);
    }
    cuda::DeviceKv dkv(c, s.n_kv, s.d, s.len + 1000);  // capacity past len: the device-length grid is larger
    dkv.copy_from(cache, 0);
    const cuda::KvView base = dkv.view();
    const int n_pages = base.max_len / cuda::kv_page_tokens();
    cuda::Buffer pool(size_t(n_pages) * base.page_bytes), pages(size_t(n_pages) * 4), len_dev(4);
    std::vector<int32_t> ids(static_cast<size_t>(n_pages));
    for (int i = 0; i < n_pages; ++i) {
      ids[size_t(i)] = n_pages - 1 - i;
      cuda::check(cudaMemcpy(pool.as<uint8_t>() + size_t(ids[size_t(i)]) * base.page_bytes,
                             base.pool + size_t(i) * base.page_bytes, base.page_bytes, cudaMemcpyDeviceToDevice),
                  "page copy");
    }
    pages.upload(ids.data(), ids.size() * 4);
    len_dev.upload(&s.len, 4);
    cuda::KvView reversed = base;
    reversed.pool = pool.as<uint8_t>();
    reversed.pages = pages.as<int32_t>();
    cuda::KvView by_device = reversed;
    by_device.len_dev = len_dev.as<int>();

    cuda::Buffer qd(q.size() * 4), out(q.size() * 4), scratch(cuda::decode_scratch_bytes(base, s.n_heads));
    qd.upload(q.data(), q.size() * 4);
    std::vector<std::vector<float>> got;
    for (const cuda::KvView& kv : {base, reversed, by_device}) {
      out.fill(0xff);
      scratch.fill(0xff);
      cuda::decode_attention(kv, qd.as<float>(), s.n_heads, out.as<float>(), scratch.get());
      cuda::check(cudaDeviceSynchronize(), "paged attention test");
      got.emplace_back(q.size());
      out.download(got.back().data(), q.size() * 4);
      ASSERT_TRUE(all_finite(got.back())) << kv::codec(c).name;
    }
    EXPECT_EQ(got[0], got[1]) << kv::codec(c).name << ": reversed pages";
    std::vector<double> ref(got[0].begin(), got[0].end());
    EXPECT_LE(rel_l2(got[2], ref), 2e-3) << kv::codec(c).name << ": device length";
  }
}

// Codec error: attention over the stored rows vs over the unquantized inputs, so a decoder that is wrong
// the same way on CPU and GPU still fails. Relative RMS of the output with Gaussian K and V; the bounds
// are ~1.5x what the CPU reference gives over 4 seeds (f16 2.9e-4, bf16 2.4e-3, fp8 3.7e-2, q8 8e-3,
// q4 0.126, q4r 0.127, tq4 0.143, tq3 0.271), f16's raised to 1.5e-3 for the tensor-core kernel's f16 q and
// softmax weights; a decoder that is off by a scale or a lane gives ~1.
TEST(CudaAttention, CodecErrorWithinBounds) {
  REQUIRE_GPU();
  const double bound[kv::kNumCodecs] = {2e-5, 1.5e-3, 4e-3, 5.5e-2, 1.2e-2, 0.19, 0.19, 0.21, 0.4};
  const Shape s{2, 8, 128, 2000};
  for (int ci = 0; ci < kv::kNumCodecs; ++ci) {
    const auto c = kv::CodecId(ci);
    const Result r = run(c, s, 77 + ci, false);
    ASSERT_TRUE(all_finite(r.gpu)) << kv::codec(c).name;
    EXPECT_LE(rel_l2(r.gpu, r.input), bound[ci]) << kv::codec(c).name;
  }
}

// Every code value of the codecs the kernel decodes straight from the raw rows into mma fragments (fp8: all 254
// e4m3 codes but the two NaNs, which the encoder never writes; q8 all 256 bytes; q4 all 16 nibbles in both halves of
// a byte), in K and in V, at every position of a row over tokens: rows written byte by byte, not through an
// encoder (whose outputs leave most codes rare), against float64 attention over the CPU decoder's values.
TEST(CudaAttention, EveryCodeValueMatchesCpuDecode) {
  REQUIRE_GPU();
  const Shape s{2, 8, 128, 700};  // 3 pages, a partial last tile
  for (auto c : {kv::CodecId::fp8, kv::CodecId::q8, kv::CodecId::q4}) {
    const kv::CodecInfo& info = kv::codec(c);
    const size_t rb = info.row_bytes(s.d);
    cuda::DeviceKv dkv(c, s.n_kv, s.d, s.len);
    std::vector<float> kd(size_t(s.len) * s.n_kv * s.d), vd(kd.size());
    uint32_t state = 12345u + uint32_t(c);
    auto next = [&] { return state = state * 1664525u + 1013904223u; };
    for (int h = 0; h < s.n_kv; ++h) {
      std::vector<uint8_t> rows[2];
      for (int kv_i = 0; kv_i < 2; ++kv_i) {
        rows[kv_i].assign(rb * size_t(s.len), 0);
        for (int t = 0; t < s.len; ++t) {
          uint8_t* row = rows[kv_i].data() + size_t(t) * rb;
          const float scale = (0.5f + float(next() % 1000) / 1000.0f) / (c == kv::CodecId::fp8 ? 64.0f : 16.0f);
          size_t codes = 4;
          if (c == kv::CodecId::fp8) {
            std::memcpy(row, &scale, 4);
          } else {
            codes = size_t(s.d / 32) * 2;
            for (int b = 0; b < s.d / 32; ++b) {
              const uint16_t h16 = f32_to_f16(scale * (c == kv::CodecId::q8 ? 0.125f : 1.0f) * float(1 + b % 3));
              std::memcpy(row + 2 * b, &h16, 2);
            }
          }
          for (size_t j = codes; j < rb; ++j) {
            const size_t x = size_t(t) * 7 + j * 13 + size_t(h) * 31 + size_t(kv_i) * 101;
            int code = int(x % (c == kv::CodecId::fp8 ? 254 : 256));
            if (c == kv::CodecId::fp8 && code >= 0x7f) ++code;  // 0x00-0x7e, 0x80-0xfe
            row[j] = uint8_t(code);
          }
          float* dst = (kv_i ? vd : kd).data() + (size_t(t) * s.n_kv + h) * s.d;
          info.decode(row, s.d, dst);
        }
      }
      dkv.write_rows(h, 0, s.len, rows[0].data(), rows[1].data());
    }
    const auto q = gaussian(size_t(s.n_heads) * s.d, 4242 + int(c));
    cuda::Buffer qd(q.size() * 4), out(q.size() * 4), scratch(cuda::decode_scratch_bytes(dkv, s.n_heads));
    qd.upload(q.data(), q.size() * 4);
    out.fill(0xff);
    scratch.fill(0xff);
    cuda::decode_attention(dkv, qd.as<float>(), s.n_heads, out.as<float>(), scratch.get());
    cuda::check(cudaDeviceSynchronize(), "code value test");
    std::vector<float> got(q.size());
    out.download(got.data(), q.size() * 4);
    ASSERT_TRUE(all_finite(got)) << info.name;
    const double e = rel_l2(got, exact(q, kd, vd, s));
    std::printf("[cuda-attention] %-4s every code value: rel-L2 vs float64 %.2e\n", info.name, e);
    EXPECT_LE(e, kernel_bound(c)) << info.name;
  }
}

TEST(CudaAttention, RejectsBadShapes) {
  REQUIRE_GPU();
  EXPECT_THROW(cuda::DeviceKv(kv::CodecId::f16, 8, 96, 100), Error);  // no kernel for head_dim 96
  EXPECT_THROW(cuda::DeviceKv(kv::CodecId::f16, 0, 128, 100), Error);
  cuda::DeviceKv kv(kv::CodecId::q8, 8, 128, 100);
  ASSERT_EQ(kv.capacity(), cuda::kv_page_tokens());  // whole pages
  EXPECT_THROW(kv.set_len(kv.capacity() + 1), Error);
  std::vector<uint8_t> rows(kv.row_bytes() * size_t(kv.capacity()));
  EXPECT_THROW(kv.write_rows(0, 100, kv.capacity() - 99, rows.data(), rows.data()), Error);  // past capacity
  cuda::Buffer q(32 * 128 * 4), out(32 * 128 * 4), scratch(cuda::decode_scratch_bytes(kv, 32));
  EXPECT_THROW(cuda::decode_attention(kv, q.as<float>(), 32, out.as<float>(), scratch.get()), Error);  // empty
  kv.set_len(10);
  EXPECT_THROW(cuda::decode_attention(kv, q.as<float>(), 30, out.as<float>(), scratch.get()), Error);  // 30 % 8
}

}  // namespace
}  // namespace kvtax
