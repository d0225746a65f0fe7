#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "harness/arm.h"
#include "harness/kld.h"
#include "harness/rng.h"
#include "harness/stats.h"

using namespace kvtax::harness;

TEST(HarnessStats, MedianMinMax) {
  EXPECT_FALSE(median({}).has_value());
  EXPECT_DOUBLE_EQ(*median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(*median({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(*median({7}), 7);
  EXPECT_DOUBLE_EQ(*min_of({3, -1, 2}), -1);
  EXPECT_DOUBLE_EQ(*max_of({3, -1, 2}), 3);
}

TEST(HarnessStats, LeastSquares) {
  // Exact line at realistic scales: ITL ~ 1e-3 s + 2.5e-8 s per context token.
  std::vector<double> x = {2073, 8025, 16089, 32025, 131072}, y;
  for (double v : x) y.push_back(1e-3 + 2.5e-8 * v);
  auto f = least_squares(x, y);
  ASSERT_TRUE(f);
  EXPECT_NEAR(f->slope, 2.5e-8, 1e-15);
  EXPECT_NEAR(f->intercept, 1e-3, 1e-12);
  EXPECT_EQ(f->n, 5);
  // Noisy points: matches the closed form.
  auto g = least_squares({0, 1, 2, 3}, {1, 3, 2, 5});
  EXPECT_NEAR(g->slope, 1.1, 1e-12);
  EXPECT_NEAR(g->intercept, 1.1, 1e-12);
  EXPECT_FALSE(least_squares({1}, {2}));
  EXPECT_FALSE(least_squares({2, 2}, {1, 3}));
  EXPECT_THROW(least_squares({1, 2}, {1}), kvtax::Error);
}

TEST(HarnessStats, KldFullAndTopK) {
  PositionLogprobs p, q;
  const std::vector<double> pp = {0.5, 0.25, 0.125, 0.125}, qq = {0.25, 0.25, 0.25, 0.25};
  double expect = 0;
  for (size_t i = 0; i < 4; ++i) {
    p.logprobs.push_back(float(std::log(pp[i])));
    q.logprobs.push_back(float(std::log(qq[i])));
    expect += pp[i] * std::log(pp[i] / qq[i]);
  }
  EXPECT_NEAR(kl_divergence(p, q), expect, 1e-6);
  EXPECT_NEAR(kl_divergence(p, p), 0, 1e-7);
  // Unnormalised logits are renormalised.
  PositionLogprobs p2 = p;
  for (auto& v : p2.logprobs) v += 3.0f;
  EXPECT_NEAR(kl_divergence(p2, q), expect, 1e-6);
  // Top-k covering the whole vocabulary is exact.
  PositionLogprobs ps, qs;
  for (int i : {2, 0, 3, 1}) {
    ps.ids.push_back(i), ps.logprobs.push_back(p.logprobs[size_t(i)]);
    qs.ids.push_back(i), qs.logprobs.push_back(q.logprobs[size_t(i)]);
  }
  EXPECT_NEAR(kl_divergence(ps, qs), expect, 1e-6);
  EXPECT_NEAR(kl_divergence(ps, q), expect, 1e-6);  // sparse P vs full Q
  // Top-2: an approximation, but non-negative and finite.
  PositionLogprobs p_top{{0, 1}, {p.logprobs[0], p.logprobs[1]}}, q_top{{1, 2}, {q.logprobs[1], q.logprobs[2]}};
  const double approx = kl_divergence(p_top, q_top);
  EXPECT_TRUE(std::isfinite(approx));
  EXPECT_GE(approx, 0);

  auto s = kld_over_answer({p, p}, {q, p});
  EXPECT_NEAR(s.mean, expect / 2, 1e-6);
  EXPECT_NEAR(s.max, expect, 1e-6);
  EXPECT_EQ(s.positions, 2);
  EXPECT_THROW(kld_over_answer({p}, {p, p}), kvtax::Error);
  EXPECT_THROW(kl_divergence(p, PositionLogprobs{{}, {0.f, 0.f}}), kvtax::Error);
  EXPECT_THROW(kl_divergence(PositionLogprobs{}, q), kvtax::Error);
}

TEST(HarnessStats, ArmParsing) {
  Arm a = parse_arm("f16");
  EXPECT_EQ(a.codec, "f16");
  EXPECT_FALSE(a.window);
  a = parse_arm(" f16, window=4096 ,sinks=4");
  EXPECT_EQ(a.spec, "f16,window=4096,sinks=4");
  EXPECT_EQ(*a.window, 4096);
  EXPECT_EQ(*a.sinks, 4);
  a = parse_arm("q4r,recent=1024,group=32");
  EXPECT_EQ(*a.recent, 1024);
  ASSERT_EQ(a.extra.size(), 1u);
  EXPECT_EQ(a.extra[0].first, "group");
  for (const char* bad : {"", "F16", "f16,", "f16,,window=3", "f16,window", "f16,window=", "f16,window=-3",
                          "f16,window=1e3", "f16,sinks=4", "f16,window=0", "f16,window=8,window=9",
                          "f16,window=8,recent=4", "f16,x=a b", "q 8"})
    EXPECT_THROW(parse_arm(bad), kvtax::Error) << bad;
  EXPECT_THROW(parse_arms({"f16", " f16"}), kvtax::Error);
  EXPECT_EQ(parse_arms({"f16", "q8"}).size(), 2u);
}

TEST(HarnessStats, SeededShuffleIsAPermutationAndDeterministic) {
  std::vector<int> a = {1, 2, 3, 4, 5, 6}, b = a, c = a;
  seeded_shuffle(a, 5);
  seeded_shuffle(b, 5);
  seeded_shuffle(c, 6);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  std::sort(c.begin(), c.end());
  EXPECT_EQ(c, (std::vector<int>{1, 2, 3, 4, 5, 6}));
}
