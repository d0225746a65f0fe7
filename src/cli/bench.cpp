// kvtax bench: the KV-cache tax sweep (planted-fact recall, speed, memory, capacity, KLD) with the
// in-process engine, or over HTTP against any OpenAI-compatible server (--endpoint). The sweep itself
// only knows the Runner interface.
#include <cstdio>
#include <memory>

#include "cli/command.h"
#include "cli/engine_options.h"
#include "core/error.h"
#include "engine/device.h"
#include "engine/local_runner.h"
#include "harness/http_runner.h"
#include "harness/sweep_cli.h"
#include "model/default_model.h"

namespace kvtax::cli {
namespace {

struct BenchArgs {
  std::string model, endpoint, tokenizer, device = "cpu";
  int threads = 0;
  int batch = 0;  // 0: the engine's own (kCpuPrefillChunk on the CPU, the whole prompt on a device)
  double http_timeout_s = 600;
  harness::SweepCliArgs sweep;
};

const bool registered = add_command({"bench", "Run the KV-cache tax sweep: arms x lengths x passes", [](CLI::App& sub) {
  auto a = std::make_shared<BenchArgs>();
  sub.add_option("-m,--model", a->model, "GGUF model file (default: the shipped models/kvtax-recall-12m.gguf); with --endpoint: the model id the "
                 "server serves");
  sub.add_option("--endpoint", a->endpoint, "OpenAI-compatible server, e.g. http://127.0.0.1:8080/v1");
  sub.add_option("--tokenizer", a->tokenizer, "With --endpoint: GGUF holding the served model's vocabulary")
      ->check(CLI::ExistingFile);
  sub.add_option("--http-timeout", a->http_timeout_s, "With --endpoint: seconds one request may take");
  sub.add_option("-t,--threads", a->threads, "Threads (default: all physical cores)")->check(CLI::NonNegativeNumber);
  sub.add_option("-b,--batch", a->batch, kBatchHelp)->check(CLI::Range(1, 8192));
  sub.add_option("--device", a->device, "Where the in-process engine runs: cpu, or cuda (a CUDA build with a GPU)");
  harness::add_sweep_options(sub, a->sweep);
  sub.callback([a] {
    check_device_name(a->device);  // before anything else: a build without the backend says so at once
    harness::SweepOptions opt = harness::resolve_sweep_options(a->sweep);
    std::unique_ptr<harness::Runner> runner;
    if (!a->endpoint.empty()) {
      if (a->device != "cpu") fail("--device applies to the in-process engine, not to --endpoint");
      if (a->model.empty()) fail("--endpoint needs -m MODEL_ID (the model id the server serves)");
      if (a->tokenizer.empty()) fail("--endpoint needs --tokenizer FILE.gguf (the served model's vocabulary)");
      if (opt.kld && opt.arms.size() > 1) {
        std::fprintf(stderr, "note: KLD needs teacher forcing, which an HTTP server does not offer; it is off\n");
      }
      opt.kld = false;
      runner = std::make_unique<harness::HttpRunner>(a->endpoint, a->model, a->tokenizer, a->http_timeout_s);
    } else {
      if (!a->tokenizer.empty()) fail("--tokenizer only applies with --endpoint");
      if (a->device != "cpu" && opt.isolate == harness::Isolation::process)
        fail("--isolate process does not work with --device {}: a device context does not survive fork", a->device);
      runner = std::make_unique<LocalRunner>(model_or_default(a->model), a->threads, a->batch, a->device);
    }
    const auto rep = harness::run_sweep(*runner, opt);
    std::fprintf(stderr, "runs: %d planned, %d executed, %d skipped (resume), %d failed; results in %s\n",
                 rep.planned, rep.executed, rep.skipped, rep.failed, opt.out_dir.c_str());
  });
}});

}  // namespace
}  // namespace kvtax::cli
