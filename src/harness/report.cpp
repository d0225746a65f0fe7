#include "harness/report.h"

#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "harness/svg_chart.h"

namespace kvtax::harness {
namespace {

using Getter = std::function<std::optional<double>(const Cell&)>;
using RangeGetter = std::function<std::optional<std::pair<double, double>>(const Cell&)>;

std::optional<double> ctx_of(const Cell& c) {
  const auto& m = c.metrics.at("context_tokens").median;
  return m ? m : std::optional<double>(double(c.target));
}

bool wide_range(const Aggregates& a) {
  double lo = INFINITY, hi = 0;
  for (const auto& c : a.cells)
    if (auto x = ctx_of(c); x && *x > 0) lo = std::min(lo, *x), hi = std::max(hi, *x);
  return std::isfinite(lo) && hi / lo >= 8;
}

ChartSeries series_for(const Aggregates& a, const std::string& arm, const Getter& y, const RangeGetter& range = {}) {
  ChartSeries s;
  s.name = arm;
  for (const auto& c : a.cells) {
    if (c.arm != arm) continue;
    const auto x = ctx_of(c);
    const auto v = y(c);
    if (!x || !v) continue;
    s.points.emplace_back(*x, *v);
    s.ranges.push_back(range ? range(c) : std::nullopt);
  }
  return s;
}

Getter metric(const std::string& m, double scale = 1) {
  return [m, scale](const Cell& c) -> std::optional<double> {
    const auto& v = c.metrics.at(m).median;
    return v ? std::optional<double>(*v * scale) : std::nullopt;
  };
}
RangeGetter metric_range(const std::string& m, double scale = 1) {
  return [m, scale](const Cell& c) -> std::optional<std::pair<double, double>> {
    const auto& s = c.metrics.at(m);
    if (!s.min || !s.max || s.n < 2) return std::nullopt;
    return std::make_pair(*s.min * scale, *s.max * scale);
  };
}

LineChart chart(const Aggregates& a, std::string title, std::string ylabel, const Getter& y, const RangeGetter& r = {},
                bool skip_first = false) {
  LineChart c;
  c.title = std::move(title);
  c.x_label = "context tokens (templated prompt)";
  c.y_label = std::move(ylabel);
  c.log_x = wide_range(a);
  for (size_t i = skip_first ? 1 : 0; i < a.arms.size(); ++i) {
    c.series.push_back(series_for(a, a.arms[i], y, r));
    c.series.back().color = int(i);  // an arm keeps its colour in every chart
  }
  return c;
}

std::string num(const std::optional<double>& v, const char* f) {
  if (v && std::string_view(f) == "{:.4g}" && std::fabs(*v) >= 1e4) return fmt::format("{:.0f}", *v);  // no 5e+04
  return v ? fmt::format(fmt::runtime(f), *v) : std::string("&ndash;");
}

std::string meta_rows(const nlohmann::json& j, const std::string& prefix = "") {
  std::string out;
  if (!j.is_object()) return out;
  for (const auto& [k, v] : j.items()) {
    if (k == "type") continue;
    if (v.is_object()) {
      out += meta_rows(v, prefix + k + ".");
      continue;
    }
    out += fmt::format("<tr><th>{}</th><td>{}</td></tr>", html_escape(prefix + k),
                       html_escape(v.is_string() ? v.get<std::string>() : v.dump()));
  }
  return out;
}

constexpr const char* kStyle = R"(
body{font-family:sans-serif;margin:20px;color:#222}
h1{font-size:22px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ccc}
.grid{display:flex;flex-wrap:wrap;gap:12px}
.grid figure{margin:0;border:1px solid #ddd;flex:0 0 auto}
figcaption{font-size:12px;color:#555;padding:4px 8px;max-width:620px}
table{border-collapse:collapse;font-size:12px;margin:8px 0}
td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}
th{background:#f2f2f2}td.l,th.l{text-align:left}
.hit{background:#cdebd3}.part{background:#fbeec0}.miss{background:#f6c9c4}
.fail{color:#a00}table.meta td{text-align:left}
)";

}  // namespace

std::string render_report_html(const ResultsFile& raw, const Aggregates& a) {
  const std::string ref = a.arms.empty() ? std::string("-") : a.arms[0];
  const auto& meta = a.meta;
  std::string title = "kvtax KV-cache sweep";
  if (meta.contains("runner")) title += " \xe2\x80\x94 " + meta["runner"].get<std::string>();
  std::string h = "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>" + html_escape(title) +
                  "</title><style>" + kStyle + "</style></head><body>";
  h += "<h1>" + html_escape(title) + "</h1>";
  h += fmt::format("<p>{} arms, {} arm&times;length cells, {} recorded runs. Reference arm (first): <b>{}</b>. "
                   "Medians over recorded passes that did not fail; whiskers show min&ndash;max.</p>",
                   a.arms.size(), a.cells.size(), raw.runs.size(), html_escape(ref));
  if (raw.truncated_tail) h += "<p class=\"fail\">The last line of raw.jsonl was cut off (a killed run) and was ignored.</p>";

  h += "<h2>Speed</h2><div class=\"grid\">";
  auto fig = [&](const std::string& svg, const std::string& caption) {
    h += "<figure>" + svg + "<figcaption>" + caption + "</figcaption></figure>";
  };
  fig(line_chart_svg(chart(a, "Decode speed vs context", "decode tok/s", metric("decode_tok_s"),
                           metric_range("decode_tok_s"))),
      "(generated tokens &minus; 1) / (total &minus; TTFT), tokens counted by the engine.");
  {
    LineChart c = chart(a, "Decode change vs " + ref, "% change in decode tok/s",
                        [](const Cell& c) { return c.decode_change_pct; }, {}, true);
    c.y_from_zero = false;
    c.zero_line = true;
    c.y_fmt = [](double v) { return v == 0 ? std::string("0%") : fmt::format("{:+g}%", v); };
    for (auto& s : c.series) {
      for (const auto& cell : a.cells)
        if (cell.arm == s.name && cell.decode_change_pct && ctx_of(cell))
          s.notes.push_back(cell.capacity_ratio ? fmt::format("cap x{:.2g}", *cell.capacity_ratio) : "");
    }
    fig(line_chart_svg(c), "Median decode tok/s of each arm relative to the reference at the same length, "
                           "annotated with the KV capacity ratio at the same reservation.");
  }
  fig(line_chart_svg(chart(a, "Time to first token vs context", "TTFT (s)", metric("ttft_s"), metric_range("ttft_s"))),
      "Request start to first generated token: covers the whole prefill.");
  {
    BarChart b;
    b.title = "Inter-token latency slope";
    b.y_label = "us per 1k context tokens";
    for (size_t i = 0; i < a.fits.size(); ++i)
      if (a.fits[i].itl)
        b.labels.push_back(a.fits[i].arm), b.values.push_back(a.fits[i].itl->slope * 1e9), b.colors.push_back(int(i));
    b.y_fmt = [](double v) { return fmt::format("{:.3g}", v); };
    fig(bar_chart_svg(b), "Least-squares slope of the median inter-token latency against context length: the "
                          "decode cost each extra token of context adds.");
  }
  h += "</div><h2>Memory</h2><div class=\"grid\">";
  fig(line_chart_svg(chart(a, "Peak memory vs context", "peak RSS (MiB)", metric("peak_rss", 1.0 / 1048576),
                           metric_range("peak_rss", 1.0 / 1048576))),
      "Peak resident memory of the run (reset at run start; includes the weights).");
  fig(line_chart_svg(chart(a, "KV cache bytes vs context", "KV cache (MiB)", metric("kv_bytes", 1.0 / 1048576))),
      "Bytes held by the KV cache at the end of the run.");
  h += "</div><h2>Quality</h2><div class=\"grid\">";
  {
    LineChart c = chart(a, "Recall of planted facts vs context", "facts recalled (%)", [](const Cell& c) -> std::optional<double> {
      if (!c.recall_found.median || c.recall_total == 0) return std::nullopt;
      return *c.recall_found.median * 100.0 / c.recall_total;
    });
    c.y_max = 100;
    c.y_fmt = [](double v) { return fmt::format("{:g}%", v); };
    fig(line_chart_svg(c), "Median share of codes found in the answer to the all-facts question (exact, "
                           "case-sensitive substring match).");
  }
  {
    LineChart c = chart(a, "Binding recall vs context", "single-fact questions right (%)",
                        [](const Cell& c) -> std::optional<double> {
                          if (c.binding_asked == 0) return std::nullopt;
                          return c.binding_correct * 100.0 / c.binding_asked;
                        });
    c.y_max = 100;
    c.y_fmt = [](double v) { return fmt::format("{:g}%", v); };
    fig(line_chart_svg(c), "One question per fact; right when the answer holds that fact's code and no other planted "
                           "code (listing every code does not count).");
  }
  {
    LineChart c = chart(a, "KL divergence vs " + ref, "mean KLD (nats / token)", [](const Cell& c) { return c.kld_mean.median; },
                        [](const Cell& c) -> std::optional<std::pair<double, double>> {
                          if (!c.kld_mean.min || c.kld_mean.n < 2) return std::nullopt;
                          return std::make_pair(*c.kld_mean.min, *c.kld_mean.max);
                        }, true);
    fig(line_chart_svg(c), "Next-token distributions teacher-forced on the reference arm's answer, averaged over "
                           "answer positions.");
  }
  h += "</div>";

  // Which facts were found: per arm x length, per fact the share of ok runs that found it.
  h += "<h2>Which facts were recalled</h2><table><tr><th class=\"l\">arm</th><th>target</th>";
  size_t nf = 0;
  for (const auto& c : a.cells) nf = std::max(nf, c.fact_found_runs.size());
  for (size_t i = 0; i < nf; ++i)
    h += "<th>" + html_escape(i < a.fact_names.size() ? a.fact_names[i] : fmt::format("fact {}", i + 1)) + "</th>";
  h += "<th>binding</th></tr>";
  for (const auto& c : a.cells) {
    h += fmt::format("<tr><td class=\"l\">{}</td><td>{}</td>", html_escape(c.arm), c.target);
    for (size_t i = 0; i < nf; ++i) {
      const int k = i < c.fact_found_runs.size() ? c.fact_found_runs[i] : 0;
      const char* cls = c.ok == 0 ? "" : k == c.ok ? "hit" : k == 0 ? "miss" : "part";
      std::string bind;
      if (i < c.binding_fact_asked.size() && c.binding_fact_asked[i])
        bind = fmt::format(" (bind {}/{})", c.binding_fact_correct[i], c.binding_fact_asked[i]);
      h += fmt::format("<td class=\"{}\">{}/{}{}</td>", cls, k, c.ok, bind);
    }
    h += c.binding_asked ? fmt::format("<td>{}/{}</td></tr>", c.binding_correct, c.binding_asked) : "<td>&ndash;</td></tr>";
  }
  h += "</table>";

  h += "<h2>Aggregates (medians)</h2><table><tr><th class=\"l\">arm</th><th>target</th><th>context</th><th>ok/expected</th>"
       "<th>oom</th><th>other</th><th>TTFT s</th><th>prefill tok/s</th><th>decode tok/s</th><th>vs ref</th>"
       "<th>ITL ms</th><th>peak MiB</th><th>KV MiB</th><th>scratch MiB</th><th>bytes/token</th><th>capacity</th>"
       "<th>cap ratio</th><th>recall</th><th>binding</th><th>KLD</th></tr>";
  for (const auto& c : a.cells) {
    const auto& m = c.metrics;
    auto mib = [&](const char* k) {
      const auto& v = m.at(k).median;
      return v ? fmt::format("{:.1f}", *v / 1048576.0) : std::string("&ndash;");
    };
    h += fmt::format(
        "<tr><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}/{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
        "<td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
        "<td>{}</td><td>{}</td></tr>",
        html_escape(c.arm), c.target, num(m.at("context_tokens").median, "{:.0f}"), c.ok, c.expected, c.oom, c.other,
        num(m.at("ttft_s").median, "{:.4g}"), num(m.at("prefill_tok_s").median, "{:.4g}"),
        num(m.at("decode_tok_s").median, "{:.4g}"), num(c.decode_change_pct, "{:+.1f}%"),
        num(m.at("itl_mean_s").median ? std::optional<double>(*m.at("itl_mean_s").median * 1e3) : std::nullopt, "{:.4g}"),
        mib("peak_rss"), mib("kv_bytes"), mib("scratch_peak"), num(m.at("bytes_per_token").median, "{:.4g}"),
        capacity_str(m.at("capacity_tokens").median), num(c.capacity_ratio, "{:.3g}"),
        c.recall_found.median ? fmt::format("{:g}/{}", *c.recall_found.median, c.recall_total) : "&ndash;",
        c.binding_asked ? fmt::format("{}/{}", c.binding_correct, c.binding_asked) : "&ndash;",
        num(c.kld_mean.median, "{:.4g}"));
  }
  h += "</table><table><tr><th class=\"l\">arm</th><th>ITL slope (us / 1k tokens)</th><th>intercept (ms)</th><th>lengths</th></tr>";
  for (const auto& f : a.fits)
    h += fmt::format("<tr><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>", html_escape(f.arm),
                     f.itl ? fmt::format("{:.4g}", f.itl->slope * 1e9) : "&ndash;",
                     f.itl ? fmt::format("{:.4g}", f.itl->intercept * 1e3) : "&ndash;", f.itl ? f.itl->n : 0);
  h += "</table>";
  if (!a.prefix.empty()) {
    h += "<h2>Prefix reuse (cold vs warm)</h2><table><tr><th class=\"l\">arm</th><th>prefix target</th><th>pairs</th>"
         "<th>verified hits</th><th>equal answers</th><th>reused tokens</th><th>cold TTFT s</th><th>warm TTFT s</th><th>saving s (paired)</th></tr>";
    for (const auto& p : a.prefix)
      h += fmt::format("<tr><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
                       "<td>{}</td><td>{}</td></tr>",
                       html_escape(p.arm), p.prefix_target, p.pairs, p.verified, p.same_output, num(p.reused_tokens.median, "{:.0f}"),
                       num(p.cold_ttft.median, "{:.4g}"), num(p.warm_ttft.median, "{:.4g}"),
                       num(p.saving_s.median, "{:.4g}"));
    h += "</table>";
  }
  std::string failures;
  for (const auto& r : raw.runs)
    if (!r.ok())
      failures += fmt::format("<tr><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}{}</td><td>{}</td><td class=\"l\">{}</td></tr>",
                              html_escape(r.arm), html_escape(r.kind), r.target, r.warmup ? "warm-up " : "", r.pass,
                              html_escape(r.failure), html_escape(r.failure_message));
  if (!failures.empty())
    h += "<h2>Failed runs</h2><table><tr><th class=\"l\">arm</th><th>kind</th><th>target</th><th>pass</th><th>class</th>"
         "<th class=\"l\">message</th></tr>" + failures + "</table>";
  h += "<h2>Run metadata</h2>";
  for (size_t i = 0; i < raw.metas.size(); ++i)
    h += fmt::format("<h3>Session {}</h3><table class=\"meta\">{}</table>", i + 1, meta_rows(raw.metas[i]));
  h += "</body></html>\n";
  return h;
}

std::string write_report(const std::string& dir, const std::string& out_html) {
  namespace fs = std::filesystem;
  const fs::path raw = fs::path(dir) / "raw.jsonl";
  if (!fs::exists(raw)) fail("{} holds no results ({} not found)", dir, raw.string());
  const ResultsFile f = read_results(raw.string());
  if (f.runs.empty()) fail("{} has no finished runs to report", raw.string());
  const Aggregates a = aggregate(f);
  const std::string out = out_html.empty() ? (fs::path(dir) / "report.html").string() : out_html;
  std::ofstream o(out, std::ios::trunc);
  if (!o) fail("cannot write {}", out);
  o << render_report_html(f, a);
  if (!o) fail("writing {} failed", out);
  return out;
}

}  // namespace kvtax::harness
