#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "engine/sampler.h"

using namespace kvtax;

TEST(Sampler, GreedyAndTopK1PickTheArgmax) {
  const std::vector<float> l = {0.1f, 2.0f, 1.9f, -3.0f};
  Sampler greedy(SamplerOptions{});
  EXPECT_EQ(greedy.sample(l.data(), 4), 1);
  SamplerOptions o;
  o.temperature = 1.0f;
  o.top_k = 1;
  Sampler s(o);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(s.sample(l.data(), 4), 1);
}

TEST(Sampler, TemperatureDrawsFollowSoftmax) {
  const std::vector<float> l = {0.0f, std::log(3.0f)};  // p = 1/4, 3/4
  SamplerOptions o;
  o.temperature = 1.0f;
  o.top_k = 0;
  o.top_p = 1.0f;
  o.min_p = 0.0f;
  o.seed = 42;
  Sampler s(o);
  int ones = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) ones += s.sample(l.data(), 2) == 1;
  EXPECT_NEAR(double(ones) / n, 0.75, 0.015);
}

TEST(Sampler, RepetitionPenaltyMovesGreedyOffARepeatedToken) {
  const std::vector<float> l = {1.0f, 1.5f};
  SamplerOptions o;
  o.repeat_penalty = 2.0f;
  Sampler s(o);
  s.accept(1);
  EXPECT_EQ(s.sample(l.data(), 2), 0);  // 1.5 / 2 < 1.0
}

TEST(Sampler, SameSeedSameSequence) {
  std::vector<float> l(50);
  for (int i = 0; i < 50; ++i) l[i] = float(i % 7) * 0.3f;
  SamplerOptions o;
  o.temperature = 0.8f;
  o.seed = 7;
  Sampler a(o), b(o);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.sample(l.data(), 50), b.sample(l.data(), 50));
}
