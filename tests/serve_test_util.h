#pragma once
// An in-process `kvtax serve` on a generated tiny model and 127.0.0.1:<free port>, for the server tests.
#include <filesystem>
#include <memory>
#include <string>
#include <chrono>
#include <thread>

#include <unistd.h>

#include "model/make_model.h"
#include "model/model.h"
#include "serve/server.h"

namespace kvtax::testing {

inline std::string make_tiny_model(const std::string& tag) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("kvtax-" + tag + "-" + std::to_string(getpid()) + ".gguf")).string();
  MakeModelOptions o;
  o.spec = arch_spec("tiny");
  o.n_layers = 2;
  o.type = GgmlType::Q8_0;
  o.seed = 5;
  o.out_path = path;
  make_model(o);
  return path;
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
