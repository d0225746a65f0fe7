#pragma once
// The self-contained HTML report of a sweep, made from its result files only (raw.jsonl), so it can be
// re-rendered at any time without rerunning anything. Charts are inline SVG; no scripts, no network.
#include <string>

#include "harness/aggregate.h"
#include "harness/results.h"

namespace kvtax::harness {

std::string render_report_html(const ResultsFile& raw, const Aggregates& agg);
// Reads DIR/raw.jsonl and writes the report to out_html (default DIR/report.html when empty).
// Returns the path written. Throws kvtax::Error when DIR holds no results.
std::string write_report(const std::string& results_dir, const std::string& out_html);

}  // namespace kvtax::harness
