#pragma once
// `kvtax serve`: an OpenAI-compatible HTTP server over one model (cpp-httplib; one engine worker batching the running requests).
//   POST /v1/chat/completions, /v1/completions (streaming as server-sent events, or whole)
//   GET  /v1/models, /health, /metrics (Prometheus text)
#include <cstddef>
#include <memory>
#include <string>

#include "serve/scheduler.h"

namespace kvtax::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                       // 0: any free port
  std::string model_name;                // the id /v1/models lists and requests must name
  size_t max_body_bytes = size_t(8) << 20;
  int default_max_tokens = 256;          // when a request gives none (capped by the context left)
  int http_threads = 64;                 // connections served at once (streams wait on the engine)
  SchedulerConfig engine;
  // Null: the CPU engine. Otherwise the device that runs the model (outlives the server); the HTTP side is
  // the same either way.
  DeviceBackend* device = nullptr;
};

class Server {
 public:
  Server(const Model& m, const ServerOptions& o);
  ~Server();
  int bind();       // binds host:port; returns the port (useful with port 0). Throws kvtax::Error.
  void listen();    // serves until shutdown(); call bind() first
  bool running() const;  // listen() has started accepting
  int max_context() const;   // tokens one request may use (context, capped by the KV budget)
  size_t kv_budget() const;  // KV bytes all sequences share
  std::string engine_description() const;  // where the model runs and what the KV budget holds
  // Graceful: refuse new requests (503), let queued and running ones finish for up to grace_s, then
  // cancel what is left and stop listening. Safe to call from any thread, once.
  void shutdown(double grace_s);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtax::serve
