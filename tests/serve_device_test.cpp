// `kvtax serve` on a device, without one: a fake DeviceBackend whose decoders run the CPU Forward and count
// pages from a shared pool like the CUDA backend's. The server, scheduler and device engine are the real
// ones; what is tested is their use of the device interface (one decoder per sequence, the KV budget as
// the pool, the prefix cache through truncate, device out-of-memory as 503).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <climits>
#include <limits>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/thread_pool.h"
#include "engine/device.h"
#include "model/forward.h"
#include "serve_test_util.h"

using namespace kvtax;
using json = nlohmann::json;
using kvtax::testing::metric;

namespace {

constexpr int kPageTokens = 16;

class FakePool : public DeviceKvPool {
 public:
  FakePool(size_t pages, size_t page_bytes, int layers) : pages_(pages), free_(pages), page_(page_bytes), layers_(layers) {}
  size_t bytes() const override { return pages_ * page_; }
  size_t bytes_free() const override { return free_ * page_; }
  size_t bytes_for(size_t tokens) const override { return (tokens + kPageTokens - 1) / kPageTokens * layers_ * page_; }
  size_t capacity_tokens() const override { return pages_ / size_t(layers_) * kPageTokens; }
  size_t pages_, free_, page_;
  int layers_;
};

struct FakeState {
  std::atomic<int> evals{0};
  int oom_at_eval = -1;     // that eval (0-based, over all decoders) throws DeviceOutOfMemory
  int nan_at_eval = -1;     // that eval's logits come out NaN (a forward pass that overflowed)
  size_t oom_pool_above = SIZE_MAX;  // kv_pool of more bytes throws DeviceOutOfMemory
  int oom_prepare_above = INT_MAX;   // prepare() for more rows throws DeviceOutOfMemory
  int decoders = 0, prepared = 0;
};

class FakeDecoder : public DeviceDecoder {
 public:
  FakeDecoder(const Model& m, const KvSpec& kv, int max_context, std::shared_ptr<FakePool> pool, ThreadPool& tp,
              FakeState& st)
      : fw_(m, kv, max_context, 512, tp), pool_(std::move(pool)), st_(st) {}
  ~FakeDecoder() override { give_back(0); }
  void eval(const int32_t* tokens, int n, float* logits, bool all_logits) override {
    const int e = st_.evals++;
    if (e == st_.oom_at_eval) throw DeviceOutOfMemory("fake device: out of memory");
    const size_t need = size_t(n_past() + n + kPageTokens - 1) / kPageTokens;
    if (need > pages_) {
      const size_t more = (need - pages_) * size_t(pool_->layers_);
      if (more > pool_->free_) fail("fake device: the KV pool ran out of pages");  // the scheduler must prevent it
      pool_->free_ -= more;
      pages_ = need;
    }
    fw_.eval(tokens, n, logits, all_logits);
    if (e == st_.nan_at_eval)
      std::fill_n(logits, size_t(all_logits ? n : 1) * model().config().n_vocab, std::numeric_limits<float>::quiet_NaN());
  }
  int n_past() const override { return fw_.n_past(); }
  int max_context() const override { return fw_.max_context(); }
  int max_batch() const override { return fw_.max_batch(); }
  const Model& model() const override { return fw_.model(); }
  void reset() override {
    fw_.reset();
    give_back(0);
  }
  size_t kv_bytes_used() const override { return pages_ * pool_->layers_ * pool_->page_; }
  size_t kv_bytes_reserved() const override { return pool_->bytes(); }
  size_t kv_bytes_per_token() const override { return pool_->page_ * pool_->layers_ / kPageTokens; }
  size_t capacity_tokens() const override { return pool_->capacity_tokens(); }
  size_t scratch_bytes() const override { return 0; }
  void truncate(int n) override {
    fw_.cache().truncate(n);
    give_back(size_t(n + kPageTokens - 1) / kPageTokens);
  }
  void prepare(int rows) override {
    if (rows > st_.oom_prepare_above) throw DeviceOutOfMemory("fake device: no room for the prefill buffers");
    st_.prepared++;
  }

