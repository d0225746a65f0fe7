#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "engine/sampler.h"
#include "engine/sampler_reference.h"

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

// Greedy skips NaN logits wherever they sit (a NaN first one once made the vector maximum NaN and greedy pick token 0),
// and so does a draw with cuts (NaNs are never candidates); a draw over the whole vocabulary has no finite total with a
// NaN in it and picks nothing, as the device's draw. Logits with nothing to pick give kNoPick, never an arbitrary
// token.
TEST(Sampler, NaNLogitsAreSkippedAndAllNaNPicksNothing) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<float> l(100, -1.0f);
  l[0] = nan, l[7] = nan, l[20] = nan, l[63] = 2.5f;
  EXPECT_EQ(argmax(l.data(), 100), 63);
  EXPECT_EQ(argmax(l.data(), 3), 1);  // the scalar path: first of the equal -1s after the NaN
  SamplerOptions cut;  // the defaults: top-k 40, top-p 0.95, min-p 0.05
  cut.temperature = 1.0f;
  SamplerOptions plain = cut;
  plain.top_k = 0, plain.top_p = 1.0f, plain.min_p = 0.0f;
  Sampler s(cut);
  for (int i = 0; i < 50; ++i) {
    const int32_t t = s.sample(l.data(), 100);
    ASSERT_GE(t, 0);
    EXPECT_FALSE(std::isnan(l[size_t(t)])) << "a NaN logit drawn: " << t;
  }
  EXPECT_EQ(Sampler(plain).sample(l.data(), 100), kNoPick);
  const std::vector<float> all_nan(100, nan), all_ninf(100, -inf);
  EXPECT_EQ(argmax(all_nan.data(), 100), kNoPick);
  EXPECT_EQ(Sampler(SamplerOptions{}).sample(all_nan.data(), 100), kNoPick);
  for (const SamplerOptions& o : {cut, plain}) {
    EXPECT_EQ(Sampler(o).sample(all_nan.data(), 100), kNoPick);
    EXPECT_EQ(Sampler(o).sample(all_ninf.data(), 100), kNoPick);
  }
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

namespace {

// A vocabulary (llama3's size by default) with distinct logits: a dozen strong tokens, as a model's are, over a long
// tail that holds ~0.2% of the probability.
std::vector<float> big_logits(uint32_t seed, size_t n = 128256) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 2.0f);
  std::vector<float> l(n);
  for (size_t i = 0; i < l.size(); ++i) l[i] = d(g) + 1e-6f * float(i % 1000);
  for (int i = 0; i < 12; ++i) l[size_t(g() % l.size())] += 20.0f - 0.5f * float(i);
  return l;
}

}  // namespace

// The cuts need only the top candidates in order: the same tokens as sorting the whole vocabulary, draw for draw.
TEST(Sampler, CutsOverABigVocabularyDrawWhatTheFullSortDraws) {
  const std::vector<float> l = big_logits(3);
  struct Cut { int top_k; float top_p, min_p, temperature; };
  const Cut cuts[] = {{40, 0.95f, 0.05f, 0.8f},  // llama.cpp's defaults
                      {0, 0.99999f, 0.0f, 1.0f}, // top-p deep into the tail: past the first 256 candidates
                      {0, 0.5f, 0.0f, 0.7f},     // top-p among the strong tokens
                      {0, 1.0f, 0.02f, 1.3f},    // min-p alone
                      {1000, 1.0f, 0.0f, 1.0f}}; // a wide top-k
  for (const Cut& c : cuts) {
    SamplerOptions o;
    o.top_k = c.top_k, o.top_p = c.top_p, o.min_p = c.min_p, o.temperature = c.temperature, o.seed = 11;
    if (c.top_p > 0.9999f && c.top_p < 1.0f) {  // this cut must lie past the first 256 candidates
      std::vector<double> q(l.size());
      const float mx = *std::max_element(l.begin(), l.end());
      for (size_t i = 0; i < l.size(); ++i) q[i] = std::exp(double(l[i] - mx));
      std::sort(q.begin(), q.end(), std::greater<>());
      double sum = 0, cum = 0;
      for (double x : q) sum += x;
      size_t kept = 0;
      while (kept < q.size() && (cum += q[kept] / sum) < c.top_p) ++kept;
      EXPECT_GT(kept + 1, 256u);
    }
    Sampler s(o);
    ReferenceSampler ref(o);
    int same = 0;
    for (int i = 0; i < 40; ++i) same += s.sample(l.data(), int(l.size())) == ref.sample(l.data(), int(l.size()));
    EXPECT_EQ(same, 40) << "top_k " << c.top_k << " top_p " << c.top_p << " min_p " << c.min_p;
  }
}

