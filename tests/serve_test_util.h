#pragma once
// An in-process `kvtax serve` on a generated tiny model and 127.0.0.1:<free port>, for the server tests.
#include <unistd.h>

#include <barrier>
#include <chrono>
#include <filesystem>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/make_model.h"
#include "kv/cache.h"
#include "model/model.h"
#include "serve/http_lib.h"
#include "serve/server.h"

namespace kvtax::testing {

// d_ff 0: the tiny arch's 1536. The batching tests use 1024: with every matmul row at most one column
// panel (1024) wide, a Q8_0 product's row does not depend on how many rows share the call, so batched and
// lone runs choose the same greedy tokens; at 1536 the panels' float sums associate differently and a
// near-tie in the random model's logits flipped one greedy token in ~500.
inline std::string make_tiny_model(const std::string& tag, uint32_t d_ff = 0) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("kvtax-" + tag + "-" + std::to_string(getpid()) + ".gguf")).string();
  MakeModelOptions o;
  o.spec = arch_spec("tiny");
  if (d_ff) o.spec.d_ff = d_ff;
  o.n_layers = 2;
  o.type = GgmlType::Q8_0;
  o.seed = 5;
  o.out_path = path;
  make_model(o);
  return path;
}

// A generated tiny model, loaded once for a test suite; its file goes with it.
struct TinyModel {
  explicit TinyModel(const std::string& tag, uint32_t d_ff = 0)
      : path(make_tiny_model(tag, d_ff)), model(Model::load(path)) {}
  ~TinyModel() {
    model.reset();
    std::filesystem::remove(path);
  }
  std::string path;
  std::unique_ptr<Model> model;
};

// The engine settings the server suites share: a 1024-token context, 64-token steps, 2 threads, 4
// sequences at once, 16 waiting requests.
inline serve::ServerOptions server_options(const std::string& kv, bool prefix_cache) {
  serve::ServerOptions o;
  o.engine.kv = parse_kv_spec(kv);
  o.engine.max_context = 1024;
  o.engine.batch = 64;
  o.engine.threads = 2;
  o.engine.parallel = 4;
  o.engine.queue_limit = 16;
  o.engine.prefix_cache = prefix_cache;
  return o;
}

// Prompts of a few lengths (1 to ~25 tokens) for the concurrency tests.
inline const std::vector<std::string> kMixedPrompts = {
    "The keeper counts the lamps twice a night.",
    "Vault Aurora holds the code QX-4471; vault Borealis holds JM-2208.",
    "Once",
    "A ledger bound in green leather lies open on the desk, every page filled with numbers in a narrow hand.",
};

// A client for the test server. cpp-httplib 0.11's default read and write timeouts are 5 s: a test machine
// busy with other work (ctest -j, builds, SCHED_IDLE) can stall a request that long, and the request then
// failed (Serve.WholeAndStreamedShapes flaked so). A process stopped for a quiet measurement (SIGSTOP)
// finds every wall-clock timeout expired when it resumes, so these are long; ctest's 900 s limit still
// catches a hang.
inline std::unique_ptr<httplib::Client> client(int port) {
  auto c = std::make_unique<httplib::Client>("127.0.0.1", port);
  c->set_connection_timeout(600, 0);
  c->set_read_timeout(600, 0);
  c->set_write_timeout(600, 0);
  return c;
}

// A greedy /v1/completions body for the "tiny" test model.
inline nlohmann::json completion(const std::string& prompt, int max_tokens) {
  return {{"model", "tiny"}, {"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}};
}

// Posts every body at once (released together) and returns each response's text, or "" on failure.
inline std::vector<std::string> post_together(int port, const std::vector<nlohmann::json>& bodies) {
  std::vector<std::string> out(bodies.size());
  std::barrier go(std::ptrdiff_t(bodies.size()));
  std::vector<std::thread> ts;
  for (size_t i = 0; i < bodies.size(); ++i)
    ts.emplace_back([&, i] {
      auto c = client(port);
      go.arrive_and_wait();
      auto r = c->Post("/v1/completions", bodies[i].dump(), "application/json");
      if (r && r->status == 200) out[i] = r->body;
    });
  for (auto& t : ts) t.join();
  return out;
}

// Data payloads of an SSE body.
inline std::vector<std::string> sse_data(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    const size_t end = body.find("\n\n", pos);
    out.push_back(body.substr(pos + 6, end - pos - 6));
    pos = end;
  }
  return out;
}

// The value of an unlabelled Prometheus sample, or -1 when absent.
inline double metric(const std::string& text, const std::string& name) {
  const std::regex re("(^|\n)" + name + " ([0-9.e+-]+)");
  std::smatch m;
  if (!std::regex_search(text, m, re)) return -1;
  return std::stod(m[2]);
}

class TestServer {
 public:
  TestServer(const Model& m, serve::ServerOptions o) {
    o.host = "127.0.0.1";
    o.port = 0;
    if (o.model_name.empty()) o.model_name = "tiny";
    server_ = std::make_unique<serve::Server>(m, o);
    port_ = server_->bind();
    thread_ = std::thread([this] { server_->listen(); });
    while (!server_->running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // stop() needs it
  }
  ~TestServer() { stop(); }
  void stop() {
    if (!server_) return;
    server_->shutdown(5);
    thread_.join();
    server_.reset();
  }
  int port() const { return port_; }

 private:
  std::unique_ptr<serve::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace kvtax::testing
