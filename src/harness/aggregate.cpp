#include "harness/aggregate.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include "core/error.h"

namespace kvtax::harness {
namespace {

std::optional<double> metric_of(const RunRecord& r, const std::string& m) {
  if (m == "context_tokens") return double(r.context_tokens);
  if (m == "ttft_s") return r.ttft_s;
  if (m == "prefill_tok_s") return r.prefill_tok_s;
  if (m == "decode_tok_s") return r.decode_tok_s;
  if (m == "itl_mean_s") return r.itl_mean_s;
  if (m == "generated_tokens") return double(r.generated_tokens);
  if (m == "peak_rss") return double(r.peak_rss);
  if (m == "kv_bytes") return double(r.kv_bytes);
  if (m == "scratch_peak") return double(r.scratch_peak);
  if (m == "bytes_per_token") return r.bytes_per_token;
  if (m == "capacity_tokens") return double(r.capacity_tokens);
  if (m == "total_s") return r.total_s;
  return std::nullopt;
}

nlohmann::json opt(const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); }
nlohmann::json to_json(const Summary& s) {
  return {{"median", opt(s.median)}, {"min", opt(s.min)}, {"max", opt(s.max)}, {"n", s.n}};
}
std::string csv_num(const std::optional<double>& v) { return v ? fmt::format("{:.6g}", *v) : ""; }
std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string o = "\"";
  for (char c : s) o += c == '"' ? std::string("\"\"") : std::string(1, c);
  return o + "\"";
}

}  // namespace

Summary summarize(const std::vector<double>& v) {
  Summary s;
  s.median = median(v);
  s.min = min_of(v);
  s.max = max_of(v);
  s.n = int(v.size());
  return s;
}

const std::vector<std::string>& cell_metric_names() {
  static const std::vector<std::string> names = {
      "context_tokens", "ttft_s",   "prefill_tok_s", "decode_tok_s", "itl_mean_s",      "total_s",
      "generated_tokens", "peak_rss", "kv_bytes",    "scratch_peak", "bytes_per_token", "capacity_tokens"};
  return names;
}

const Cell* find_cell(const Aggregates& a, const std::string& arm, int64_t target) {
  for (const auto& c : a.cells)
    if (c.arm == arm && c.target == target) return &c;
  return nullptr;
}

