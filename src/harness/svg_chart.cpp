#include "harness/svg_chart.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace kvtax::harness {
namespace {

constexpr int kLeft = 70, kRight = 190, kTop = 44, kBottom = 56;  // the right margin holds the legend

std::string default_fmt(double v) {
  if (v == 0) return "0";
  const double a = std::fabs(v);
  if (a >= 1e4) return short_count(v);
  if (a >= 100) return fmt::format("{:.0f}", v);
  if (a >= 1) return fmt::format("{:.3g}", v);
  return fmt::format("{:.2g}", v);
}

struct Scale {
  double lo, hi, a, b;  // pixel = a + (v - lo) / (hi - lo) * (b - a), in log space when log
  bool log;
  double operator()(double v) const {
    const double t = log ? (std::log(v) - std::log(lo)) / (std::log(hi) - std::log(lo)) : (v - lo) / (hi - lo);
    return a + t * (b - a);
  }
};

std::string text(double x, double y, std::string_view s, const char* anchor, int size = 12, const char* extra = "") {
  return fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"{}\" text-anchor=\"{}\" {}>{}</text>", x, y, size,
                     anchor, extra, html_escape(s));
}

}  // namespace

std::string html_escape(std::string_view s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&#39;"; break;
      default: o += c;
    }
  }
  return o;
}

std::string short_count(double v) {
  const double a = std::fabs(v);
  if (a >= 1e6) return fmt::format("{:g}M", std::round(v / 1e5) / 10);
  if (a >= 1e3) return fmt::format("{:g}k", std::round(v / 1e2) / 10);
  return fmt::format("{:g}", v);
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!(hi > lo)) hi = lo + 1;
  const double raw = (hi - lo) / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  // Cover [lo, hi]: the first tick at or below lo, the last at or above hi.
  const double first = std::floor(lo / step + 1e-9), last = std::ceil(hi / step - 1e-9);
  std::vector<double> t;
  for (double k = first; k <= last && t.size() < 50; k += 1) t.push_back(std::fabs(k) < 0.5 ? 0.0 : k * step);
  return t;
}

const char* series_color(size_t i) {
  static const char* c[] = {"#0b5fa5", "#d55e00", "#009e73", "#cc79a7", "#8a6d00", "#56b4e9", "#6a3d9a", "#444444"};
  return c[i % 8];
}

std::string line_chart_svg(const LineChart& c) {
  const auto yf = c.y_fmt ? c.y_fmt : std::function<std::string(double)>(default_fmt);
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (const auto& s : c.series)
    for (size_t i = 0; i < s.points.size(); ++i) {
      const auto [x, y] = s.points[i];
      if (!std::isfinite(x) || !std::isfinite(y) || (c.log_x && x <= 0)) continue;
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
      if (i < s.ranges.size() && s.ranges[i]) y0 = std::min(y0, s.ranges[i]->first), y1 = std::max(y1, s.ranges[i]->second);
    }
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\" role=\"img\"><rect width=\"100%\" height=\"100%\" fill=\"white\"/>",
      c.width, c.height);
  svg += text(c.width / 2.0, 24, c.title, "middle", 15, "font-weight=\"bold\"");
  const double pl = kLeft, pr = c.width - kRight, pt = kTop, pb = c.height - kBottom;
  if (!std::isfinite(x0)) {
    svg += text((pl + pr) / 2, (pt + pb) / 2, "no data", "middle", 14, "fill=\"#888\"");
    return svg + "</svg>";
  }
  if (c.y_from_zero) y0 = std::min(y0, 0.0), y1 = std::max(y1, 0.0);
  if (c.zero_line) y0 = std::min(y0, 0.0), y1 = std::max(y1, 0.0);
  if (c.y_max) y1 = std::max(y1, *c.y_max);
  if (y1 == y0) y1 = y0 + (y0 == 0 ? 1 : std::fabs(y0) * 0.1);
  const std::vector<double> yt = nice_ticks(y0, y1, 5);
  y0 = std::min(y0, yt.front()), y1 = std::max(y1, yt.back());
  std::vector<double> xt;
  if (x1 == x0) x0 = c.log_x ? x0 / 2 : x0 - 1, x1 = c.log_x ? x1 * 2 : x1 + 1;
  if (c.log_x) {
    // 1-2-5 steps per decade: round labels (1k, 2k, 5k, 10k...) for context lengths.
    for (double d = std::pow(10.0, std::floor(std::log10(x0))); d <= x1 * 1.0001; d *= 10)
      for (double m : {1.0, 2.0, 5.0})
        if (m * d >= x0 * 0.9999 && m * d <= x1 * 1.0001) xt.push_back(m * d);
    if (xt.size() < 2) xt = {x0, x1};
  } else {
    xt = nice_ticks(x0, x1, 6);
    x0 = std::min(x0, xt.front()), x1 = std::max(x1, xt.back());
  }
  // A little air at both ends so end points and their notes are not cut by the frame.
  const double xpad = c.log_x ? 1.08 : (x1 - x0) * 0.04;
  const Scale sx{c.log_x ? x0 / xpad : x0 - xpad, c.log_x ? x1 * xpad : x1 + xpad, pl, pr, c.log_x};
  const Scale sy{y0, y1, pb, pt, false};
  svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#999\"/>", pl, pt,
                     pr - pl, pb - pt);
  for (double v : yt) {
    const double y = sy(v);
    svg += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#e4e4e4\"/>", pl, pr, y, y);
    svg += text(pl - 6, y + 4, yf(v), "end", 11);
  }
  for (double v : xt) {
    const double x = sx(v);
    svg += fmt::format("<line x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{}\" y2=\"{}\" stroke=\"#e4e4e4\"/>", x, x, pt, pb);
    svg += text(x, pb + 16, c.x_fmt ? c.x_fmt(v) : default_fmt(v), "middle", 11);
  }
  if (c.zero_line && y0 < 0 && y1 > 0)
    svg += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#555\"/>", pl, pr, sy(0), sy(0));
  svg += text((pl + pr) / 2, c.height - 14, c.x_label + (c.log_x ? " (log scale)" : ""), "middle", 12);
  svg += fmt::format("<text transform=\"translate(18,{:.1f}) rotate(-90)\" font-size=\"12\" text-anchor=\"middle\">{}</text>",
                     (pt + pb) / 2, html_escape(c.y_label));
  for (size_t si = 0; si < c.series.size(); ++si) {
    const auto& s = c.series[si];
    const char* col = series_color(s.color >= 0 ? size_t(s.color) : si);
    std::string path;
    for (size_t i = 0; i < s.points.size(); ++i) {
      const auto [x, y] = s.points[i];
      if (!std::isfinite(x) || !std::isfinite(y) || (c.log_x && x <= 0)) continue;
      path += fmt::format("{}{:.1f},{:.1f} ", path.empty() ? "M" : "L", sx(x), sy(y));
    }
    if (!path.empty())
      svg += fmt::format("<path d=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>", path, col);
    for (size_t i = 0; i < s.points.size(); ++i) {
      const auto [x, y] = s.points[i];
      if (!std::isfinite(x) || !std::isfinite(y) || (c.log_x && x <= 0)) continue;
      if (i < s.ranges.size() && s.ranges[i])
        svg += fmt::format("<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1:.1f}\" y2=\"{2:.1f}\" stroke=\"{3}\"/>", sx(x),
                           sy(s.ranges[i]->first), sy(s.ranges[i]->second), col);
      svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3.5\" fill=\"{}\"/>", sx(x), sy(y), col);
      // Notes alternate above and below the line by series, so two close series stay readable.
      if (i < s.notes.size() && !s.notes[i].empty())
        svg += text(sx(x), sy(y) + (si % 2 ? 17 : -9), s.notes[i], "middle", 10,
                    fmt::format("fill=\"{}\"", col).c_str());
    }
    // Legend entry.
    const double ly = pt + 8 + 20.0 * double(si);
    svg += fmt::format("<line x1=\"{0}\" x2=\"{1}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\" stroke=\"{3}\" stroke-width=\"3\"/>",
                       pr + 12, pr + 32, ly, col);
    std::string name = s.name.size() > 30 ? s.name.substr(0, 29) + "~" : s.name;
    svg += text(pr + 38, ly + 4, name, "start", name.size() > 22 ? 9 : 11);
  }
  return svg + "</svg>";
}

