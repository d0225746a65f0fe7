// kvtax bench: the KV-cache tax sweep (planted-fact recall, speed, memory, capacity, KLD) with the
// in-process engine. The sweep itself only knows the Runner interface.
#include <cstdio>
#include <memory>

#include "cli/command.h"
#include "engine/local_runner.h"
#include "harness/sweep_cli.h"

namespace kvtax::cli {
namespace {

struct BenchArgs {
  std::string model;
  int threads = 0;
  int batch = 512;
  harness::SweepCliArgs sweep;
};

const bool registered = add_command({"bench", "Run the KV-cache tax sweep: arms x lengths x passes", [](CLI::App& sub) {
  auto a = std::make_shared<BenchArgs>();
  sub.add_option("-m,--model", a->model, "GGUF model file")->required()->check(CLI::ExistingFile);
  sub.add_option("-t,--threads", a->threads, "Threads (default: all physical cores)")->check(CLI::NonNegativeNumber);
  sub.add_option("-b,--batch", a->batch, "Prefill chunk in tokens")->check(CLI::Range(1, 8192));
  harness::add_sweep_options(sub, a->sweep);
  sub.callback([a] {
    const harness::SweepOptions opt = harness::resolve_sweep_options(a->sweep);
    LocalRunner runner(a->model, a->threads, a->batch);
    const auto rep = harness::run_sweep(runner, opt);
    std::fprintf(stderr, "runs: %d planned, %d executed, %d skipped (resume), %d failed; results in %s\n",
                 rep.planned, rep.executed, rep.skipped, rep.failed, opt.out_dir.c_str());
  });
}});

}  // namespace
}  // namespace kvtax::cli
