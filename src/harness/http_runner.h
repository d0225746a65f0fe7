#pragma once
// The harness's HTTP runner: the sweep against any OpenAI-compatible server (kvtax serve, llama.cpp's
// llama-server, vLLM...). Each request is a streamed chat completion at temperature 0 with
// stream_options.include_usage. TTFT is the first non-empty content delta; ITL the gaps between content
// deltas; token counts come from the server's `usage`. Transcripts are sized with a local tokenizer and
// chat template (a GGUF holding the served model's vocabulary).
// The server's KV configuration is fixed, so an arm is only the label of what the server runs. Teacher
// forcing is not available over the API: requests for it throw (run the sweep with --no-kld).
#include <memory>
#include <string>

#include "harness/runner.h"
#include "model/model.h"
#include "tokenizer/chat_template.h"

namespace kvtax::harness {

struct Endpoint {
  std::string host;
  int port = 80;
  std::string base_path;  // e.g. /v1
};

// "http://HOST:PORT/v1" → parts; throws kvtax::Error for anything else (https is not supported).
Endpoint parse_endpoint(const std::string& url);

class HttpRunner : public Runner {
 public:
  HttpRunner(const std::string& endpoint, const std::string& model, const std::string& tokenizer_gguf,
             double timeout_s = 600);
  ~HttpRunner() override;
  std::string describe() const override;
  nlohmann::json model_info() const override;
  void check_arm(const Arm& arm) const override;
  size_t count_prompt_tokens(const std::string& user_message) override;
  GenerateResult generate(const GenerateRequest& req) override;

 private:
  std::string url_, model_, tokenizer_path_;
  Endpoint ep_;
  double timeout_s_;
  std::unique_ptr<gguf::File> vocab_file_;
  std::unique_ptr<tok::Tokenizer> tokenizer_;
  tok::ChatTemplate chat_;
  nlohmann::json server_models_;  // GET /v1/models at start (recorded with the results)
};

}  // namespace kvtax::harness
