#include "serve/server.h"

#include "serve/http_lib.h"

#include <atomic>

#include <fmt/format.h>

#include "core/error.h"
#include "core/timer.h"
#include "serve/api_response.h"
#include "serve/peer_socket.h"
#include "tokenizer/tokenizer.h"

namespace kvtax::serve {

using json = nlohmann::json;

namespace {

constexpr double kHeartbeatS = 0.5;  // an idle stream sends an SSE comment this often (finds dead clients)
constexpr int kClientClosed = 499;   // nginx's status for a request whose client went away

const char* status_text(int status) {
  switch (status) {
    case 400: return "bad request";
    case 404: return "not found";
    case 405: return "method not allowed";
    case 408: return "request timeout";
    case 413: return "payload too large";
    case 414: return "URI too long";
    case 416: return "range not satisfiable";
    case 500: return "internal server error";
    case 503: return "service unavailable";
    default: return "error";
  }
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(dump(error_json(e)), "application/json");
}

}  // namespace

struct Server::Impl {
  const Model& model;
  ServerOptions opt;
  tok::ChatTemplate chat;
  Metrics metrics;
  Scheduler scheduler;
  httplib::Server http;
  std::atomic<bool> draining{false};

  Impl(const Model& m, const ServerOptions& o)
      : model(m), opt(o), chat(tok::detect_chat_template(m.file())), scheduler(m, o.engine, metrics, o.device) {
    if (opt.model_name.empty()) fail("serve: the model name is empty");
    const int n = opt.http_threads;
    http.new_task_queue = [n] { return new httplib::ThreadPool(size_t(n)); };
    http.set_payload_max_length(opt.max_body_bytes);
    http.set_read_timeout(30, 0);
    http.set_write_timeout(30, 0);
    http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      const bool ok = !draining;
      res.status = ok ? 200 : 503;
      res.set_content(dump({{"status", ok ? "ok" : "shutting_down"}}), "application/json");
      metrics.request("/health", res.status);
    });
    http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      const auto& c = model.config();
      json m = {{"id", opt.model_name}, {"object", "model"}, {"created", 0}, {"owned_by", "kvtax"},
                {"meta", {{"arch", c.arch}, {"n_layers", c.n_layers}, {"n_vocab", c.n_vocab},
                          {"n_ctx", scheduler.max_context()}, {"kv", opt.engine.kv.str()}}}};
      res.set_content(dump({{"object", "list"}, {"data", json::array({m})}}), "application/json");
      metrics.request("/v1/models", 200);
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics.render(scheduler.gauges()), "text/plain; version=0.0.4");
    });
    http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      complete(req, res, Endpoint::chat);
    });
    http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      complete(req, res, Endpoint::completions);
    });
    // Statuses httplib sets itself (404, 405, 413, 400 for unparsable HTTP) still get an OpenAI error body.
    http.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      std::string msg = fmt::format("{} {}: {}", req.method, req.path, status_text(res.status));
      std::string type = "invalid_request_error";
      if (res.status == 413) msg = fmt::format("the request body is larger than {} bytes", opt.max_body_bytes);
      if (res.status >= 500) type = "server_error";
      res.set_content(dump(error_json(ApiError(res.status, type, msg))), "application/json");
      const bool known = req.path == "/v1/chat/completions" || req.path == "/v1/completions";
      metrics.request(known ? req.path : "other", res.status);  // client paths would make labels unbounded
    });
  }

  void complete(const httplib::Request& req, httplib::Response& res, Endpoint ep) {
    const char* name = ep == Endpoint::chat ? "/v1/chat/completions" : "/v1/completions";
    const double t_arrival = now_seconds();
    try {
      if (draining) throw ApiError(503, "server_error", "the server is shutting down");
      const ApiRequest ar = parse_api_request(req.body, ep);
      if (!ar.model.empty() && ar.model != opt.model_name)
        throw ApiError(404, "invalid_request_error",
                       fmt::format("the model '{}' does not exist; this server serves '{}'", ar.model, opt.model_name),
                       "model", "model_not_found");
      auto job = std::make_shared<Job>();
      const auto& tk = model.tokenizer();
      job->prompt = ep == Endpoint::chat ? tk.encode(tok::apply_chat_template(chat, ar.messages, true), true, true)
                                         : tk.encode(ar.prompt, true, false);
      const int limit = scheduler.max_context();
      const int n = int(job->prompt.size());
      if (n == 0) bad_request("the prompt is empty", ep == Endpoint::chat ? "messages" : "prompt");
      if (n >= limit || (ar.max_tokens && n + *ar.max_tokens > limit))
        bad_request(fmt::format("this model's maximum context length is {} tokens (context and KV reservation); "
                                "the request needs {} ({} in the prompt, {} to generate)",
                                limit, n + ar.max_tokens.value_or(1), n, ar.max_tokens.value_or(1)),
                    n < limit ? "max_tokens" : (ep == Endpoint::chat ? "messages" : "prompt"),
                    "context_length_exceeded");
      job->max_tokens = ar.max_tokens ? *ar.max_tokens : std::min(opt.default_max_tokens, limit - n);
      job->sampler = ar.sampler;
      job->stop = ar.stop;
      job->t_arrival = t_arrival;
      job->reuse = ar.cache_prompt;
      scheduler.submit(job);
      const ResponseIds ids = new_response_ids(ep, opt.model_name);
      res.status = 200;
      if (ar.stream) stream(res, job, ids, ar.include_usage);
      else whole(req, res, *job, ids);
      metrics.request(name, res.status);
    } catch (const ApiError& e) {
      send_error(res, e);
      metrics.request(name, e.status);
    } catch (const std::exception& e) {
      send_error(res, ApiError(500, "server_error", e.what()));
      metrics.request(name, 500);
    }
  }

  static Usage usage_of(const GenerateStats& st) { return {st.prompt_tokens, st.generated_tokens, st.cached_tokens}; }

  void whole(const httplib::Request& req, httplib::Response& res, Job& job, const ResponseIds& ids) {
    // Nothing is written until the end, so look at the socket to notice a client that left: its generation
    // is cancelled and its KV freed like a dropped stream's.
    const int fd = find_connection_socket(req.local_port, req.remote_addr, req.remote_port);
    std::string text;
    bool done = false;
    while (!done) {
      text += job.take(kHeartbeatS, done);
      if (!done && !job.cancel && peer_gone(fd)) job.cancel = true;
    }
    if (job.error()) throw *job.error();
    if (job.stats().stop_reason == "cancel") {
      // Written to nobody; the status labels the request in /metrics.
      send_error(res, ApiError(kClientClosed, "invalid_request_error", "the client closed the connection"));
      return;
    }
    const auto& st = job.stats();
    res.set_content(dump(completion_json(ids, text, finish_reason(st.stop_reason), usage_of(st))), "application/json");
  }

  void stream(httplib::Response& res, const std::shared_ptr<Job>& job, const ResponseIds& ids, bool include_usage) {
    auto started = std::make_shared<bool>(false);
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [job, ids, include_usage, started](size_t, httplib::DataSink& sink) {
          const auto send = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
          if (!*started) {
            *started = true;
            if (ids.endpoint == Endpoint::chat && !send(sse_event(first_chunk(ids, include_usage)))) return false;
          }
          bool done = false;
          const std::string text = job->take(kHeartbeatS, done);
          if (!text.empty()) {
            if (!send(sse_event(text_chunk(ids, text, include_usage)))) return false;
          } else if (!done && !send(": keep-alive\n\n")) {
            return false;
          }
          if (!done) return true;
          if (job->error()) {
            if (!send(sse_event(error_json(*job->error())))) return false;
          } else {
            const auto& st = job->stats();
            if (!send(sse_event(finish_chunk(ids, finish_reason(st.stop_reason), include_usage)))) return false;
            if (include_usage && !send(sse_event(usage_chunk(ids, usage_of(st))))) return false;
          }
          if (!send(kSseDone)) return false;
          sink.done();
          return true;
        },
        [job](bool) { job->cancel = true; });  // finished or dropped: either way nothing more is wanted
  }
};

Server::Server(const Model& m, const ServerOptions& o) : impl_(std::make_unique<Impl>(m, o)) {}

Server::~Server() { shutdown(0); }

int Server::bind() {
  const auto& o = impl_->opt;
  const int port = o.port == 0 ? impl_->http.bind_to_any_port(o.host)
                               : (impl_->http.bind_to_port(o.host, o.port) ? o.port : -1);
  if (port <= 0) fail("serve: cannot listen on {}:{}", o.host, o.port);
  return port;
}

void Server::listen() { impl_->http.listen_after_bind(); }

bool Server::running() const { return impl_->http.is_running(); }

int Server::max_context() const { return impl_->scheduler.max_context(); }

size_t Server::kv_budget() const { return impl_->scheduler.bytes_reserved(); }

std::string Server::engine_description() const { return impl_->scheduler.engine().describe(); }

void Server::shutdown(double grace_s) {
  if (impl_->draining.exchange(true)) return;
  impl_->scheduler.drain(grace_s);
  impl_->http.stop();
}

}  // namespace kvtax::serve
