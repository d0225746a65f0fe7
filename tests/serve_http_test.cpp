// `kvtax serve` over real HTTP on 127.0.0.1: OpenAI shapes (whole and streamed), usage, prefix cache,
// errors with the right status, client disconnects, concurrent streams, and the harness's HTTP runner.
#include <gtest/gtest.h>

#include "serve/http_lib.h"

#include <atomic>
#include <thread>

#include <nlohmann/json.hpp>

#include "harness/http_runner.h"
#include "harness/sweep.h"
#include "serve_test_util.h"

using namespace kvtax;
using json = nlohmann::json;
using kvtax::testing::metric;
using kvtax::testing::sse_data;

namespace {

class Serve : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { tiny_ = new kvtax::testing::TinyModel("serve"); }
  static void TearDownTestSuite() { delete tiny_; }
  static serve::ServerOptions options(bool prefix_cache = true) {
    serve::ServerOptions o = kvtax::testing::server_options("q8", prefix_cache);
    o.max_body_bytes = 64 << 10;
    return o;
  }
  static inline kvtax::testing::TinyModel* tiny_ = nullptr;
};

json chat_body(const std::string& content, int max_tokens, bool stream) {
  json b = {{"model", "tiny"}, {"messages", {{{"role", "user"}, {"content", content}}}}, {"max_tokens", max_tokens},
            {"temperature", 0}};
  if (stream) b["stream"] = true, b["stream_options"] = {{"include_usage", true}};
  return b;
}

const std::string kShared =
    "Vault Aurora holds the code QX-4471. Vault Borealis holds the code JM-2208. The keeper counts lamps twice a "
    "night and writes every number into a ledger bound in green leather. ";

}  // namespace