std::string bar_chart_svg(const BarChart& c) {
  const auto yf = c.y_fmt ? c.y_fmt : std::function<std::string(double)>(default_fmt);
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\" role=\"img\"><rect width=\"100%\" height=\"100%\" fill=\"white\"/>",
      c.width, c.height);
  svg += text(c.width / 2.0, 24, c.title, "middle", 15, "font-weight=\"bold\"");
  const double pl = kLeft, pr = c.width - 30, pt = kTop, pb = c.height - kBottom;
  if (c.values.empty()) return svg + text((pl + pr) / 2, (pt + pb) / 2, "no data", "middle", 14) + "</svg>";
  double y0 = 0, y1 = 0;
  for (double v : c.values) y0 = std::min(y0, v), y1 = std::max(y1, v);
  if (y1 == y0) y1 = 1;
  const auto yt = nice_ticks(y0, y1, 5);
  y0 = std::min(y0, yt.front()), y1 = std::max(y1, yt.back());
  const Scale sy{y0, y1, pb, pt, false};
  svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#999\"/>", pl, pt,
                     pr - pl, pb - pt);
  for (double v : yt) {
    svg += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#e4e4e4\"/>", pl, pr, sy(v), sy(v));
    svg += text(pl - 6, sy(v) + 4, yf(v), "end", 11);
  }
  svg += fmt::format("<text transform=\"translate(18,{:.1f}) rotate(-90)\" font-size=\"12\" text-anchor=\"middle\">{}</text>",
                     (pt + pb) / 2, html_escape(c.y_label));
  const double slot = (pr - pl) / double(c.values.size());
  for (size_t i = 0; i < c.values.size(); ++i) {
    const double x = pl + slot * (double(i) + 0.2), w = slot * 0.6;
    const double ya = sy(std::max(0.0, c.values[i])), yb = sy(std::min(0.0, c.values[i]));
    svg += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\"/>", x, ya, w,
                       std::max(1.0, yb - ya), series_color(i < c.colors.size() ? size_t(c.colors[i]) : i));
    svg += text(x + w / 2, ya - 5, yf(c.values[i]), "middle", 11);
    svg += text(x + w / 2, pb + 16, i < c.labels.size() ? c.labels[i] : "", "middle", 11);
  }
  return svg + "</svg>";
}

}  // namespace kvtax::harness
