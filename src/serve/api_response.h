#pragma once
// OpenAI response bodies: whole completions, server-sent-event chunks, usage, errors.
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "serve/api_request.h"

namespace kvtax::serve {

struct Usage {
  int prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
};

struct ResponseIds {
  Endpoint endpoint = Endpoint::chat;
  std::string id;       // chatcmpl-… / cmpl-…
  int64_t created = 0;  // Unix seconds
  std::string model;
};

ResponseIds new_response_ids(Endpoint ep, const std::string& model);

// Engine stop reason (eog | stop | length | context | cancel) → OpenAI finish_reason.
std::string finish_reason(const std::string& stop_reason);

nlohmann::json usage_json(const Usage& u);
nlohmann::json error_json(const ApiError& e);
nlohmann::json completion_json(const ResponseIds& ids, const std::string& text, const std::string& finish,
                               const Usage& u);

// One streamed chunk. Chat: the first carries the role, content chunks carry text, the last an empty
// delta with finish_reason. With include_usage every chunk has "usage": null and a final chunk with
// empty choices carries the usage.
nlohmann::json first_chunk(const ResponseIds& ids, bool include_usage);
nlohmann::json text_chunk(const ResponseIds& ids, const std::string& text, bool include_usage);
nlohmann::json finish_chunk(const ResponseIds& ids, const std::string& finish, bool include_usage);
nlohmann::json usage_chunk(const ResponseIds& ids, const Usage& u);

// JSON text; invalid UTF-8 in generated text becomes U+FFFD instead of throwing.
std::string dump(const nlohmann::json& j);
// "data: {json}\n\n"
std::string sse_event(const nlohmann::json& j);
inline constexpr const char* kSseDone = "data: [DONE]\n\n";

}  // namespace kvtax::serve
