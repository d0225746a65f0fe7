// The device picks (cuda/pick.h) against the CPU: argmax against the sampler's (the first of equal maxima), over
// vocabulary-sized rows with planted ties, -inf and NaN; draws against the float64 walk for many u; many calls on one
// scratch (each call leaves its block counter at zero for the next).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "cuda/pick.h"
#include "cuda_test_util.h"
#include "engine/sampler.h"
#include "pick_reference.h"

namespace kvtax {
namespace {

// The first index of the largest non-NaN value (kNoPick if none).
int32_t first_largest(const std::vector<float>& x) {
  int32_t best = kNoPick;
  for (size_t i = 0; i < x.size(); ++i)
    if (!std::isnan(x[i]) && (best < 0 || x[i] > x[size_t(best)])) best = int32_t(i);
  return best;
}

TEST(CudaArgmax, FirstLargestAsTheSampler) {
  REQUIRE_GPU();
  std::mt19937 g(7);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  cuda::Buffer scratch(cuda::pick_scratch_bytes()), out(4);
  scratch.fill(0);
  const int max_n = 151936;
  cuda::Buffer x(size_t(max_n) * 4);
  int checked = 0;
  for (int n : {1, 2, 31, 1000, 16385, 128256, max_n})
    for (int kind = 0; kind < 8; ++kind) {
      std::vector<float> v(static_cast<size_t>(n));
      for (float& f : v) f = nd(g);
      const size_t a = g() % size_t(n), b = g() % size_t(n);
      if (kind == 1) v[a] = v[b] = 50.0f;                           // a tie at the top: the earlier wins
      if (kind == 2) std::fill(v.begin(), v.end(), 1.5f);            // all equal: index 0
      if (kind == 3) std::fill(v.begin(), v.end(), -INFINITY);       // all -inf: index 0
      if (kind == 4) v[a] = NAN, v[b] = 40.0f;                       // a NaN is skipped
      if (kind == 5) v[a] = -INFINITY;
      if (kind == 6) std::fill(v.begin(), v.end(), NAN);             // all NaN: no pick
      if (kind == 7) v[0] = NAN, v[b == 0 ? n - 1 : b] = 40.0f;      // a NaN first, where the sampler's max starts
      x.upload(v.data(), v.size() * 4);
      out.fill(0x7f);  // an unwritten index is out of range
      ASSERT_EQ(cuda::argmax(x.as<float>(), n, scratch.get(), out.as<int32_t>(), nullptr), cudaSuccess);
      cuda::check(cudaDeviceSynchronize(), "argmax test");
      int32_t got = -1;
      out.download(&got, 4);
      const int32_t want = first_largest(v);
      EXPECT_EQ(got, want) << "n " << n << " kind " << kind;
      EXPECT_EQ(want, argmax(v.data(), n)) << "n " << n << " kind " << kind;  // the sampler's own pick
      ++checked;
    }
  EXPECT_EQ(checked, 56);
}

TEST(CudaPick, DrawWalksTheSoftmaxInIndexOrder) {
  REQUIRE_GPU();
  std::mt19937 g(11);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  cuda::Buffer scratch(cuda::pick_scratch_bytes()), out(4), x(size_t(151936) * 4);
  scratch.fill(0);
  int checked = 0, middle = 0, middle_ties = 0;
  for (int n : {1, 3, 50, 1000, 128256, 151936})
    for (float inv_t : {1.0f, 1.25f, 0.5f})
      for (int kind = 0; kind < 4; ++kind) {
        std::vector<float> v(static_cast<size_t>(n));
        for (float& f : v) f = nd(g);
        if (kind == 1) v[g() % size_t(n)] += 12.0f;  // one dominant token
        if (kind == 2)                               // tokens of no weight between the others
          for (size_t i = 0; i < v.size(); i += 3) v[i] = -INFINITY;
        if (kind == 3) v[g() % size_t(n)] += 120.0f;  // the others' float weights underflow against it
        x.upload(v.data(), v.size() * 4);
        for (double u : {0.0, 1e-9, 0.25, 0.5, 0.7316, 0.999999, double(g() % 100000) / 100000.0}) {
          out.fill(0x7f);  // an unwritten index is out of range
          ASSERT_EQ(cuda::draw(x.as<float>(), n, inv_t, u, scratch.get(), out.as<int32_t>(), nullptr), cudaSuccess);
          cuda::check(cudaDeviceSynchronize(), "draw test");
          int32_t got = -1;
          out.download(&got, 4);
          ++checked;
          if (std::none_of(v.begin(), v.end(), [](float f) { return std::isfinite(f); })) {
            EXPECT_EQ(got, kNoPick) << "n " << n << " kind " << kind;  // n 1, kind 2: one token, of no weight
            continue;
          }
          const testing::DrawReference want = testing::draw_reference(v.data(), n, inv_t, u);
          ASSERT_GE(got, 0);
          ASSERT_LT(got, n);
          EXPECT_TRUE(std::isfinite(v[size_t(got)])) << "a token of no weight: n " << n << " u " << u;
          // u of 0, 1e-9 and 0.999999 sit within 1e-6 of a running sum's end by design; the others must rarely tie.
          const bool at_an_end = u < 1e-6 || u > 1.0 - 1e-5;
          middle += !at_an_end;
          if (want.margin < 1e-6) {  // a running sum within rounding of the target: a neighbour is as right
            middle_ties += !at_an_end;
            EXPECT_LE(std::abs(got - want.index), 3) << "n " << n << " inv_t " << inv_t << " kind " << kind << " u " << u;
          } else {
            EXPECT_EQ(got, want.index) << "n " << n << " inv_t " << inv_t << " kind " << kind << " u " << u;
          }
        }
      }
  EXPECT_EQ(checked, 6 * 3 * 4 * 7);
  EXPECT_LT(middle_ties, middle / 20);
}

// Logits that offer no token (every one NaN; for a draw also every one -inf) give kNoPick, as the CPU sampler does.
TEST(CudaPick, NoPickFromLogitsWithoutATokenToPick) {
  REQUIRE_GPU();
  const int n = 128256;
  cuda::Buffer scratch(cuda::pick_scratch_bytes()), out(4), x(size_t(n) * 4);
  scratch.fill(0);
  auto run = [&](float value, bool greedy) {
    const std::vector<float> v(size_t(n), value);
    x.upload(v.data(), v.size() * 4);
    out.fill(0x7f);  // an unwritten index is out of range
    EXPECT_EQ(greedy ? cuda::argmax(x.as<float>(), n, scratch.get(), out.as<int32_t>(), nullptr)
                     : cuda::draw(x.as<float>(), n, 1.0f, 0.5, scratch.get(), out.as<int32_t>(), nullptr),
              cudaSuccess);
    cuda::check(cudaDeviceSynchronize(), "no-pick test");
    int32_t got = 0;
    out.download(&got, 4);
    return got;
  };
  EXPECT_EQ(run(NAN, true), kNoPick);
  EXPECT_EQ(run(NAN, false), kNoPick);
  EXPECT_EQ(run(-INFINITY, false), kNoPick);
  EXPECT_EQ(run(-INFINITY, true), 0);  // every value equal: the first, as the sampler's argmax
  EXPECT_GE(run(1.0f, false), 0);  // the scratch is left fit for the next call after a no-pick
}

}  // namespace
}  // namespace kvtax
