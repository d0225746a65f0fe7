#pragma once
// Inline SVG charts for the HTML report, written directly (no JS, no external files): line charts with
// axes, ticks, labels, legend, optional min/max whiskers and point notes; and a simple bar chart.
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvtax::harness {

std::string html_escape(std::string_view s);
// About `target` round tick values (1, 2, 5 x 10^k steps) covering [lo, hi].
std::vector<double> nice_ticks(double lo, double hi, int target = 5);
// 2000 -> "2k", 131072 -> "131k", 1500000 -> "1.5M"
std::string short_count(double v);

struct ChartSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;                 // (x, y)
  std::vector<std::optional<std::pair<double, double>>> ranges;  // per point (min, max) whisker, optional
  std::vector<std::string> notes;                                // per point text next to the marker, optional
  int color = -1;                                                // palette index; -1: the series index
};

struct LineChart {
  std::string title, x_label, y_label;
  std::vector<ChartSeries> series;
  bool log_x = false;
  bool y_from_zero = true;
  std::optional<double> y_max;        // fixed top (e.g. 100 for percentages of facts)
  bool zero_line = false;             // draw y = 0 (for signed changes)
  std::function<std::string(double)> x_fmt = short_count;
  std::function<std::string(double)> y_fmt;
  int width = 640, height = 360;
};
std::string line_chart_svg(const LineChart& c);

struct BarChart {
  std::string title, y_label;
  std::vector<std::string> labels;
  std::vector<double> values;
  std::vector<int> colors;  // palette index per bar; empty: the bar index
  std::function<std::string(double)> y_fmt;
  int width = 640, height = 330;
};
std::string bar_chart_svg(const BarChart& c);

const char* series_color(size_t i);

}  // namespace kvtax::harness
