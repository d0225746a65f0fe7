// `kvtax serve` with several requests at once: continuous batching gives each request the text it gets
// alone, the KV budget admits only what fits, and a non-streamed request whose client leaves is cancelled.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <barrier>
#include <thread>

#include <nlohmann/json.hpp>

#include "serve_test_util.h"

using namespace kvtax;
using json = nlohmann::json;
using kvtax::testing::metric;

namespace {

class ServeBatching : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { tiny_ = new kvtax::testing::TinyModel("serve-batch", 1024); }  // 1024: serve_test_util.h
  static void TearDownTestSuite() { delete tiny_; }
  static serve::ServerOptions options(const std::string& kv) { return kvtax::testing::server_options(kv, false); }
  static inline kvtax::testing::TinyModel* tiny_ = nullptr;
};

using kvtax::testing::completion;
using kvtax::testing::kMixedPrompts;
using kvtax::testing::post_together;

}  // namespace

TEST_F(ServeBatching, ConcurrentGreedyRequestsMatchThemAlone) {
  for (const char* kv : {"f16", "q8"}) {
    SCOPED_TRACE(kv);
    kvtax::testing::TestServer s(*tiny_->model, options(kv));
    auto c = kvtax::testing::client(s.port());
    std::vector<json> bodies;
    std::vector<std::string> alone;
    for (size_t i = 0; i < kMixedPrompts.size(); ++i) {
      bodies.push_back(completion(kMixedPrompts[i], 48 + 8 * int(i)));
      auto r = c->Post("/v1/completions", bodies.back().dump(), "application/json");
      ASSERT_TRUE(r);
      ASSERT_EQ(r->status, 200) << r->body;
      alone.push_back(r->body);
    }
    const std::vector<std::string> together = post_together(s.port(), bodies);
    for (size_t i = 0; i < kMixedPrompts.size(); ++i) {
      SCOPED_TRACE(kMixedPrompts[i]);
      ASSERT_FALSE(together[i].empty());
      const json a = json::parse(alone[i]), t = json::parse(together[i]);
      EXPECT_EQ(t["choices"][0]["text"], a["choices"][0]["text"]);
      EXPECT_EQ(t["usage"], a["usage"]);
      EXPECT_EQ(t["choices"][0]["finish_reason"], a["choices"][0]["finish_reason"]);
    }
    const std::string m = c->Get("/metrics")->body;
    EXPECT_EQ(metric(m, "kvtax_kv_bytes_used"), 0) << m;
    EXPECT_EQ(metric(m, "kvtax_kv_bytes_active"), 0);
    EXPECT_EQ(metric(m, "kvtax_kv_bytes_admitted"), 0);
    EXPECT_EQ(metric(m, "kvtax_requests_running"), 0);
    EXPECT_EQ(metric(m, "kvtax_parallel_limit"), 4);
    EXPECT_EQ(metric(m, "kvtax_engine_batched"), 1);  // one ForwardPass per step on the CPU
    // Whether the four overlapped depends on the machine's timing; report it, do not assert it.
    std::printf("[%s] engine steps %.0f, of them batched %.0f\n", kv, metric(m, "kvtax_engine_steps_total"),
                metric(m, "kvtax_engine_batched_steps_total"));
  }
}

TEST_F(ServeBatching, KvBudgetAdmitsOnlyWhatFits) {
  auto o = options("q8");
  const auto& cfg = tiny_->model->config();
  const KvShape shape{int(cfg.n_layers), int(cfg.n_kv_heads), int(cfg.head_dim)};
  o.engine.kv_budget = KvCache::bytes_needed(shape, o.engine.kv, 200, o.engine.batch);
  kvtax::testing::TestServer s(*tiny_->model, o);
  auto c = kvtax::testing::client(s.port());
  const int cap = json::parse(c->Get("/v1/models")->body)["data"][0]["meta"]["n_ctx"];
  ASSERT_GE(cap, 200);
  ASSERT_LT(cap, 1024);
  // Beyond what the whole budget holds: refused at once.
  auto big = c->Post("/v1/completions", completion("Once", cap).dump(), "application/json");
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 400);
  EXPECT_EQ(json::parse(big->body)["error"]["code"], "context_length_exceeded");
  // Three requests of which no two fit together: they wait in the queue and run one after another.
  std::vector<json> bodies;
  for (int i = 0; i < 3; ++i) {
    const int n_prompt = int(tiny_->model->tokenizer().encode(kMixedPrompts[size_t(i)], true, false).size());
    const int n_new = cap - n_prompt - 8;
    ASSERT_GT(n_new, cap / 2);
    ASSERT_GT(2 * KvCache::bytes_needed(shape, o.engine.kv, size_t(cap - 8), o.engine.batch), o.engine.kv_budget);
    bodies.push_back(completion(kMixedPrompts[size_t(i)], n_new));
  }
  std::atomic<bool> done{false};
  std::atomic<double> most_running{0}, most_admitted{0};
  std::thread watch([&] {
    auto w = kvtax::testing::client(s.port());
    while (!done) {
      if (auto r = w->Get("/metrics")) {
        most_running = std::max(most_running.load(), metric(r->body, "kvtax_requests_running"));
        most_admitted = std::max(most_admitted.load(), metric(r->body, "kvtax_kv_bytes_admitted"));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  const auto out = post_together(s.port(), bodies);
  done = true;
  watch.join();
  for (const auto& b : out) {
    ASSERT_FALSE(b.empty());
    EXPECT_EQ(json::parse(b)["usage"]["completion_tokens"].get<int>() > 0, true);
  }
  EXPECT_LE(most_running, 1);
  EXPECT_LE(most_admitted, double(o.engine.kv_budget));
  const std::string m = c->Get("/metrics")->body;
  EXPECT_EQ(metric(m, "kvtax_kv_bytes_used"), 0);
  EXPECT_EQ(metric(m, "kvtax_kv_bytes_reserved"), double(o.engine.kv_budget));
}

TEST_F(ServeBatching, NonStreamedClientThatLeavesIsCancelled) {
  auto o = options("q8");
  o.engine.max_context = 8192;
  kvtax::testing::TestServer s(*tiny_->model, o);
  auto c = kvtax::testing::client(s.port());
  const std::string body = completion("Tell a long story.", 8000).dump();
  const std::string http = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                           "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(s.port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(send(fd, http.data(), http.size(), 0), ssize_t(http.size()));
  std::string m;
  for (int i = 0; i < 6000 && metric(m, "kvtax_kv_bytes_active") <= 0; ++i) {  // generating, KV in use
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    m = c->Get("/metrics")->body;
  }
  ASSERT_GT(metric(m, "kvtax_kv_bytes_active"), 0) << m;
  close(fd);
  const std::string closed = "kvtax_requests_total{endpoint=\"/v1/completions\",status=\"499\"} 1";
  for (int i = 0; i < 6000; ++i) {  // the handler looks at the socket every 0.5 s, the engine at every token
    m = c->Get("/metrics")->body;
    if (metric(m, "kvtax_requests_running") == 0 && m.find(closed) != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(metric(m, "kvtax_requests_cancelled_total"), 1) << m;
  EXPECT_EQ(metric(m, "kvtax_kv_bytes_used"), 0);
  EXPECT_EQ(metric(m, "kvtax_kv_bytes_active"), 0);
  EXPECT_LT(metric(m, "kvtax_generation_tokens_total"), 1);  // a cancelled generation is not counted
  EXPECT_NE(m.find(closed), std::string::npos) << m;
}