TEST_F(Serve, WholeAndStreamedShapes) {
  kvtax::testing::TestServer s(*tiny_->model, options());
  auto cp = kvtax::testing::client(s.port());
  auto& c = *cp;
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  auto models = c.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(json::parse(models->body)["data"][0]["id"], "tiny");

  auto r = c.Post("/v1/chat/completions", chat_body("Say something.", 5, false).dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = json::parse(r->body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_TRUE(j["choices"][0]["message"]["content"].is_string());
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["completion_tokens"], 5);
  EXPECT_GT(j["usage"]["prompt_tokens"].get<int>(), 10);
  EXPECT_EQ(j["usage"]["total_tokens"], j["usage"]["prompt_tokens"].get<int>() + 5);

  auto st = c.Post("/v1/chat/completions", chat_body("Say something.", 5, true).dump(), "application/json");
  ASSERT_TRUE(st);
  ASSERT_EQ(st->status, 200);
  EXPECT_NE(st->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
  const auto events = sse_data(st->body);
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.back(), "[DONE]");
  const json first = json::parse(events[0]);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(first["usage"].is_null());
  const json fin = json::parse(events[events.size() - 3]);
  EXPECT_EQ(fin["choices"][0]["finish_reason"], "length");
  const json usage = json::parse(events[events.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 5);
  std::string streamed;
  for (size_t i = 1; i + 3 < events.size(); ++i) streamed += json::parse(events[i])["choices"][0]["delta"]["content"].get<std::string>();
  // Greedy: the same text whole and streamed (invalid UTF-8 from the random model becomes U+FFFD in both).
  EXPECT_EQ(streamed, j["choices"][0]["message"]["content"].get<std::string>());

  auto comp = c.Post("/v1/completions", kvtax::testing::completion("Once", 3).dump(), "application/json");
  ASSERT_TRUE(comp);
  ASSERT_EQ(comp->status, 200) << comp->body;
  EXPECT_EQ(json::parse(comp->body)["object"], "text_completion");
  EXPECT_EQ(json::parse(comp->body)["usage"]["completion_tokens"], 3) << comp->body;
}

TEST_F(Serve, PrefixCacheReportsCachedTokens) {
  kvtax::testing::TestServer s(*tiny_->model, options());
  auto cp = kvtax::testing::client(s.port());
  auto& c = *cp;
  auto a = c.Post("/v1/chat/completions", chat_body(kShared + "Summarise.", 4, false).dump(), "application/json");
  ASSERT_TRUE(a);
  auto b = c.Post("/v1/chat/completions", chat_body(kShared + "Which code?", 4, false).dump(), "application/json");
  ASSERT_TRUE(b);
  const int cached = json::parse(b->body)["usage"]["prompt_tokens_details"]["cached_tokens"];
  EXPECT_GT(cached, 150);
  json no = chat_body(kShared + "Which code?", 4, false);
  no["cache_prompt"] = false;
  auto n = c.Post("/v1/chat/completions", no.dump(), "application/json");
  ASSERT_TRUE(n);
  EXPECT_EQ(json::parse(n->body)["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_EQ(json::parse(n->body)["choices"][0]["message"]["content"], json::parse(b->body)["choices"][0]["message"]["content"]);
  const std::string m = c.Get("/metrics")->body;
  EXPECT_EQ(metric(m, "kvtax_prompt_tokens_cached_total"), cached);
  EXPECT_GT(metric(m, "kvtax_kv_bytes_used"), 0);  // the prefix cache holds the last sequence
  EXPECT_EQ(metric(m, "kvtax_kv_bytes_active"), 0);
  EXPECT_NE(m.find("kvtax_time_to_first_token_seconds_bucket{le=\"+Inf\"} 3"), std::string::npos) << m;
}

TEST_F(Serve, BadRequestsGetJsonErrors) {
  kvtax::testing::TestServer s(*tiny_->model, options());
  auto cp = kvtax::testing::client(s.port());
  auto& c = *cp;
  const auto post = [&](const std::string& path, const std::string& body) {
    auto r = c.Post(path, body, "application/json");
    EXPECT_TRUE(r);
    return std::make_pair(r->status, json::parse(r->body, nullptr, false));
  };
  const auto expect = [&](const std::string& body, int status, const std::string& param) {
    SCOPED_TRACE(body.substr(0, 80));
    const auto [st, j] = post("/v1/chat/completions", body);
    EXPECT_EQ(st, status);
    ASSERT_TRUE(j.contains("error"));
    EXPECT_TRUE(j["error"]["message"].is_string());
    if (!param.empty()) {
      EXPECT_EQ(j["error"]["param"], param);
    }
  };
  expect("{\"messages\": [", 400, "");
  expect("[1,2]", 400, "");
  expect(R"({"messages": "hi"})", 400, "messages");
  expect(R"({"messages": [{"role": "user", "content": 5}]})", 400, "messages[0].content");
  expect(R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": "7"})", 400, "max_tokens");
  expect(R"({"messages": [{"role": "user", "content": "x"}], "bogus": 1})", 400, "bogus");
  expect(R"({"messages": [{"role": "user", "content": "x"}], "temperature": 9})", 400, "temperature");
  expect("{\"messages\": [{\"role\": \"user\", \"content\": \"\xff\xfe\"}]}", 400, "");
  expect(R"({"model": "other", "messages": [{"role": "user", "content": "x"}]})", 404, "model");
  expect(chat_body("x", 5000, false).dump(), 400, "max_tokens");
  expect(chat_body(std::string(1500, 'a'), 4, false).dump(), 400, "messages");
  expect(std::string(70 << 10, ' '), 413, "");
  const auto [st, j] = post("/v1/chat/completions", chat_body(std::string(1500, 'a'), 4, false).dump());
  EXPECT_EQ(j["error"]["code"], "context_length_exceeded");
  auto nf = c.Get("/v1/nothing");
  ASSERT_TRUE(nf);
  EXPECT_EQ(nf->status, 404);
  EXPECT_TRUE(json::parse(nf->body).contains("error"));
  // The server is still fine.
  auto ok = c.Post("/v1/chat/completions", chat_body("x", 2, false).dump(), "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
}

TEST_F(Serve, DisconnectCancelsAndFreesKv) {
  kvtax::testing::TestServer s(*tiny_->model, options(/*prefix_cache=*/false));
  {
    auto cp = kvtax::testing::client(s.port());
    auto& c = *cp;
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/chat/completions";
    req.body = chat_body("Tell a long story.", 800, true).dump();
    req.set_header("Content-Type", "application/json");
    size_t got = 0;
    req.content_receiver = [&](const char*, size_t n, uint64_t, uint64_t) {
      got += n;
      return got < 600;  // hang up after a few chunks
    };
    httplib::Response res;
    httplib::Error err;
    c.send(req, res, err);
    EXPECT_GE(got, 600u);
  }
  auto cp = kvtax::testing::client(s.port());
  auto& c = *cp;
  std::string m;
  for (int i = 0; i < 100; ++i) {  // the engine notices at its next token
    m = c.Get("/metrics")->body;
    if (metric(m, "kvtax_requests_cancelled_total") >= 1 && metric(m, "kvtax_requests_running") == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(metric(m, "kvtax_requests_cancelled_total"), 1) << m;
  EXPECT_EQ(metric(m, "kvtax_kv_bytes_used"), 0);
  EXPECT_LT(metric(m, "kvtax_generation_tokens_total"), 1);  // a cancelled generation is not counted
}

TEST_F(Serve, ConcurrentStreamsAllFinishAndKvIsReleased) {
  kvtax::testing::TestServer s(*tiny_->model, options(/*prefix_cache=*/false));
  constexpr int kStreams = 8;
  std::atomic<int> ok{0};
  std::vector<std::thread> ts;
  for (int i = 0; i < kStreams; ++i)
    ts.emplace_back([&, i] {
      auto cp = kvtax::testing::client(s.port());
      auto& c = *cp;
      auto r = c.Post("/v1/chat/completions", chat_body("Stream " + std::to_string(i), 6, true).dump(), "application/json");
      if (!r || r->status != 200) return;
      const auto ev = sse_data(r->body);
      if (!ev.empty() && ev.back() == "[DONE]" && json::parse(ev[ev.size() - 2])["usage"]["completion_tokens"] == 6) ok++;
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(ok, kStreams);
  auto cp = kvtax::testing::client(s.port());
  auto& c = *cp;
  const std::string m = c.Get("/metrics")->body;
  EXPECT_EQ(metric(m, "kvtax_kv_bytes_used"), 0);
  EXPECT_EQ(metric(m, "kvtax_queue_depth"), 0);
  EXPECT_EQ(metric(m, "kvtax_generation_tokens_total"), 6 * kStreams);
  EXPECT_NE(m.find("kvtax_requests_total{endpoint=\"/v1/chat/completions\",status=\"200\"} 8"), std::string::npos);
}

TEST_F(Serve, QueueLimitGives429) {
  auto o = options(false);
  o.engine.queue_limit = 1;
  o.engine.parallel = 1;  // one running, one waiting: the rest of a burst of six is refused
  kvtax::testing::TestServer s(*tiny_->model, o);
  std::atomic<int> n200{0}, n429{0};
  std::vector<std::thread> ts;
  for (int i = 0; i < 6; ++i)
    ts.emplace_back([&] {
      auto cp = kvtax::testing::client(s.port());
      auto& c = *cp;
      auto r = c.Post("/v1/chat/completions", chat_body("q", 40, false).dump(), "application/json");
      if (r && r->status == 200) n200++;
      if (r && r->status == 429 && json::parse(r->body)["error"]["type"] == "rate_limit_exceeded") n429++;
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(n200 + n429, 6);
  EXPECT_GE(n429, 1);
  EXPECT_GE(n200, 1);
}

TEST_F(Serve, HarnessSweepOverHttp) {
  kvtax::testing::TestServer s(*tiny_->model, options());
  harness::HttpRunner runner("http://127.0.0.1:" + std::to_string(s.port()) + "/v1", "tiny", tiny_->path);
  harness::SweepOptions o;
  o.arms = harness::parse_arms({"q8"});
  o.lengths = {400};
  o.transcript.placement = harness::Placement::parse("spread");  // "early" needs 15 filler blocks
  o.passes = 1;
  o.warmup = 0;
  o.max_tokens = 8;
  o.binding_limit = 1;
  o.binding_max_tokens = 4;
  o.kld = false;
  o.prefix_reuse = true;
  o.prefix_tokens = 200;
  o.prefix_passes = 2;
  o.progress = false;
  o.out_dir = (std::filesystem::temp_directory_path() / ("kvtax-http-sweep-" + std::to_string(getpid()))).string();
  const auto rep = harness::run_sweep(runner, o, stderr, nullptr);
  EXPECT_EQ(rep.failed, 0);
  ASSERT_EQ(rep.aggregates.prefix.size(), 1u);
  EXPECT_EQ(rep.aggregates.prefix[0].verified, 2);
  EXPECT_EQ(rep.aggregates.prefix[0].same_output, 2);
  std::filesystem::remove_all(o.out_dir);
}
