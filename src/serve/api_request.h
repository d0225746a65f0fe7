#pragma once
// OpenAI request bodies (POST /v1/chat/completions and /v1/completions) → a validated request, or an
// ApiError carrying the HTTP status and OpenAI-shaped error fields. Pure: no model, no I/O (fuzzed).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "engine/sampler.h"
#include "tokenizer/chat_template.h"

namespace kvtax::serve {

struct ApiError : std::runtime_error {
  ApiError(int status, std::string type, std::string message, std::string param = "", std::string code = "")
      : std::runtime_error(message), status(status), type(std::move(type)), param(std::move(param)),
        code(std::move(code)) {}
  int status;
  std::string type;   // invalid_request_error | server_error | ...
  std::string param;  // the offending field, when there is one
  std::string code;   // e.g. context_length_exceeded
};

// Shorthand for a 400 invalid_request_error.
[[noreturn]] void bad_request(std::string message, std::string param = "", std::string code = "");

enum class Endpoint { chat, completions };

struct ApiRequest {
  Endpoint endpoint = Endpoint::chat;
  std::string model;
  std::vector<tok::ChatMessage> messages;  // chat
  std::string prompt;                      // completions
  std::optional<int> max_tokens;           // max_tokens or max_completion_tokens
  SamplerOptions sampler;                  // temperature default 1 as OpenAI's
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;              // stream_options.include_usage
  bool cache_prompt = true;                // llama.cpp's extension: false = do not reuse cached tokens
};

inline constexpr size_t kMaxStops = 4;

// Throws ApiError (400) for malformed JSON, invalid UTF-8, wrong types, unknown or unsupported fields.
ApiRequest parse_api_request(std::string_view body, Endpoint ep);

// Whether `s` is well-formed UTF-8 (no overlongs, surrogates or code points above U+10FFFF).
bool valid_utf8(std::string_view s);

}  // namespace kvtax::serve
