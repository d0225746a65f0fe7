#include <cstdio>

#include "cli/command.h"
#include "harness/report.h"

namespace {
struct ReportArgs {
  std::string dir, out;
};
const bool registered = kvtax::cli::add_command(
    {"report", "Render a self-contained HTML report (inline SVG charts) from a sweep's result files",
     [](CLI::App& sub) {
       static ReportArgs a;
       sub.add_option("dir", a.dir, "Results directory (holds raw.jsonl)")->required();
       sub.add_option("-o,--out", a.out, "Output HTML file (default DIR/report.html)");
       sub.callback([] {
         const std::string path = kvtax::harness::write_report(a.dir, a.out);
         std::printf("wrote %s\n", path.c_str());
       });
     }});
}  // namespace
