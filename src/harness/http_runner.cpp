#include "harness/http_runner.h"

#include "serve/http_lib.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/timer.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace kvtax::harness {

using json = nlohmann::json;

Endpoint parse_endpoint(const std::string& url) {
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0) fail("--endpoint '{}': expected http://HOST:PORT/PATH (https is not supported)", url);
  std::string rest = url.substr(scheme.size());
  Endpoint e;
  const size_t slash = rest.find('/');
  std::string hostport = rest.substr(0, slash);
  e.base_path = slash == std::string::npos ? "" : rest.substr(slash);
  while (!e.base_path.empty() && e.base_path.back() == '/') e.base_path.pop_back();
  const size_t colon = hostport.rfind(':');
  e.host = hostport.substr(0, colon);
  if (colon != std::string::npos) {
    const std::string p = hostport.substr(colon + 1);
    char* end = nullptr;
    const long port = std::strtol(p.c_str(), &end, 10);
    if (p.empty() || *end || port < 1 || port > 65535) fail("--endpoint '{}': bad port '{}'", url, p);
    e.port = int(port);
  }
  if (e.host.empty()) fail("--endpoint '{}': no host", url);
  return e;
}

namespace {

std::unique_ptr<httplib::Client> client(const Endpoint& ep, double timeout_s) {
  auto c = std::make_unique<httplib::Client>(ep.host, ep.port);
  c->set_connection_timeout(10, 0);
  const auto t = time_t(timeout_s);
  c->set_read_timeout(t, 0);
  c->set_write_timeout(t, 0);
  return c;
}

// Splits server-sent events as they arrive; calls on_data with each event's data payload.
class SseParser {
 public:
  template <class F>
  void feed(const char* p, size_t n, F&& on_data) {
    buf_.append(p, n);
    for (;;) {
      size_t end = buf_.find("\n\n");
      size_t skip = 2;
      const size_t crlf = buf_.find("\r\n\r\n");
      if (crlf != std::string::npos && (end == std::string::npos || crlf < end)) end = crlf, skip = 4;
      if (end == std::string::npos) return;
      std::string event = buf_.substr(0, end);
      buf_.erase(0, end + skip);
      std::string data;
      size_t pos = 0;
      while (pos <= event.size()) {
        size_t nl = event.find('\n', pos);
        if (nl == std::string::npos) nl = event.size();
        std::string line = event.substr(pos, nl - pos);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.rfind("data:", 0) == 0) {
          std::string d = line.substr(5);
          if (!d.empty() && d.front() == ' ') d.erase(0, 1);
          if (!data.empty()) data += '\n';
          data += d;
        }
        pos = nl + 1;
      }
      if (!data.empty()) on_data(data);
    }
  }
  const std::string& rest() const { return buf_; }

 private:
  std::string buf_;
};

}  // namespace

HttpRunner::HttpRunner(const std::string& endpoint, const std::string& model, const std::string& tokenizer_gguf,
                       double timeout_s)
    : url_(endpoint), model_(model), tokenizer_path_(tokenizer_gguf), ep_(parse_endpoint(endpoint)),
      timeout_s_(timeout_s) {
  if (model_.empty()) fail("the HTTP runner needs --model NAME (the id the server serves)");
  vocab_file_ = gguf::File::open(tokenizer_gguf);
  tokenizer_ = tok::Tokenizer::from_gguf(*vocab_file_);
  chat_ = tok::detect_chat_template(*vocab_file_);
  auto c = client(ep_, 30);
  auto res = c->Get(ep_.base_path + "/models");
  if (!res) fail("{}: cannot reach the server ({})", url_, httplib::to_string(res.error()));
  if (res->status != 200) fail("{}/models: HTTP {}: {}", url_, res->status, res->body.substr(0, 300));
  try {
    server_models_ = json::parse(res->body);
  } catch (const json::exception& e) {
    fail("{}/models: not JSON ({})", url_, e.what());
  }
}

HttpRunner::~HttpRunner() = default;

std::string HttpRunner::describe() const {
  return fmt::format("HTTP {} model '{}' (tokenizer {}, template {})", url_, model_, tokenizer_path_,
                     tok::chat_style_name(chat_.style));
}

json HttpRunner::model_info() const {
  return {{"runner", "http"}, {"endpoint", url_}, {"model", model_}, {"tokenizer", tokenizer_path_},
          {"chat_template", std::string(tok::chat_style_name(chat_.style))}, {"server_models", server_models_}};
}