 private:
  void give_back(size_t keep) {
    if (pages_ > keep) pool_->free_ += (pages_ - keep) * size_t(pool_->layers_), pages_ = keep;
  }
  Forward fw_;
  std::shared_ptr<FakePool> pool_;
  FakeState& st_;
  size_t pages_ = 0;
};

class FakeBackend : public DeviceBackend {
 public:
  FakeBackend(const Model& m, FakeState& st) : m_(m), st_(st), tp_(2) {}
  std::string describe() const override { return "fake device"; }
  size_t weight_bytes() const override { return 0; }
  size_t device_bytes() const override { return 0; }
  size_t peak_device_bytes() const override { return 0; }
  size_t page_bytes() const { return size_t(m_.config().n_kv_heads) * m_.config().head_dim * 4 * kPageTokens; }
  size_t capacity_tokens(const KvSpec&, size_t bytes) const override {
    return bytes / page_bytes() / m_.config().n_layers * kPageTokens;
  }
  size_t kv_bytes_for(const KvSpec&, size_t tokens) const override {
    return (tokens + kPageTokens - 1) / kPageTokens * m_.config().n_layers * page_bytes();
  }
  std::unique_ptr<DeviceDecoder> decoder(const KvSpec&, int, size_t) override {
    fail("fake device: only shared decoders");
  }
  std::shared_ptr<DeviceKvPool> kv_pool(const KvSpec&, size_t bytes) override {
    if (bytes > st_.oom_pool_above) throw DeviceOutOfMemory("fake device: the KV reservation does not fit");
    const int L = int(m_.config().n_layers);
    return std::make_shared<FakePool>(bytes / page_bytes() / L * L, page_bytes(), L);
  }
  std::unique_ptr<DeviceDecoder> shared_decoder(const KvSpec& kv, int max_context,
                                                std::shared_ptr<DeviceKvPool> pool) override {
    st_.decoders++;
    return std::make_unique<FakeDecoder>(m_, kv, max_context, std::static_pointer_cast<FakePool>(pool), tp_, st_);
  }

 private:
  const Model& m_;
  FakeState& st_;
  ThreadPool tp_;
};

// A server on a fake device, with the given options otherwise.
struct FakeServed {
  FakeServed(const Model& m, serve::ServerOptions o) : dev(m, st), server(m, on(o, dev)) {}
  static serve::ServerOptions on(serve::ServerOptions o, FakeBackend& d) {
    o.device = &d;
    return o;
  }
  FakeState st;
  FakeBackend dev;
  kvtax::testing::TestServer server;
};

class ServeDevice : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { tiny_ = new kvtax::testing::TinyModel("serve-device", 1024); }  // 1024: serve_test_util.h
  static void TearDownTestSuite() { delete tiny_; }
  static serve::ServerOptions options(bool prefix_cache = false) {
    return kvtax::testing::server_options("f16", prefix_cache);
  }
  static inline kvtax::testing::TinyModel* tiny_ = nullptr;
};

using kvtax::testing::completion;
using kvtax::testing::kMixedPrompts;
using kvtax::testing::post_together;

}  // namespace

TEST_F(ServeDevice, ConcurrentRequestsGiveTheCpuServersTexts) {
  std::vector<json> bodies;
  std::vector<std::string> cpu;
  {
    kvtax::testing::TestServer s(*tiny_->model, options());
    auto c = kvtax::testing::client(s.port());
    for (size_t i = 0; i < kMixedPrompts.size(); ++i) {
      bodies.push_back(completion(kMixedPrompts[i], 40 + 8 * int(i)));
      auto r = c->Post("/v1/completions", bodies.back().dump(), "application/json");
      ASSERT_TRUE(r);
      ASSERT_EQ(r->status, 200) << r->body;
      cpu.push_back(r->body);
    }
  }
  FakeServed f(*tiny_->model, options());
  FakeState& st = f.st;
  kvtax::testing::TestServer& s = f.server;
  EXPECT_EQ(st.decoders, 4);  // one decoder per sequence, made and prepared at start
  EXPECT_EQ(st.prepared, 4);
  const auto together = post_together(s.port(), bodies);
  for (size_t i = 0; i < kMixedPrompts.size(); ++i) {
    SCOPED_TRACE(kMixedPrompts[i]);
    ASSERT_FALSE(together[i].empty());
    const json a = json::parse(cpu[i]), t = json::parse(together[i]);
    EXPECT_EQ(t["choices"][0]["text"], a["choices"][0]["text"]);
    EXPECT_EQ(t["usage"], a["usage"]);
  }
  EXPECT_EQ(st.decoders, 4);  // requests reuse the decoders; none is made per request
  auto c = kvtax::testing::client(s.port());
  const std::string m = c->Get("/metrics")->body;
  EXPECT_EQ(metric(m, "kvtax_engine_batched"), 0) << m;  // the device steps sequences one after another
  EXPECT_EQ(metric(m, "kvtax_kv_bytes_used"), 0);
  EXPECT_EQ(metric(m, "kvtax_requests_running"), 0);
  // The budget defaults to --parallel full contexts of pages.
  EXPECT_EQ(metric(m, "kvtax_kv_bytes_reserved"), double(4 * f.dev.kv_bytes_for(options().engine.kv, 1024)));
}

