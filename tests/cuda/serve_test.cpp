// `kvtax serve` on the CUDA backend: decoders sharing one page pool, requests together giving the texts
// they give alone, the prefix cache through CudaDecoder::truncate, the pool returning every page, and a
// reservation the device cannot hold refused at start. Skips without a GPU.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "cuda/device_model.h"
#include "cuda_test_util.h"
#include "serve_test_util.h"

namespace kvtax {
namespace {

using json = nlohmann::json;
using kvtax::testing::metric;

class CudaServe : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!cuda::available()) return;
    MakeModelOptions o;
    o.spec = arch_spec("tiny");  // byte vocab: a prompt's tokens are its bytes
    o.n_layers = 2;
    o.type = GgmlType::F16;
    o.seed = 17;
    o.n_threads = 2;
    o.out_path = (std::filesystem::temp_directory_path() / ("kvtax-cuda-serve-" + std::to_string(getpid()) + ".gguf"))
                     .string();
    make_model(o);
    path_ = o.out_path;
    model_ = Model::load(path_).release();
    backend_ = new cuda::CudaBackend(*model_);
  }
  static void TearDownTestSuite() {
    delete backend_;
    delete model_;
    if (!path_.empty()) std::filesystem::remove(path_);
  }
  static serve::ServerOptions options(const char* kv, bool prefix_cache) {
    serve::ServerOptions o = kvtax::testing::server_options(kv, prefix_cache);
    o.device = backend_;
    return o;
  }
  static inline std::string path_;
  static inline Model* model_ = nullptr;
  static inline cuda::CudaBackend* backend_ = nullptr;
};

using kvtax::testing::completion;

// Short prompts (the four fit one step of 64 rows together), so a prompt is one prefill chunk whether it
// runs alone or beside the others.
const std::vector<std::string> kPrompts = {"The keeper", "Vault Aurora", "Once", "A ledger lies"};

}  // namespace

TEST_F(CudaServe, ConcurrentRequestsGiveTheirLoneTexts) {
  REQUIRE_GPU();
  for (const char* kv : {"f16", "q8"}) {
    SCOPED_TRACE(kv);
    kvtax::testing::TestServer s(*model_, options(kv, false));
    auto c = kvtax::testing::client(s.port());
    std::vector<json> bodies;
    std::vector<std::string> alone(kPrompts.size());
    for (size_t i = 0; i < kPrompts.size(); ++i) {
      bodies.push_back(completion(kPrompts[i], 60 + 10 * int(i)));
      auto r = c->Post("/v1/completions", bodies.back().dump(), "application/json");
      ASSERT_TRUE(r);
      ASSERT_EQ(r->status, 200) << r->body;
      alone[i] = r->body;
    }
    const std::vector<std::string> together = kvtax::testing::post_together(s.port(), bodies);
    for (size_t i = 0; i < kPrompts.size(); ++i) {
      ASSERT_FALSE(together[i].empty()) << kPrompts[i];
      EXPECT_EQ(json::parse(together[i])["choices"][0]["text"], json::parse(alone[i])["choices"][0]["text"]);
      EXPECT_EQ(json::parse(together[i])["usage"], json::parse(alone[i])["usage"]);
    }
    const std::string m = c->Get("/metrics")->body;
    EXPECT_EQ(metric(m, "kvtax_kv_bytes_used"), 0) << m;  // every page back in the pool
    EXPECT_EQ(metric(m, "kvtax_engine_batched"), 0);
  }
}

TEST_F(CudaServe, PrefixCacheTruncatesTheDecoder) {
  REQUIRE_GPU();
  auto o = options("q8", true);
  o.engine.parallel = 1;
  kvtax::testing::TestServer s(*model_, o);
  auto c = kvtax::testing::client(s.port());
  // Over a page (16 tokens) of shared prefix, so the truncation keeps whole pages and cuts one.
  const std::string shared = "Vault Aurora holds QX-4471 and vault Borealis holds JM-2208. ";
  ASSERT_TRUE(c->Post("/v1/completions", completion(shared + "Aurora?", 8).dump(), "application/json"));
  auto b = c->Post("/v1/completions", completion(shared + "Borealis?", 8).dump(), "application/json");
  ASSERT_TRUE(b);
  ASSERT_EQ(b->status, 200) << b->body;
  EXPECT_GT(json::parse(b->body)["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 40);
  json cold = completion(shared + "Borealis?", 8);
  cold["cache_prompt"] = false;
  auto n = c->Post("/v1/completions", cold.dump(), "application/json");
  ASSERT_TRUE(n);
  EXPECT_EQ(json::parse(n->body)["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  // Stale or lost pages after the truncation would change the text. (The warm prefill starts at the reuse
  // point, so its GEMMs have other shapes; a greedy near-tie could in principle flip on that alone.)
  EXPECT_EQ(json::parse(n->body)["choices"][0]["text"], json::parse(b->body)["choices"][0]["text"]);
}

TEST_F(CudaServe, BudgetRunsRequestsThatDoNotFitTogetherInTurn) {
  REQUIRE_GPU();
  auto o = options("f16", false);
  o.engine.kv_budget = backend_->kv_bytes_for(o.engine.kv, 200);
  kvtax::testing::TestServer s(*model_, o);
  auto c = kvtax::testing::client(s.port());
  const int cap = json::parse(c->Get("/v1/models")->body)["data"][0]["meta"]["n_ctx"];
  ASSERT_GE(cap, 200);
  auto big = c->Post("/v1/completions", completion("Once", cap).dump(), "application/json");
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 400);
  std::vector<std::thread> ts;
  std::vector<int> status(3, 0);
  for (int i = 0; i < 3; ++i)
    ts.emplace_back([&, i] {
      auto cc = kvtax::testing::client(s.port());
      auto r = cc->Post("/v1/completions", completion(kPrompts[size_t(i)], cap - 20).dump(), "application/json");
      status[size_t(i)] = r ? r->status : -1;
    });
  for (auto& t : ts) t.join();
  for (int st : status) EXPECT_EQ(st, 200);
  EXPECT_EQ(metric(c->Get("/metrics")->body, "kvtax_kv_bytes_used"), 0);
}

TEST_F(CudaServe, ReservationBeyondTheDeviceIsRefusedAtStart) {
  REQUIRE_GPU();
  auto o = options("f16", false);
  o.engine.kv_budget = size_t(64) << 40;  // 64 TiB
  o.model_name = "tiny";
  try {
    serve::Server server(*model_, o);
    ADD_FAILURE() << "a 64 TiB KV reservation was accepted";
  } catch (const DeviceOutOfMemory& e) {
    EXPECT_NE(std::string(e.what()).find("exceeds"), std::string::npos) << e.what();
  }
}

}  // namespace kvtax