Aggregates aggregate(const ResultsFile& f) {
  Aggregates a;
  a.truncated_lines = f.truncated_tail ? 1 : 0;
  if (!f.metas.empty()) a.meta = f.metas.back();
  int passes = 0;
  if (a.meta.contains("sweep")) {
    const auto& s = a.meta["sweep"];
    if (s.contains("arms")) a.arms = s["arms"].get<std::vector<std::string>>();
    if (s.contains("passes")) passes = s["passes"].get<int>();
    if (s.contains("facts"))
      for (const auto& fj : s["facts"]) a.fact_names.push_back(fj.at("name").get<std::string>());
  }
  // The last record per key wins; warm-ups are never aggregated.
  std::map<std::string, const RunRecord*> latest;
  for (const auto& r : f.runs)
    if (!r.warmup) latest[r.key()] = &r;
  std::vector<const RunRecord*> runs;
  for (const auto& r : f.runs)
    if (!r.warmup && latest[r.key()] == &r) runs.push_back(&r);
  for (const auto* r : runs)
    if (std::find(a.arms.begin(), a.arms.end(), r->arm) == a.arms.end()) a.arms.push_back(r->arm);

  std::map<std::pair<size_t, int64_t>, std::vector<const RunRecord*>> by_cell;
  std::map<std::pair<size_t, int64_t>, std::vector<const RunRecord*>> by_prefix;
  for (const auto* r : runs) {
    const size_t ai = size_t(std::find(a.arms.begin(), a.arms.end(), r->arm) - a.arms.begin());
    if (r->kind == kKindPrefixCold || r->kind == kKindPrefixWarm) by_prefix[{ai, r->target}].push_back(r);
    else by_cell[{ai, r->target}].push_back(r);
  }

  for (const auto& [key, rs] : by_cell) {
    Cell c;
    c.arm = a.arms[key.first];
    c.target = key.second;
    std::map<std::string, std::vector<double>> vals;
    std::vector<double> found, kld;
    std::set<int> recall_passes;
    for (const auto* r : rs) {
      if (r->kind == kKindRecall) {
        recall_passes.insert(r->pass);
        if (r->ok()) ++c.ok;
        else if (r->failure == "oom") ++c.oom;
        else ++c.other;
        if (!r->ok()) continue;
        for (const auto& m : cell_metric_names())
          if (auto v = metric_of(*r, m)) vals[m].push_back(*v);
        found.push_back(r->recall_found);
        c.recall_total = std::max(c.recall_total, r->recall_total);
        if (c.fact_found_runs.size() < r->recall_which.size()) c.fact_found_runs.resize(r->recall_which.size());
        for (size_t i = 0; i < r->recall_which.size(); ++i) c.fact_found_runs[i] += r->recall_which[i];
      } else if (r->kind == kKindBinding && r->ok() && r->binding_correct) {
        const size_t i = size_t(std::max(0, r->index));
        if (c.binding_fact_asked.size() <= i) c.binding_fact_asked.resize(i + 1), c.binding_fact_correct.resize(i + 1);
        ++c.binding_asked, ++c.binding_fact_asked[i];
        if (*r->binding_correct) ++c.binding_correct, ++c.binding_fact_correct[i];
      } else if (r->kind == kKindKld && r->ok() && r->kld_mean) {
        kld.push_back(*r->kld_mean);
      }
    }
    c.expected = std::max(passes, int(recall_passes.size()));
    for (const auto& m : cell_metric_names()) c.metrics[m] = summarize(vals[m]);
    c.recall_found = summarize(found);
    c.kld_mean = summarize(kld);
    a.cells.push_back(std::move(c));
  }
  // Change vs the reference (first) arm at the same target.
  for (auto& c : a.cells) {
    if (a.arms.empty() || c.arm == a.arms[0]) continue;
    const Cell* ref = find_cell(a, a.arms[0], c.target);
    if (!ref) continue;
    const auto& d = c.metrics["decode_tok_s"].median;
    const auto& rd = ref->metrics.at("decode_tok_s").median;
    if (d && rd && *rd > 0) c.decode_change_pct = (*d / *rd - 1.0) * 100.0;
    const auto& cap = c.metrics["capacity_tokens"].median;
    const auto& rcap = ref->metrics.at("capacity_tokens").median;
    if (cap && rcap && *rcap > 0 && *cap < 9.0e15) c.capacity_ratio = *cap / *rcap;  // unbounded: no ratio
  }
  // ITL against context: one point per target (medians), so each length weighs the same.
  for (const auto& arm : a.arms) {
    std::vector<double> x, y;
    for (const auto& c : a.cells) {
      if (c.arm != arm) continue;
      const auto& ctx = c.metrics.at("context_tokens").median;
      const auto& itl = c.metrics.at("itl_mean_s").median;
      if (ctx && itl) x.push_back(*ctx), y.push_back(*itl);
    }
    a.fits.push_back({arm, least_squares(x, y)});
  }
  for (const auto& [key, rs] : by_prefix) {
    PrefixCell p;
    p.arm = a.arms[key.first];
    p.prefix_target = key.second;
    std::map<int, const RunRecord*> cold, warm;
    for (const auto* r : rs) (r->kind == kKindPrefixCold ? cold : warm)[r->pass] = r;
    std::vector<double> ct, wt, sv, reused;
    for (const auto& [pass, c] : cold) {
      auto w = warm.find(pass);
      if (w == warm.end() || !c->ok() || !w->second->ok()) continue;
      ++p.pairs;
      ct.push_back(c->ttft_s);
      wt.push_back(w->second->ttft_s);
      reused.push_back(w->second->reused_prefix_tokens);
      if (w->second->text == c->text) ++p.same_output;
      if (w->second->cache_hit.value_or(false)) {
        ++p.verified;
        sv.push_back(c->ttft_s - w->second->ttft_s);
      }
    }
    p.cold_ttft = summarize(ct);
    p.warm_ttft = summarize(wt);
    p.saving_s = summarize(sv);
    p.reused_tokens = summarize(reused);
    a.prefix.push_back(std::move(p));
  }
  return a;
}

nlohmann::json to_json(const Cell& c) {
  nlohmann::json m;
  for (const auto& [k, s] : c.metrics) m[k] = to_json(s);
  return {{"type", "cell"},
          {"arm", c.arm},
          {"target", c.target},
          {"expected", c.expected},
          {"ok", c.ok},
          {"oom", c.oom},
          {"other", c.other},
          {"metrics", m},
          {"recall_found", to_json(c.recall_found)},
          {"recall_total", c.recall_total},
          {"fact_found_runs", c.fact_found_runs},
          {"binding_asked", c.binding_asked},
          {"binding_correct", c.binding_correct},
          {"binding_fact_asked", c.binding_fact_asked},
          {"binding_fact_correct", c.binding_fact_correct},
          {"kld_mean", to_json(c.kld_mean)},
          {"decode_change_pct", opt(c.decode_change_pct)},
          {"capacity_ratio", opt(c.capacity_ratio)}};
}