void HttpRunner::check_arm(const Arm&) const {}  // the server's configuration; the arm only labels it

size_t HttpRunner::count_prompt_tokens(const std::string& user_message) {
  const std::string prompt = tok::apply_chat_template(chat_, {{"user", user_message}}, true);
  return tokenizer_->encode(prompt, true, true).size();
}

GenerateResult HttpRunner::generate(const GenerateRequest& req) {
  if (!req.teacher_tokens.empty() || req.want_logprobs)
    fail("the HTTP runner cannot teacher-force or return full log-probabilities (run the sweep with --no-kld)");
  const json body = {{"model", model_},
                     {"messages", json::array({{{"role", "user"}, {"content", req.user_message}}})},
                     {"max_tokens", req.max_tokens},
                     {"temperature", 0},
                     {"stream", true},
                     {"stream_options", {{"include_usage", true}}},
                     // llama.cpp's field, also understood by kvtax serve: an isolated run must not reuse.
                     {"cache_prompt", req.allow_prefix_cache}};
  GenerateResult r;
  SseParser sse;
  std::string raw, error;
  bool saw_done = false, saw_usage = false;
  int content_chunks = 0;
  double t_last = 0;
  std::string finish;
  const double t0 = now_seconds();
  const auto on_data = [&](const std::string& data) {
    if (data == "[DONE]") {
      saw_done = true;
      return;
    }
    json j;
    try {
      j = json::parse(data);
    } catch (const json::exception& e) {
      error = fmt::format("unparsable event '{}': {}", data.substr(0, 200), e.what());
      return;
    }
    if (j.contains("error")) {
      error = j["error"].dump();
      return;
    }
    if (j.contains("choices") && j["choices"].is_array() && !j["choices"].empty()) {
      const json& ch = j["choices"][0];
      if (ch.contains("delta") && ch["delta"].contains("content") && ch["delta"]["content"].is_string()) {
        const std::string piece = ch["delta"]["content"].get<std::string>();
        if (!piece.empty()) {
          const double now = now_seconds();
          if (content_chunks == 0) r.ttft_s = now - t0;
          else r.itl_s.push_back(now - t_last);
          t_last = now;
          content_chunks++;
          r.text += piece;
        }
      }
      if (ch.contains("finish_reason") && ch["finish_reason"].is_string()) finish = ch["finish_reason"];
    }
    if (j.contains("usage") && j["usage"].is_object()) {
      const json& u = j["usage"];
      saw_usage = true;
      r.prompt_tokens = u.value("prompt_tokens", 0);
      r.generated_tokens = u.value("completion_tokens", 0);
      if (u.contains("prompt_tokens_details") && u["prompt_tokens_details"].is_object())
        r.reused_prefix_tokens = u["prompt_tokens_details"].value("cached_tokens", 0);
    }
  };
  httplib::Request hr;
  hr.method = "POST";
  hr.path = ep_.base_path + "/chat/completions";
  hr.headers = {{"Accept", "text/event-stream"}};
  hr.body = body.dump();
  hr.set_header("Content-Type", "application/json");
  int status = 0;
  hr.response_handler = [&](const httplib::Response& res) {
    status = res.status;
    return true;
  };
  hr.content_receiver = [&](const char* p, size_t n, uint64_t, uint64_t) {
    if (status != 200) {
      raw.append(p, n);
      return raw.size() < (1u << 20);
    }
    sse.feed(p, n, on_data);
    return true;
  };
  auto c = client(ep_, timeout_s_);
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const bool ok = c->send(hr, res, err);
  const double t_end = now_seconds();
  if (!ok) fail("{}: request failed ({})", url_, httplib::to_string(err));
  if (status != 200) fail("{}: HTTP {}: {}", url_, status, raw.substr(0, 500));
  if (!error.empty()) fail("{}: the server reported an error: {}", url_, error);
  if (!saw_done) fail("{}: the stream ended without [DONE]", url_);
  r.total_s = content_chunks ? t_last - t0 : t_end - t0;
  if (!saw_usage) {
    // Without usage the counts are estimates; recorded so the results say so.
    r.generated_tokens = int(tokenizer_->encode(r.text, false, false).size());
    r.prompt_tokens = int(count_prompt_tokens(req.user_message));
  }
  r.tokens = tokenizer_->encode(r.text, false, false);
  r.extra = {{"finish_reason", finish}, {"usage_from_server", saw_usage}, {"content_chunks", content_chunks},
             {"client_total_s", t_end - t0}};
  return r;
}

}  // namespace kvtax::harness
