#include "harness/stats.h"

#include <algorithm>

#include "core/error.h"

namespace kvtax::harness {

std::optional<double> median(std::vector<double> v) {
  if (v.empty()) return std::nullopt;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

std::optional<double> min_of(const std::vector<double>& v) {
  if (v.empty()) return std::nullopt;
  return *std::min_element(v.begin(), v.end());
}

std::optional<double> max_of(const std::vector<double>& v) {
  if (v.empty()) return std::nullopt;
  return *std::max_element(v.begin(), v.end());
}

std::optional<LineFit> least_squares(const std::vector<double>& x, const std::vector<double>& y) {
  if (x.size() != y.size()) fail("least_squares: {} x values but {} y values", x.size(), y.size());
  const size_t n = x.size();
  if (n < 2) return std::nullopt;
  // Centre first: context lengths are ~1e5 and slopes ~1e-9, so raw sums lose precision.
  double mx = 0, my = 0;
  for (size_t i = 0; i < n; ++i) mx += x[i], my += y[i];
  mx /= double(n), my /= double(n);
  double sxx = 0, sxy = 0;
  for (size_t i = 0; i < n; ++i) {
    sxx += (x[i] - mx) * (x[i] - mx);
    sxy += (x[i] - mx) * (y[i] - my);
  }
  if (sxx <= 0) return std::nullopt;
  LineFit f;
  f.slope = sxy / sxx;
  f.intercept = my - f.slope * mx;
  f.n = int(n);
  return f;
}

}  // namespace kvtax::harness
