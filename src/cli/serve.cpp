// kvtax serve: an OpenAI-compatible HTTP server (chat/completions, completions, models, health, metrics).
// SIGTERM or SIGINT shuts down gracefully: new requests get 503, running ones finish (up to --shutdown-grace).
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <thread>

#include <pthread.h>

#include "cli/command.h"
#include "cli/engine_options.h"
#include "engine/device.h"
#include "engine/generate.h"
#include "core/error.h"
#include "harness/sweep_cli.h"
#include "model/default_model.h"
#include "serve/server.h"

namespace kvtax::cli {
namespace {

// The step budget on a device. Each prompt chunk there reads all the weights, so a budget of 512 left a 30k-token
// prompt's TTFT at 1.57 s against 1.22 s at 2048 and 1.15 s at 8192 (H200, Q4_K llama3-8b, docs/perf.md "Session 23").
// 2048 takes most of that for 0.2 MB of prefill buffers per row and sequence (llama3-8b: 0.4 GB a sequence, 1.7 GB
// at 8192), and keeps the other sequences' decode steps from waiting behind longer chunks.
constexpr int kDeviceStepTokens = 2048;

struct ServeArgs {
  EngineOptions engine;
  std::string host = "127.0.0.1", name, reserve;
  int port = 8080;
  bool no_prefix_cache = false;
  size_t max_queue = 16;
  int parallel = 4;
  std::string max_body = "8MiB";
  int default_max_tokens = 256;
  double grace_s = 30;
};

void serve(const ServeArgs& a) {
  // Signals go to sigwait below only: block them before any thread starts so every thread inherits the mask.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  check_device_name(a.engine.device);  // before loading: a build without the backend says so at once
  const std::string model_path = model_or_default(a.engine.model);
  auto model = Model::load(model_path);
  // A device holds one copy of the weights for every sequence; the KV budget becomes its page pool.
  std::unique_ptr<DeviceBackend> dev;
  if (a.engine.device != "cpu") dev = open_device(a.engine.device, *model);
  const ModelConfig& c = model->config();
  const int batch = a.engine.batch ? a.engine.batch : dev ? kDeviceStepTokens : kCpuPrefillChunk;
  const KvSpec spec = a.engine.kv_spec();
  int ctx = a.engine.ctx > 0 ? a.engine.ctx : int(std::min<uint32_t>(c.context_length ? c.context_length : 4096, 32768));
  size_t reserve = 0;  // shared by every sequence; the scheduler caps one sequence's context to what it holds
  if (!a.reserve.empty()) {
    reserve = harness::parse_bytes(a.reserve);
    const KvShape shape{int(c.n_layers), int(c.n_kv_heads), int(c.head_dim)};
    // A device engine checks the reservation against its own pages.
    if (!dev && KvCache::capacity(shape, spec, reserve, batch) < 2)
      fail("--kv-reserve {} holds no sequence under KV spec {}", a.reserve, spec.str());
  }
  serve::ServerOptions o;
  o.host = a.host;
  o.port = a.port;
  o.model_name = a.name.empty() ? std::filesystem::path(model_path).stem().string() : a.name;
  o.max_body_bytes = harness::parse_bytes(a.max_body);
  o.default_max_tokens = a.default_max_tokens;
  o.engine.kv = spec;
  o.engine.max_context = ctx;
  o.engine.batch = batch;
  o.engine.threads = a.engine.threads;
  o.engine.queue_limit = a.max_queue;
  o.engine.parallel = a.parallel;
  o.engine.kv_budget = reserve;
  o.engine.prefix_cache = !a.no_prefix_cache;
  o.device = dev.get();
  serve::Server server(*model, o);
  std::fprintf(stderr, "kvtax serve: %s\n", server.engine_description().c_str());
  std::fflush(stderr);
  const int port = server.bind();
  std::fprintf(stderr,
               "kvtax serve: listening on http://%s:%d/v1 (model '%s', context %d tokens, %d sequences at once, "
               "KV %s, %.1f MiB budget%s, device %s)\n",
               a.host.c_str(), port, o.model_name.c_str(), server.max_context(), a.parallel, spec.str().c_str(),
               double(server.kv_budget()) / (1 << 20), o.engine.prefix_cache ? ", prefix cache" : "", a.engine.device.c_str());
  std::fflush(stderr);
  std::atomic<bool> listen_returned{false};
  std::thread listener([&] {
    server.listen();
    listen_returned = true;
  });
  int sig = 0;
  sigwait(&sigs, &sig);
  // Stopping a server that has not started listening yet would not stop it.
  while (!server.running() && !listen_returned) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::fprintf(stderr, "kvtax serve: %s, shutting down (grace %.0f s)\n", sig == SIGTERM ? "SIGTERM" : "SIGINT",
               a.grace_s);
  server.shutdown(a.grace_s);
  listener.join();
  std::fprintf(stderr, "kvtax serve: stopped\n");
}

const bool registered = add_command({"serve", "OpenAI-compatible HTTP server (chat/completions, completions)", [](CLI::App& sub) {
  auto a = std::make_shared<ServeArgs>();
  add_engine_options(sub, a->engine);
  // Here the step's token budget, shared by the sequences' prompt chunks and decode tokens.
  sub.get_option("--batch")->description(
      "Tokens per scheduler step, prompt chunks and decode tokens together (default 512; 2048 with --device cuda)");
  sub.add_option("--host", a->host, "Address to listen on (default 127.0.0.1)");
  sub.add_option("--port", a->port, "Port (default 8080; 0: any free port)")->check(CLI::Range(0, 65535));
  sub.add_option("--name", a->name, "Model id clients name (default: the file name without .gguf)");
  sub.add_option("--kv-reserve", a->reserve, "KV budget shared by all sequences (e.g. 2GiB; default: --parallel full contexts)");
  sub.add_flag("--no-prefix-cache", a->no_prefix_cache, "Do not reuse cached prompt prefixes across requests");
  sub.add_option("--parallel", a->parallel,
                 "Sequences served at once (default 4): one batched step on the CPU, stepped in turn on a device")
      ->check(CLI::Range(1, 256));
  sub.add_option("--max-queue", a->max_queue, "Requests that may wait for the engine before 429 (default 16)");
  sub.add_option("--max-body", a->max_body, "Largest request body (default 8MiB)");
  sub.add_option("--default-max-tokens", a->default_max_tokens, "Tokens to generate when a request sets none")
      ->check(CLI::PositiveNumber);
  sub.add_option("--shutdown-grace", a->grace_s, "Seconds running requests get to finish on SIGTERM")
      ->check(CLI::NonNegativeNumber);
  sub.callback([a] { serve(*a); });
}});

}  // namespace
}  // namespace kvtax::cli
