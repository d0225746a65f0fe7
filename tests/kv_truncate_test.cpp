// KvCache::truncate: after truncating and appending new tokens, the cache must hold exactly what a fresh
// cache holds after the same tokens (every codec, window+sinks and recent= tiers).
#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "kv/cache.h"
#include "kv_test_util.h"

using namespace kvtax;

namespace {

const KvShape kShape{2, 2, 64};

// Appends tokens [from, to) of `rows` (per token: K then V for every head) in chunks of `chunk`.
void feed(KvCache& c, const std::vector<float>& ks, const std::vector<float>& vs, int from, int to, int chunk) {
  const size_t row = size_t(kShape.n_kv_heads) * kShape.head_dim;
  for (int p = from; p < to; p += chunk) {
    const int n = std::min(chunk, to - p);
    for (int l = 0; l < kShape.n_layers; ++l) c.append(l, n, ks.data() + p * row, vs.data() + p * row);
    c.commit(n);
  }
}

void expect_same(const KvCache& a, const KvCache& b) {
  ASSERT_EQ(a.n_past(), b.n_past());
  EXPECT_EQ(a.bytes_used(), b.bytes_used());
  const int d = kShape.head_dim;
  std::vector<float> ka(d), va(d), kb(d), vb(d);
  for (int pos = 0; pos < a.n_past(); ++pos) {
    ASSERT_EQ(a.present(pos), b.present(pos)) << pos;
    if (!a.present(pos)) continue;
    for (int l = 0; l < kShape.n_layers; ++l)
      for (int h = 0; h < kShape.n_kv_heads; ++h) {
        a.read_token(l, pos, h, ka.data(), va.data());
        b.read_token(l, pos, h, kb.data(), vb.data());
        ASSERT_EQ(ka, kb) << "K layer " << l << " pos " << pos;
        ASSERT_EQ(va, vb) << "V layer " << l << " pos " << pos;
      }
  }
}

struct Data {
  std::vector<float> old_k, old_v, new_k, new_v;
};

Data make_data(int n) {
  const size_t row = size_t(kShape.n_kv_heads) * kShape.head_dim;
  return {kvtax::testing::gaussian(n * row, 1), kvtax::testing::gaussian(n * row, 2), kvtax::testing::gaussian(n * row, 3),
          kvtax::testing::gaussian(n * row, 4)};
}

// Old sequence of `old_n` tokens, truncated to `keep`, continued with new tokens up to `total`; compared
// with a fresh cache fed the kept old tokens then the same new ones.
void check_truncate(const std::string& spec, int old_n, int keep, int total, int chunk) {
  SCOPED_TRACE(spec + " keep " + std::to_string(keep));
  Data d = make_data(total + old_n);
  // The new tokens share the first `keep` tokens with the old sequence.
  const size_t row = size_t(kShape.n_kv_heads) * kShape.head_dim;
  std::copy(d.old_k.begin(), d.old_k.begin() + keep * row, d.new_k.begin());
  std::copy(d.old_v.begin(), d.old_v.begin() + keep * row, d.new_v.begin());
  KvCache warm(kShape, parse_kv_spec(spec), size_t(total + old_n), chunk);
  feed(warm, d.old_k, d.old_v, 0, old_n, chunk);
  ASSERT_EQ(warm.reusable_prefix(keep), keep);
  warm.truncate(keep);
  EXPECT_EQ(warm.n_past(), keep);
  feed(warm, d.new_k, d.new_v, keep, total, chunk);
  KvCache cold(kShape, parse_kv_spec(spec), size_t(total + old_n), chunk);
  feed(cold, d.new_k, d.new_v, 0, keep, chunk);
  feed(cold, d.new_k, d.new_v, keep, total, chunk);
  expect_same(warm, cold);
}

}  // namespace

TEST(KvTruncate, EveryCodecUnbounded) {
  for (const char* c : {"f32", "f16", "bf16", "fp8", "q8", "q4", "q4r", "tq4", "tq3", "k=q8,v=q4r"}) {
    check_truncate(c, 700, 300, 900, 128);  // cut inside a block, continue past the old end
    check_truncate(c, 700, 512, 600, 64);   // cut on a block boundary
    check_truncate(c, 700, 0, 100, 64);
  }
}

TEST(KvTruncate, RecentTierReusesOnlyWhenColdBlocksStayCold) {
  KvCache c(kShape, parse_kv_spec("q4r,recent=256"), 4096, 100);
  Data d = make_data(1000);
  feed(c, d.old_k, d.old_v, 0, 1000, 100);  // blocks 0 and 1 are cold (older than the last 256)
  EXPECT_EQ(c.reusable_prefix(900), 900);  // block 1 ends at 512 <= 900 - 256: cold in a fresh cache too
  EXPECT_EQ(c.reusable_prefix(768), 768);
  EXPECT_EQ(c.reusable_prefix(767), 0);    // block 1 would still be f16 at 767
  EXPECT_EQ(c.reusable_prefix(5000), 1000);
  EXPECT_THROW(c.truncate(700), Error);
  check_truncate("q4r,recent=256", 1000, 900, 1100, 100);
  check_truncate("q8,recent=300", 1000, 850, 1000, 100);
  check_truncate("q8,recent=300", 500, 450, 800, 100);  // nothing cold yet
}

TEST(KvTruncate, WindowReusesOnlyWhatWasNotEvicted) {
  KvCache c(kShape, parse_kv_spec("f16,window=300,sinks=4"), 4096, 100);
  Data d = make_data(1200);
  feed(c, d.old_k, d.old_v, 0, 1200, 100);  // blocks 1 and 2 evicted, block 0 holds the sinks
  EXPECT_FALSE(c.present(300));
  EXPECT_FALSE(c.present(600));
  EXPECT_EQ(c.reusable_prefix(1100), 1100);  // a fresh cache at 1100 has evicted blocks 1 and 2 as well
  EXPECT_EQ(c.reusable_prefix(900), 256);    // block 1 would be gone, block 2 not: stop before the gap
  EXPECT_THROW(c.truncate(900), Error);
  check_truncate("f16,window=300,sinks=4", 1200, 1100, 1300, 100);
  check_truncate("q8,window=300,sinks=4", 1200, 200, 700, 100);
}

TEST(KvTruncate, BadArguments) {
  KvCache c(kShape, parse_kv_spec("f16"), 1024, 64);
  Data d = make_data(100);
  feed(c, d.old_k, d.old_v, 0, 100, 64);
  EXPECT_THROW(c.truncate(-1), Error);
  EXPECT_THROW(c.truncate(101), Error);
  EXPECT_EQ(c.reusable_prefix(-5), 0);
  // An append that was never committed is discarded too.
  const size_t row = size_t(kShape.n_kv_heads) * kShape.head_dim;
  c.append(0, 3, d.old_k.data(), d.old_v.data() + row);
  c.truncate(100);
  EXPECT_EQ(c.layer_len(0), 100);
  feed(c, d.old_k, d.old_v, 0, 10, 10);
  EXPECT_EQ(c.n_past(), 110);
}