void write_aggregates(const Aggregates& a, const std::string& dir) {
  const std::filesystem::path d(dir);
  std::ofstream jl(d / "aggregate.jsonl", std::ios::trunc);
  std::ofstream csv(d / "aggregate.csv", std::ios::trunc);
  if (!jl || !csv) fail("cannot write aggregates into {}", dir);
  for (const auto& c : a.cells) jl << to_json(c).dump() << "\n";
  for (const auto& f : a.fits) {
    nlohmann::json j = {{"type", "fit"}, {"arm", f.arm}, {"metric", "itl_mean_s vs context_tokens"}};
    j["slope_s_per_token"] = f.itl ? nlohmann::json(f.itl->slope) : nlohmann::json(nullptr);
    j["intercept_s"] = f.itl ? nlohmann::json(f.itl->intercept) : nlohmann::json(nullptr);
    j["points"] = f.itl ? f.itl->n : 0;
    jl << j.dump() << "\n";
  }
  for (const auto& p : a.prefix)
    jl << nlohmann::json{{"type", "prefix"}, {"arm", p.arm}, {"prefix_target", p.prefix_target}, {"pairs", p.pairs},
                         {"verified", p.verified}, {"same_output", p.same_output}, {"cold_ttft_s", to_json(p.cold_ttft)},
                         {"warm_ttft_s", to_json(p.warm_ttft)}, {"saving_s", to_json(p.saving_s)},
                         {"reused_tokens", to_json(p.reused_tokens)}}
              .dump()
       << "\n";
  csv << "arm,target,expected,ok,oom,other";
  for (const auto& m : cell_metric_names()) csv << fmt::format(",{0}_median,{0}_min,{0}_max", m);
  csv << ",recall_median,recall_min,recall_max,recall_total,fact_found_runs,binding_correct,binding_asked,"
         "kld_mean_median,decode_change_pct,capacity_ratio\n";
  for (const auto& c : a.cells) {
    csv << csv_field(c.arm) << ',' << c.target << ',' << c.expected << ',' << c.ok << ',' << c.oom << ',' << c.other;
    for (const auto& m : cell_metric_names()) {
      const auto& s = c.metrics.at(m);
      csv << ',' << csv_num(s.median) << ',' << csv_num(s.min) << ',' << csv_num(s.max);
    }
    std::string which;
    for (size_t i = 0; i < c.fact_found_runs.size(); ++i) which += (i ? ";" : "") + std::to_string(c.fact_found_runs[i]);
    csv << ',' << csv_num(c.recall_found.median) << ',' << csv_num(c.recall_found.min) << ','
        << csv_num(c.recall_found.max) << ',' << c.recall_total << ',' << which << ',' << c.binding_correct << ','
        << c.binding_asked << ',' << csv_num(c.kld_mean.median) << ',' << csv_num(c.decode_change_pct) << ','
        << csv_num(c.capacity_ratio) << "\n";
  }
  if (!jl || !csv) fail("writing aggregates into {} failed", dir);
}

std::string summary_table(const Aggregates& a) {
  auto num = [](const std::optional<double>& v, const char* f) {
    return v ? fmt::format(fmt::runtime(f), *v) : std::string("-");
  };
  std::string out = fmt::format("{:<28} {:>7} {:>7} {:>6} {:>9} {:>10} {:>8} {:>10} {:>10} {:>7} {:>8} {:>9}\n", "arm",
                                "target", "ctx", "ok", "TTFT s", "decode t/s", "vs ref", "peak MiB", "capacity",
                                "recall", "binding", "KLD");
  for (const auto& c : a.cells) {
    const auto& m = c.metrics;
    const std::string recall =
        c.recall_found.median ? fmt::format("{:g}/{}", *c.recall_found.median, c.recall_total) : "-";
    const std::string binding = c.binding_asked ? fmt::format("{}/{}", c.binding_correct, c.binding_asked) : "-";
    const auto peak = m.at("peak_rss").median;
    out += fmt::format("{:<28} {:>7} {:>7} {:>6} {:>9} {:>10} {:>8} {:>10} {:>10} {:>7} {:>8} {:>9}\n", c.arm, c.target,
                       num(m.at("context_tokens").median, "{:.0f}"), fmt::format("{}/{}", c.ok, c.expected),
                       num(m.at("ttft_s").median, "{:.3g}"), num(m.at("decode_tok_s").median, "{:.4g}"),
                       num(c.decode_change_pct, "{:+.1f}%"),
                       peak ? fmt::format("{:.0f}", *peak / 1048576.0) : std::string("-"),
                       capacity_str(m.at("capacity_tokens").median), recall, binding,
                       num(c.kld_mean.median, "{:.3g}"));
  }
  for (const auto& f : a.fits)
    if (f.itl)
      out += fmt::format("ITL slope {}: {:.4g} us per 1k context tokens (intercept {:.4g} ms, {} lengths)\n", f.arm,
                         f.itl->slope * 1e9, f.itl->intercept * 1e3, f.itl->n);
  for (const auto& p : a.prefix)
    out += fmt::format("prefix reuse {}: {} pairs, {} verified hits, {} equal answers, cold TTFT {} s, warm {} s, "
                       "saving {} s\n", p.arm, p.pairs, p.verified, p.same_output, num(p.cold_ttft.median, "{:.4g}"), num(p.warm_ttft.median, "{:.4g}"),
                       num(p.saving_s.median, "{:.4g}"));
  return out;
}

}  // namespace kvtax::harness