// Equal logits across the top-k boundary: the earlier ones are kept and come first, in the sampler as in the plain
// chain, so a seed draws the same tokens on every standard library.
TEST(Sampler, TopKTiesKeepTheEarlierTokens) {
  std::vector<float> l = big_logits(5);
  for (int j = 0; j < 60; ++j) l[size_t(j * 997 % l.size())] = 40.0f;  // 60 equal values above every other
  for (int top_k : {1, 7, 40, 59, 60, 61}) {
    SamplerOptions o;
    o.top_k = top_k, o.top_p = 1.0f, o.min_p = 0.0f, o.temperature = 1.0f, o.seed = 3;
    Sampler s(o);
    ReferenceSampler ref(o);
    std::vector<int32_t> seen;
    for (int i = 0; i < 200; ++i) {
      const int32_t t = s.sample(l.data(), int(l.size()));
      EXPECT_EQ(t, ref.sample(l.data(), int(l.size()))) << "top_k " << top_k;
      seen.push_back(t);
    }
    // Only the first min(top_k, 60) of the tied tokens in index order can be drawn.
    std::vector<int32_t> tied;
    for (int32_t i = 0; i < int32_t(l.size()); ++i)
      if (l[size_t(i)] == 40.0f) tied.push_back(i);
    const std::vector<int32_t> allowed(tied.begin(), tied.begin() + std::min<size_t>(size_t(top_k), tied.size()));
    for (int32_t t : seen) {
      if (top_k <= 60) {
        EXPECT_TRUE(std::binary_search(allowed.begin(), allowed.end(), t)) << "top_k " << top_k;
      }
    }
  }
}

// No cut: every token may be drawn, in index order; the frequencies follow the softmax at the temperature.
TEST(Sampler, NoCutDrawsFollowTheSoftmaxOfTheWholeVocabulary) {
  std::vector<float> l = big_logits(5, 10007);
  SamplerOptions o;
  o.top_k = 0, o.top_p = 1.0f, o.min_p = 0.0f, o.temperature = 0.9f, o.seed = 3;
  std::vector<double> p(l.size());
  double sum = 0;
  const float mx = *std::max_element(l.begin(), l.end());
  for (size_t i = 0; i < l.size(); ++i) sum += p[i] = std::exp(double(l[i] - mx) / o.temperature);
  Sampler s(o);
  const int n = 20000;
  std::vector<int> count(l.size());
  for (int i = 0; i < n; ++i) ++count[size_t(s.sample(l.data(), int(l.size())))];
  double tail = 0;
  int tail_count = 0;
  for (size_t i = 0; i < l.size(); ++i) {
    const double q = p[i] / sum;
    if (q > 0.01) {  // each strong token within 5 standard deviations
      EXPECT_NEAR(double(count[i]) / n, q, 5 * std::sqrt(q * (1 - q) / n)) << "token " << i;
    } else {
      tail += q, tail_count += count[i];
    }
  }
  EXPECT_NEAR(double(tail_count) / n, tail, 5 * std::sqrt(tail * (1 - tail) / n) + 1e-9);
}

TEST(Sampler, GreedyIsTheFirstLargestOverABigVocabulary) {
  std::vector<float> l = big_logits(9);
  const size_t top = size_t(std::max_element(l.begin(), l.end()) - l.begin());
  Sampler greedy(SamplerOptions{});
  EXPECT_EQ(greedy.sample(l.data(), int(l.size())), int32_t(top));
  l[top + 1 < l.size() ? top + 1 : 0] = l[top];  // a tie: the lower index wins
  EXPECT_EQ(greedy.sample(l.data(), int(l.size())), int32_t(std::min(top, top + 1 < l.size() ? top + 1 : size_t(0))));
  EXPECT_EQ(argmax(l.data(), int(l.size())), greedy.sample(l.data(), int(l.size())));
}
