#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "kv/cache.h"
#include "kv_test_util.h"

namespace kvtax {
namespace {

using kvtax::testing::gaussian;

TEST(KvSpec, Parse) {
  KvSpec s = parse_kv_spec("q8");
  EXPECT_EQ(s.k, "q8");
  EXPECT_EQ(s.v, "q8");
  EXPECT_EQ(s.policy.window, 0);
  s = parse_kv_spec("q8/q4,window=4096,sinks=4");
  EXPECT_EQ(s.k, "q8");
  EXPECT_EQ(s.v, "q4");
  EXPECT_EQ(s.policy.window, 4096);
  EXPECT_EQ(s.policy.sinks, 4);
  s = parse_kv_spec("k=tq4,v=tq3,recent=128");
  EXPECT_EQ(s.k, "tq4");
  EXPECT_EQ(s.v, "tq3");
  EXPECT_EQ(s.policy.recent, 128);
  EXPECT_EQ(parse_kv_spec(s.str()).str(), s.str());
  for (const char* bad : {"", "q5", "q8,window=-1", "q8,window=abc", "q8,foo=1", "q8,,", "q8,sinks=4", "q8/zz",
                          "q8,window=1x", "q8,q4"})
    EXPECT_THROW(parse_kv_spec(bad), Error) << bad;
}

const KvShape kShape{2, 2, 64};

void fill(KvCache& c, int n_tokens, int chunk, uint64_t seed) {
  const auto& s = c.shape();
  const size_t w = size_t(s.n_kv_heads) * s.head_dim;
  for (int done = 0; done < n_tokens; done += chunk) {
    const int n = std::min(chunk, n_tokens - done);
    for (int l = 0; l < s.n_layers; ++l) {
      const auto k = gaussian(n * w, seed + done * 7 + l), v = gaussian(n * w, seed + done * 7 + l + 1000003);
      c.append(l, n, k.data(), v.data());
    }
    c.commit(n);
  }
}

TEST(KvCache, CapacityExactForUnbounded) {
  const KvShape sh{32, 8, 128};  // Llama-3.1-8B
  for (const char* codec : {"f16", "q8", "q4", "tq3", "fp8"}) {
    const KvSpec spec = parse_kv_spec(codec);
    const size_t res = size_t(16) << 30;
    const size_t cap = KvCache::capacity(sh, spec, res);
    EXPECT_EQ(cap % KvCache::kBlockTokens, 0u);
    EXPECT_LE(KvCache::bytes_needed(sh, spec, cap), res) << codec;
    EXPECT_GT(KvCache::bytes_needed(sh, spec, cap + 1), res) << codec;
  }
  // f16: 128 KiB per token + 64 bytes padding per 256-token block.
  const size_t cap = KvCache::capacity(sh, parse_kv_spec("f16"), size_t(16) << 30);
  EXPECT_EQ(cap, 131072u - 256u);  // padding costs the last block
  KvCache c(sh, parse_kv_spec("q8"), 1000);
  EXPECT_DOUBLE_EQ(c.bytes_per_token(), 32.0 * 8 * 2 * 136);
}

TEST(KvCache, WindowPlateausAndCapacityIsUnbounded) {
  const KvSpec spec = parse_kv_spec("q8,window=600,sinks=4");
  const size_t plateau = KvCache::bytes_needed(kShape, spec, 1u << 30);
  EXPECT_EQ(KvCache::capacity(kShape, spec, plateau), std::numeric_limits<size_t>::max());
  EXPECT_LT(KvCache::capacity(kShape, spec, plateau - 1), std::numeric_limits<size_t>::max());
  KvCache c(kShape, spec, 1u << 20);
  fill(c, 5000, 128, 1);
  EXPECT_EQ(c.n_past(), 5000);
  EXPECT_LE(c.peak_bytes_used(), plateau);
  EXPECT_LE(c.bytes_used(), plateau);
  // sinks stay, the window stays, the middle is gone
  EXPECT_TRUE(c.present(0));
  EXPECT_TRUE(c.present(3));
  EXPECT_FALSE(c.present(1000));
  EXPECT_TRUE(c.present(5000 - 600));
  std::vector<float> k(64), v(64);
  EXPECT_THROW(c.read_token(0, 1000, 0, k.data(), v.data()), Error);
  EXPECT_NO_THROW(c.read_token(0, 4999, 1, k.data(), v.data()));
  EXPECT_TRUE(c.visible(2, 4999));
  EXPECT_FALSE(c.visible(4399, 4999));
  EXPECT_TRUE(c.visible(4400, 4999));
  EXPECT_FALSE(c.visible(5000, 4999));
}

TEST(KvCache, ReservationHoldsForEveryPolicy) {
  for (const char* s : {"q4", "q8/q4,window=300,sinks=4", "tq3,recent=100", "q8,window=700,recent=200", "f16,recent=1"}) {
    const KvSpec spec = parse_kv_spec(s);
    const int tokens = 2000;
    KvCache c(kShape, spec, tokens);
    EXPECT_NO_THROW(fill(c, tokens, KvCache::kDefaultMaxChunk, 3)) << s;
    EXPECT_LE(c.peak_bytes_used(), c.bytes_reserved()) << s;
    EXPECT_EQ(c.bytes_reserved(), KvCache::bytes_needed(kShape, spec, tokens));
  }
  KvCache c(kShape, parse_kv_spec("q8"), 300);  // 2 blocks
  EXPECT_THROW(fill(c, 600, 100, 4), Error);
}

TEST(KvCache, RecentTierIsF16ThenCodec) {
  const KvSpec spec = parse_kv_spec("q4,recent=256");
  KvCache c(kShape, spec, 4096);
  const int n = 1100;
  const size_t w = size_t(kShape.n_kv_heads) * kShape.head_dim;
  std::vector<std::vector<float>> ks(kShape.n_layers);
  for (int l = 0; l < kShape.n_layers; ++l) {
    const auto k = gaussian(n * w, 100 + l), v = gaussian(n * w, 200 + l);
    ks[l] = k;
    c.append(l, n, k.data(), v.data());
  }
  c.commit(n);
  // Positions 1100-256 = 844 onward must be f16 (block granularity: from block 3 = 768 on).
  std::vector<float> k(64), v(64);
  auto err = [&](int pos) {
    c.read_token(1, pos, 1, k.data(), v.data());
    double e = 0;
    for (int i = 0; i < 64; ++i) e = std::max(e, double(std::fabs(k[i] - ks[1][pos * w + 64 + i])));
    return e;
  };
  EXPECT_LT(err(1099), 5e-3);
  EXPECT_LT(err(844), 5e-3);
  EXPECT_LT(err(768), 5e-3);
  EXPECT_GT(err(767), 2e-2);  // q4 now
  EXPECT_GT(err(5), 2e-2);
  EXPECT_EQ(c.block_rows(0, 0, 3).kc, kv::CodecId::f16);
  EXPECT_EQ(c.block_rows(0, 0, 2).kc, kv::CodecId::q4);
}

TEST(KvCache, BadUse) {
  EXPECT_THROW(KvCache(KvShape{1, 1, 40}, parse_kv_spec("q8"), 10), Error);    // head_dim % 32
  EXPECT_NO_THROW(KvCache(KvShape{1, 1, 40}, parse_kv_spec("f16"), 10));
  EXPECT_NO_THROW(KvCache(KvShape{1, 1, 8}, parse_kv_spec("tq3"), 10));      // stories260K: head_dim 8
  EXPECT_THROW(KvCache(KvShape{1, 1, 96}, parse_kv_spec("tq4"), 10), Error);   // not a power of two
  EXPECT_THROW(KvCache(KvShape{0, 1, 64}, parse_kv_spec("f16"), 10), Error);
  KvCache c(kShape, parse_kv_spec("q8"), 100);
  const auto x = gaussian(2 * 128, 1);
  EXPECT_THROW(c.append(2, 1, x.data(), x.data()), Error);
  EXPECT_THROW(c.append(0, 0, x.data(), x.data()), Error);
  c.append(0, 2, x.data(), x.data());
  EXPECT_THROW(c.commit(2), Error);  // layer 1 missing
  c.append(1, 2, x.data(), x.data());
  c.commit(2);
  EXPECT_EQ(c.n_past(), 2);
  EXPECT_GT(c.bytes_used(), 0u);
  c.clear();
  EXPECT_EQ(c.n_past(), 0);
  EXPECT_EQ(c.bytes_used(), 0u);
}

}  // namespace
}  // namespace kvtax
