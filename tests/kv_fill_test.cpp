// fill_kv_by_tiling: a deep cache from a short prefill, as the decode benchmark builds it.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "core/error.h"
#include "engine/kv_fill.h"
#include "model/model.h"
#include "tiny_model_util.h"

using namespace kvtax;

namespace {

class KvFill : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = kvtax::testing::make_tiny_model("kvfill", GgmlType::F16, 5, &path_);
  }
  static void TearDownTestSuite() {
    delete model_;
    std::filesystem::remove(path_);
  }
  static std::vector<int32_t> tokens(int n) {
    std::mt19937 rng(9);
    std::vector<int32_t> t(n);
    for (auto& x : t) x = int32_t(rng() % model_->config().n_vocab);
    return t;
  }
  static inline std::string path_;
  static inline Model* model_ = nullptr;
};

// Largest |a-b| over one token's K and V of every head, relative to the rows' RMS.
double tile_error(const KvCache& c, int layer, int pos, int src) {
  const int d = c.shape().head_dim;
  std::vector<float> k0(d), v0(d), k1(d), v1(d);
  double err = 0, ss = 0;
  for (int h = 0; h < c.shape().n_kv_heads; ++h) {
    c.read_token(layer, pos, h, k1.data(), v1.data());
    c.read_token(layer, src, h, k0.data(), v0.data());
    for (int i = 0; i < d; ++i) {
      err = std::max({err, double(std::fabs(k1[i] - k0[i])), double(std::fabs(v1[i] - v0[i]))});
      ss += double(k0[i]) * k0[i] + double(v0[i]) * v0[i];
    }
  }
  return err / std::sqrt(ss / (2.0 * d * c.shape().n_kv_heads));
}

}  // namespace

TEST_F(KvFill, TilesThePrefixRowsToTheDepth) {
  ThreadPool pool(2);
  // f16 re-encodes its own values exactly; the others lose a little on the second encode, far less
  // than a wrong source position would differ (about 1.4 RMS).
  for (const auto& [spec, tol] : std::vector<std::pair<std::string, double>>{{"f16", 0.0}, {"q8", 0.02}, {"q4r", 0.35}}) {
    SCOPED_TRACE(spec);
    Forward fw(*model_, parse_kv_spec(spec), 1024, 24, pool);  // prefix of 40 runs as two chunks
    const auto prefix = tokens(40);
    fill_kv_by_tiling(fw, prefix, 700);  // not a multiple of the prefix, the chunk or the block
    ASSERT_EQ(fw.n_past(), 700);
    for (int l = 0; l < 2; ++l)
      for (int pos : {40, 41, 63, 64, 255, 256, 399, 699}) EXPECT_LE(tile_error(fw.cache(), l, pos, pos % 40), tol) << pos;
    // The next position decodes through the normal path.
    std::vector<float> logits(model_->config().n_vocab);
    const int32_t t = 7;
    fw.eval(&t, 1, logits.data());
    EXPECT_EQ(fw.n_past(), 701);
    for (float x : logits) ASSERT_TRUE(std::isfinite(x));
  }
}

TEST_F(KvFill, MatchesAPlainPrefillUpToThePrefixLength) {
  ThreadPool pool(2);
  const auto prefix = tokens(30);
  Forward a(*model_, parse_kv_spec("f16"), 64, 64, pool), b(*model_, parse_kv_spec("f16"), 64, 64, pool);
  fill_kv_by_tiling(a, prefix, 20);  // shallower than the prefix: only its first 20 tokens run
  std::vector<float> logits(model_->config().n_vocab);
  b.eval(prefix.data(), 20, logits.data());
  ASSERT_EQ(a.n_past(), 20);
  for (int pos : {0, 19}) EXPECT_EQ(tile_error(a.cache(), 1, pos, pos), 0.0);
  std::vector<float> ka(model_->config().head_dim), va(ka.size()), kb(ka.size()), vb(ka.size());
  a.cache().read_token(1, 19, 0, ka.data(), va.data());
  b.cache().read_token(1, 19, 0, kb.data(), vb.data());
  EXPECT_EQ(ka, kb);
  EXPECT_EQ(va, vb);
}

TEST_F(KvFill, RejectsBadRequests) {
  ThreadPool pool(1);
  Forward fw(*model_, parse_kv_spec("f16"), 128, 16, pool);
  EXPECT_THROW(fill_kv_by_tiling(fw, {}, 10), Error);
  EXPECT_THROW(fill_kv_by_tiling(fw, tokens(8), 129), Error);
  EXPECT_THROW(fill_kv_by_tiling(fw, tokens(8), -1), Error);
  fill_kv_by_tiling(fw, tokens(8), 10);
  EXPECT_THROW(fill_kv_by_tiling(fw, tokens(8), 20), Error);  // not empty any more
}
