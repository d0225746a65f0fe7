#pragma once
// Small statistics the harness aggregates with: order statistics and a least-squares line.
#include <optional>
#include <vector>

namespace kvtax::harness {

// Median of the values (mean of the middle two for an even count); nullopt when empty.
std::optional<double> median(std::vector<double> v);
std::optional<double> min_of(const std::vector<double>& v);
std::optional<double> max_of(const std::vector<double>& v);

struct LineFit {
  double slope = 0;
  double intercept = 0;
  int n = 0;  // points used
};
// Ordinary least squares y = slope*x + intercept; nullopt with fewer than two distinct x values.
std::optional<LineFit> least_squares(const std::vector<double>& x, const std::vector<double>& y);

}  // namespace kvtax::harness
