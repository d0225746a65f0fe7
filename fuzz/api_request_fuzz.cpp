// Fuzzes the OpenAI request parser of `kvtax serve` with arbitrary bodies (invalid UTF-8, deep nesting,
// wrong types). The first byte picks the endpoint. A parse either succeeds or throws ApiError with a 4xx
// status; an accepted request is rendered back through the response builders.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "serve/api_request.h"
#include "serve/api_response.h"

using namespace kvtax::serve;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const Endpoint ep = (data[0] & 1) ? Endpoint::completions : Endpoint::chat;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    const ApiRequest r = parse_api_request(body, ep);
    if (r.stop.size() > kMaxStops) std::abort();
    if (r.max_tokens && *r.max_tokens < 1) std::abort();
    std::string text = r.prompt;
    for (const auto& m : r.messages) {
      if (m.role != "system" && m.role != "user" && m.role != "assistant") std::abort();
      text += m.content;
    }
    if (!valid_utf8(text)) std::abort();  // accepted input is always well-formed
    const ResponseIds ids = new_response_ids(ep, r.model);
    const Usage u{1, 2, 0};
    (void)dump(completion_json(ids, text, "stop", u));
    (void)sse_event(text_chunk(ids, text, r.include_usage));
  } catch (const ApiError& e) {
    if (e.status < 400 || e.status >= 500) std::abort();
  }
  return 0;
}
