// cuda::argmax against the CPU sampler's argmax (the first of equal maxima), over vocabulary-sized rows with planted
// ties, -inf and NaN, many calls on one scratch (each call leaves its block counter at zero for the next).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "cuda/argmax.h"
#include "cuda_test_util.h"
#include "engine/sampler.h"

namespace kvtax {
namespace {

// The first index of the largest non-NaN value (0 if none): the CPU argmax where there is no NaN.
int32_t first_largest(const std::vector<float>& x) {
  int32_t best = -1;
  for (size_t i = 0; i < x.size(); ++i)
    if (!std::isnan(x[i]) && (best < 0 || x[i] > x[size_t(best)])) best = int32_t(i);
  return best < 0 ? 0 : best;
}

TEST(CudaArgmax, FirstLargestAsTheSampler) {
  REQUIRE_GPU();
  std::mt19937 g(7);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  cuda::Buffer scratch(cuda::argmax_scratch_bytes()), out(4);
  scratch.fill(0);
  const int max_n = 151936;
  cuda::Buffer x(size_t(max_n) * 4);
  int checked = 0;
  for (int n : {1, 2, 31, 1000, 16385, 128256, max_n})
    for (int kind = 0; kind < 6; ++kind) {
      std::vector<float> v(static_cast<size_t>(n));
      for (float& f : v) f = nd(g);
      const size_t a = g() % size_t(n), b = g() % size_t(n);
      if (kind == 1) v[a] = v[b] = 50.0f;                           // a tie at the top: the earlier wins
      if (kind == 2) std::fill(v.begin(), v.end(), 1.5f);            // all equal: index 0
      if (kind == 3) std::fill(v.begin(), v.end(), -INFINITY);       // all -inf: index 0
      if (kind == 4) v[a] = NAN, v[b] = 40.0f;                       // a NaN is skipped
      if (kind == 5) v[a] = -INFINITY;
      x.upload(v.data(), v.size() * 4);
      out.fill(0xff);  // -1: an unwritten index fails
      ASSERT_EQ(cuda::argmax(x.as<float>(), n, scratch.get(), out.as<int32_t>(), nullptr), cudaSuccess);
      cuda::check(cudaDeviceSynchronize(), "argmax test");
      int32_t got = -1;
      out.download(&got, 4);
      const int32_t want = first_largest(v);
      EXPECT_EQ(got, want) << "n " << n << " kind " << kind;
      if (kind != 4) {  // the sampler's own pick
        EXPECT_EQ(want, argmax(v.data(), n)) << "n " << n << " kind " << kind;
      }
      ++checked;
    }
  EXPECT_EQ(checked, 42);
}

}  // namespace
}  // namespace kvtax