TEST_F(ServeDevice, KvPoolAdmitsOnlyWhatFits) {
  FakeState st;
  FakeBackend dev(*tiny_->model, st);
  auto o = options();
  o.device = &dev;
  o.engine.kv_budget = dev.kv_bytes_for(o.engine.kv, 200);
  kvtax::testing::TestServer s(*tiny_->model, o);
  auto c = kvtax::testing::client(s.port());
  const int cap = json::parse(c->Get("/v1/models")->body)["data"][0]["meta"]["n_ctx"];
  ASSERT_EQ(cap, 208);  // 200 tokens rounded up to whole pages of 16
  auto big = c->Post("/v1/completions", completion("Once", cap).dump(), "application/json");
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 400);
  EXPECT_EQ(json::parse(big->body)["error"]["code"], "context_length_exceeded");
  // Three requests of which no two fit in the pool together: they queue and run one after another (the
  // fake decoder fails the request if its pages ran out, so overlap would show as an error).
  std::vector<json> bodies;
  for (int i = 0; i < 3; ++i) {
    const int n_prompt = int(tiny_->model->tokenizer().encode(kMixedPrompts[size_t(i)], true, false).size());
    bodies.push_back(completion(kMixedPrompts[size_t(i)], cap - n_prompt - 8));
  }
  std::atomic<bool> done{false};
  std::atomic<double> most_running{0};
  std::thread watch([&] {
    auto w = kvtax::testing::client(s.port());
    while (!done) {
      if (auto r = w->Get("/metrics"))
        most_running = std::max(most_running.load(), metric(r->body, "kvtax_requests_running"));
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  const auto out = post_together(s.port(), bodies);
  done = true;
  watch.join();
  for (const auto& b : out) {
    ASSERT_FALSE(b.empty());
    EXPECT_GT(json::parse(b)["usage"]["completion_tokens"].get<int>(), 0);
  }
  EXPECT_LE(most_running, 1);
  const std::string m = c->Get("/metrics")->body;
  EXPECT_EQ(metric(m, "kvtax_kv_bytes_used"), 0);
  EXPECT_EQ(metric(m, "kvtax_kv_bytes_reserved"), double(o.engine.kv_budget));
}

TEST_F(ServeDevice, PrefixCacheKeepsTheDecodersPages) {
  FakeState st;
  FakeBackend dev(*tiny_->model, st);
  auto o = options(/*prefix_cache=*/true);
  o.device = &dev;
  o.engine.parallel = 1;  // one decoder: the second request must find the first one's tokens in it
  kvtax::testing::TestServer s(*tiny_->model, o);
  auto c = kvtax::testing::client(s.port());
  const std::string shared = "Vault Aurora holds the code QX-4471; vault Borealis holds JM-2208. ";
  auto a = c->Post("/v1/completions", completion(shared + "Aurora?", 6).dump(), "application/json");
  ASSERT_TRUE(a);
  ASSERT_EQ(a->status, 200) << a->body;
  EXPECT_GT(metric(c->Get("/metrics")->body, "kvtax_kv_bytes_used"), 0);  // kept for the next request
  auto b = c->Post("/v1/completions", completion(shared + "Borealis?", 6).dump(), "application/json");
  ASSERT_TRUE(b);
  const int cached = json::parse(b->body)["usage"]["prompt_tokens_details"]["cached_tokens"];
  EXPECT_GT(cached, 10);
  json cold = completion(shared + "Borealis?", 6);
  cold["cache_prompt"] = false;
  auto n = c->Post("/v1/completions", cold.dump(), "application/json");
  ASSERT_TRUE(n);
  EXPECT_EQ(json::parse(n->body)["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_EQ(json::parse(n->body)["choices"][0]["text"], json::parse(b->body)["choices"][0]["text"]);
}

TEST_F(ServeDevice, DeviceOutOfMemoryIs503AndFreesKv) {
  FakeServed f(*tiny_->model, options());
  FakeState& st = f.st;
  kvtax::testing::TestServer& s = f.server;
  auto c = kvtax::testing::client(s.port());
  st.oom_at_eval = st.evals + 3;  // during the request's decode
  auto r = c->Post("/v1/completions", completion("Once", 20).dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503) << r->body;
  const json e = json::parse(r->body);
  EXPECT_EQ(e["error"]["type"], "server_error");
  EXPECT_NE(e["error"]["message"].get<std::string>().find("out of device memory"), std::string::npos) << r->body;
  const std::string m = c->Get("/metrics")->body;
  EXPECT_EQ(metric(m, "kvtax_kv_bytes_used"), 0) << m;
  EXPECT_EQ(metric(m, "kvtax_requests_running"), 0);
  auto again = c->Post("/v1/completions", completion("Once", 5).dump(), "application/json");  // still serving
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 200) << again->body;
}

// NaN logits fail their own request with a 500 that says so, free its KV, and leave the other request running beside
// it (and the server) untouched.
TEST_F(ServeDevice, NaNLogitsFailOnlyTheirRequest) {
  FakeServed f(*tiny_->model, options());
  FakeState& st = f.st;
  kvtax::testing::TestServer& s = f.server;
  st.nan_at_eval = st.evals + 4;
  auto post = [&](const char* prompt) -> std::pair<int, std::string> {
    auto x = kvtax::testing::client(s.port())->Post("/v1/completions", completion(prompt, 20).dump(), "application/json");
    return x ? std::pair{x->status, x->body} : std::pair{-1, std::string("no response")};
  };
  std::pair<int, std::string> r[2];
  std::thread other([&] { r[1] = post("Lily"); });
  r[0] = post("Once");
  other.join();
  int failed = 0;
  for (const auto& [status, body] : r) {
    if (status == 200) continue;
    ++failed;
    EXPECT_EQ(status, 500) << body;
    EXPECT_NE(body.find("NaN"), std::string::npos) << body;
  }
  EXPECT_EQ(failed, 1);
  auto c = kvtax::testing::client(s.port());
  const std::string m = c->Get("/metrics")->body;
  EXPECT_EQ(metric(m, "kvtax_kv_bytes_used"), 0) << m;
  auto again = c->Post("/v1/completions", completion("Once", 5).dump(), "application/json");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 200) << again->body;
}

TEST_F(ServeDevice, StreamedClientThatLeavesIsCancelled) {
  FakeState st;
  FakeBackend dev(*tiny_->model, st);
  auto o = options();
  o.device = &dev;
  o.engine.max_context = 4096;
  kvtax::testing::TestServer s(*tiny_->model, o);
  {
    auto c = kvtax::testing::client(s.port());
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    json body = completion("Tell a long story.", 4000);
    body["stream"] = true;
    req.body = body.dump();
    req.set_header("Content-Type", "application/json");
    size_t got = 0;
    req.content_receiver = [&](const char*, size_t n, uint64_t, uint64_t) {
      got += n;
      return got < 600;  // hang up after a few chunks
    };
    httplib::Response res;
    httplib::Error err;
    c->send(req, res, err);
    EXPECT_GE(got, 600u);
  }
  auto c = kvtax::testing::client(s.port());
  std::string m;
  for (int i = 0; i < 600; ++i) {  // the engine notices at its next token
    m = c->Get("/metrics")->body;
    if (metric(m, "kvtax_requests_cancelled_total") >= 1 && metric(m, "kvtax_requests_running") == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(metric(m, "kvtax_requests_cancelled_total"), 1) << m;
  EXPECT_EQ(metric(m, "kvtax_kv_bytes_used"), 0);
}

TEST_F(ServeDevice, StartupSaysWhatTheKvHoldsAndRefusesWhatDoesNotFit) {
  FakeState st;
  FakeBackend dev(*tiny_->model, st);
  auto o = options();
  o.device = &dev;
  o.host = "127.0.0.1";
  o.port = 0;
  o.model_name = "tiny";
  {
    serve::Server server(*tiny_->model, o);
    const std::string d = server.engine_description();
    EXPECT_NE(d.find("KV cache: 4096 tokens in "), std::string::npos) << d;  // 4 sequences of 1024
    EXPECT_NE(d.find("one after another"), std::string::npos) << d;
  }
  // A start the device cannot hold fails with DeviceOutOfMemory, its message saying `why`.
  auto refused = [&](const char* what, const char* why) {
    try {
      serve::Server server(*tiny_->model, o);
      ADD_FAILURE() << what << " the device cannot hold was accepted";
    } catch (const DeviceOutOfMemory& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  st.oom_pool_above = 1000;
  refused("a KV pool", "does not fit");
  st.oom_pool_above = SIZE_MAX;
  st.oom_prepare_above = o.engine.batch - 1;  // the step budget's prefill buffers do not fit: the message says so
  refused("prefill buffers", "smaller --batch");
  st.oom_prepare_above = INT_MAX;
  o.engine.kv_budget = 10;  // not one page
  EXPECT_THROW(serve::Server(*tiny_->model, o), Error);
}
