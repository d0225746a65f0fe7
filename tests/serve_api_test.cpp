// The OpenAI request parser and response shapes of `kvtax serve` (no model, no sockets).
#include <gtest/gtest.h>

#include "serve/api_request.h"
#include "serve/api_response.h"
#include "serve/metrics.h"

using namespace kvtax::serve;
using json = nlohmann::json;

namespace {

int status_of(const std::string& body, Endpoint ep = Endpoint::chat) {
  try {
    parse_api_request(body, ep);
    return 200;
  } catch (const ApiError& e) {
    return e.status;
  }
}

}  // namespace

TEST(ServeApi, ParsesChatAndCompletions) {
  const auto r = parse_api_request(
      R"({"model":"m","messages":[{"role":"developer","content":"sys"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],
          "max_completion_tokens":7,"temperature":0,"stop":"END","stream":true,"stream_options":{"include_usage":true},"seed":3,"cache_prompt":false})",
      Endpoint::chat);
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[1].content, "ab");
  EXPECT_EQ(*r.max_tokens, 7);
  EXPECT_EQ(r.sampler.temperature, 0.0f);
  EXPECT_EQ(r.stop, std::vector<std::string>{"END"});
  EXPECT_TRUE(r.stream && r.include_usage && !r.cache_prompt);
  EXPECT_EQ(r.sampler.seed, 3u);
  const auto c = parse_api_request(R"({"prompt":["hello"],"max_tokens":2,"top_k":5})", Endpoint::completions);
  EXPECT_EQ(c.prompt, "hello");
  EXPECT_EQ(c.sampler.top_k, 5);
  EXPECT_EQ(c.sampler.temperature, 1.0f);  // OpenAI's default
}

TEST(ServeApi, RejectsWithTheRightStatus) {
  EXPECT_EQ(status_of(R"({"messages":[{"role":"user","content":"x"}]})"), 200);
  EXPECT_EQ(status_of(R"({"messages":[{"role":"user","content":"x"}],"n":2})"), 400);
  EXPECT_EQ(status_of(R"({"messages":[{"role":"user","content":"x"}],"stream_options":{"include_usage":true}})"), 400);
  EXPECT_EQ(status_of(R"({"messages":[{"role":"tool","content":"x"}]})"), 400);
  EXPECT_EQ(status_of(R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})"), 400);
  EXPECT_EQ(status_of(R"({"messages":[]})"), 400);
  EXPECT_EQ(status_of(R"({"prompt":"x"})"), 400);                       // chat takes messages
  EXPECT_EQ(status_of(R"({"messages":[{"role":"user","content":"x"}]})", Endpoint::completions), 400);
  EXPECT_EQ(status_of(R"({"messages":[{"role":"user","content":"x"}],"stop":["a","b","c","d","e"]})"), 400);
  EXPECT_EQ(status_of(R"({"messages":[{"role":"user","content":"x"}],"max_tokens":0})"), 400);
  EXPECT_EQ(status_of(R"({"messages":[{"role":"user","content":"x"}],"max_tokens":1.5})"), 400);
  EXPECT_EQ(status_of(R"({"messages":[{"role":"user","content":"\ud800"}]})"), 400);  // lone surrogate
  EXPECT_EQ(status_of("{\"messages\":[{\"role\":\"user\",\"content\":\"\xc0\xaf\"}]}"), 400);  // overlong
  EXPECT_EQ(status_of(std::string(100000, '[')), 400);
  EXPECT_EQ(status_of(""), 400);
}

TEST(ServeApi, Utf8Validation) {
  EXPECT_TRUE(valid_utf8("plain caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
  EXPECT_FALSE(valid_utf8("\xed\xa0\x80"));      // UTF-16 surrogate
  EXPECT_FALSE(valid_utf8("\xf4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(valid_utf8("\xe2\x82"));          // truncated
  EXPECT_FALSE(valid_utf8("\x80"));
}

TEST(ServeApi, ChunkShapesAndInvalidUtf8Output) {
  const ResponseIds ids = new_response_ids(Endpoint::chat, "m");
  EXPECT_EQ(ids.id.rfind("chatcmpl-", 0), 0u);
  const json first = first_chunk(ids, true);
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(first["usage"].is_null());
  const json u = usage_chunk(ids, {10, 3, 4});
  EXPECT_TRUE(u["choices"].empty());
  EXPECT_EQ(u["usage"]["total_tokens"], 13);
  EXPECT_EQ(u["usage"]["prompt_tokens_details"]["cached_tokens"], 4);
  EXPECT_FALSE(text_chunk(ids, "x", false).contains("usage"));
  // A random model can emit bytes that are not UTF-8: they become U+FFFD, never an exception.
  const std::string s = sse_event(text_chunk(ids, "a\xff" "b", false));
  EXPECT_NE(s.find("a\xef\xbf\xbd" "b"), std::string::npos);
  EXPECT_EQ(s.substr(0, 6), "data: ");
  EXPECT_EQ(s.substr(s.size() - 2), "\n\n");
  EXPECT_EQ(finish_reason("eog"), "stop");
  EXPECT_EQ(finish_reason("context"), "length");
}

TEST(ServeApi, MetricsRenderHistograms) {
  Metrics m;
  m.ttft(0.02);
  m.ttft(3);
  m.itl(0.004);
  m.request("/v1/completions", 200);
  m.step(3, 40);
  m.step(1, 1);
  const std::string t = m.render(KvGauges{.bytes_used = 100, .bytes_admitted = 70, .bytes_reserved = 1000,
                                          .capacity_tokens = 64, .queue_limit = 16, .parallel = 4});
  EXPECT_NE(t.find("kvtax_time_to_first_token_seconds_bucket{le=\"0.025\"} 1\n"), std::string::npos) << t;
  EXPECT_NE(t.find("kvtax_time_to_first_token_seconds_bucket{le=\"+Inf\"} 2\n"), std::string::npos);
  EXPECT_NE(t.find("kvtax_time_to_first_token_seconds_count 2\n"), std::string::npos);
  EXPECT_NE(t.find("kvtax_requests_total{endpoint=\"/v1/completions\",status=\"200\"} 1\n"), std::string::npos);
  EXPECT_NE(t.find("kvtax_kv_bytes_reserved 1000\n"), std::string::npos);
  EXPECT_NE(t.find("kvtax_kv_bytes_admitted 70\n"), std::string::npos);
  EXPECT_NE(t.find("kvtax_parallel_limit 4\n"), std::string::npos);
  EXPECT_NE(t.find("kvtax_engine_steps_total 2\n"), std::string::npos);
  EXPECT_NE(t.find("kvtax_engine_batched_steps_total 1\n"), std::string::npos);
  EXPECT_NE(t.find("kvtax_engine_step_sequences_total 4\n"), std::string::npos);
  EXPECT_NE(t.find("kvtax_engine_step_tokens_total 41\n"), std::string::npos);
}
