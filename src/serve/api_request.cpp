#include "serve/api_request.h"

#include <cmath>
#include <limits>
#include <random>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace kvtax::serve {

using json = nlohmann::json;

void bad_request(std::string message, std::string param, std::string code) {
  throw ApiError(400, "invalid_request_error", std::move(message), std::move(param), std::move(code));
}

bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = uint8_t(s[i]);
    if (c < 0x80) { ++i; continue; }
    int len;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) len = 2, cp = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, cp = c & 0x0F;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, cp = c & 0x07;
    else return false;
    if (i + size_t(len) > s.size()) return false;
    for (int k = 1; k < len; ++k) {
      const auto b = uint8_t(s[i + size_t(k)]);
      if ((b & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (b & 0x3F);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
      return false;
    i += size_t(len);
  }
  return true;
}

namespace {

const char* type_name(const json& v) { return v.type_name(); }

std::string get_string(const json& v, const std::string& param) {
  if (!v.is_string()) bad_request(fmt::format("'{}' must be a string, got {}", param, type_name(v)), param);
  return v.get<std::string>();
}

double get_number(const json& v, const std::string& param, double lo, double hi) {
  if (!v.is_number()) bad_request(fmt::format("'{}' must be a number, got {}", param, type_name(v)), param);
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi)
    bad_request(fmt::format("'{}' is {}; it must be between {} and {}", param, x, lo, hi), param);
  return x;
}

int64_t get_int(const json& v, const std::string& param, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) bad_request(fmt::format("'{}' must be an integer, got {}", param, type_name(v)), param);
  int64_t x;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    x = u > uint64_t(std::numeric_limits<int64_t>::max()) ? std::numeric_limits<int64_t>::max() : int64_t(u);
  } else {
    x = v.get<int64_t>();
  }
  if (x < lo || x > hi) bad_request(fmt::format("'{}' is {}; it must be between {} and {}", param, x, lo, hi), param);
  return x;
}

bool get_bool(const json& v, const std::string& param) {
  if (!v.is_boolean()) bad_request(fmt::format("'{}' must be a boolean, got {}", param, type_name(v)), param);
  return v.get<bool>();
}

// Message content: a string, or an array of {"type":"text","text":...} parts (concatenated).
std::string content_text(const json& c, const std::string& param) {
  if (c.is_string()) return c.get<std::string>();
  if (c.is_null()) return "";
  if (!c.is_array()) bad_request(fmt::format("'{}' must be a string or an array of text parts", param), param);
  std::string out;
  for (size_t i = 0; i < c.size(); ++i) {
    const json& part = c[i];
    const std::string p = fmt::format("{}[{}]", param, i);
    if (!part.is_object()) bad_request(fmt::format("'{}' must be an object", p), p);
    for (const auto& [k, v] : part.items())
      if (k != "type" && k != "text") bad_request(fmt::format("'{}.{}' is not supported", p, k), p + "." + k);
    if (!part.contains("type") || get_string(part["type"], p + ".type") != "text")
      bad_request(fmt::format("'{}.type' must be \"text\" (only text content is supported)", p), p + ".type");
    if (!part.contains("text")) bad_request(fmt::format("'{}.text' is missing", p), p + ".text");
    out += get_string(part["text"], p + ".text");
  }
  return out;
}

std::vector<tok::ChatMessage> parse_messages(const json& m) {
  if (!m.is_array()) bad_request(fmt::format("'messages' must be an array, got {}", type_name(m)), "messages");
  if (m.empty()) bad_request("'messages' must hold at least one message", "messages");
  std::vector<tok::ChatMessage> out;
  for (size_t i = 0; i < m.size(); ++i) {
    const std::string p = fmt::format("messages[{}]", i);
    const json& msg = m[i];
    if (!msg.is_object()) bad_request(fmt::format("'{}' must be an object, got {}", p, type_name(msg)), p);
    for (const auto& [k, v] : msg.items())
      if (k != "role" && k != "content" && k != "name")
        bad_request(fmt::format("'{}.{}' is not supported", p, k), p + "." + k);
    if (!msg.contains("role")) bad_request(fmt::format("'{}.role' is missing", p), p + ".role");
    std::string role = get_string(msg["role"], p + ".role");
    if (role == "developer") role = "system";
    if (role != "system" && role != "user" && role != "assistant")
      bad_request(fmt::format("'{}.role' is '{}'; supported roles: system, developer, user, assistant", p, role),
                  p + ".role");
    if (msg.contains("name")) get_string(msg["name"], p + ".name");
    if (!msg.contains("content")) bad_request(fmt::format("'{}.content' is missing", p), p + ".content");
    out.push_back({role, content_text(msg["content"], p + ".content")});
  }
  return out;
}

std::vector<std::string> parse_stop(const json& v) {
  if (v.is_null()) return {};
  if (v.is_string()) return {v.get<std::string>()};
  if (!v.is_array()) bad_request("'stop' must be a string or an array of strings", "stop");
  if (v.size() > kMaxStops) bad_request(fmt::format("'stop' holds {} strings; at most {}", v.size(), kMaxStops), "stop");
  std::vector<std::string> out;
  for (size_t i = 0; i < v.size(); ++i) out.push_back(get_string(v[i], fmt::format("stop[{}]", i)));
  return out;
}

}  // namespace

ApiRequest parse_api_request(std::string_view body, Endpoint ep) {
  if (!valid_utf8(body)) bad_request("the request body is not valid UTF-8");
  json j;
  try {
    j = json::parse(body.begin(), body.end());
  } catch (const json::exception& e) {
    bad_request(fmt::format("the request body is not valid JSON: {}", e.what()));
  }
  if (!j.is_object()) bad_request(fmt::format("the request body must be a JSON object, got {}", type_name(j)));

  ApiRequest r;
  r.endpoint = ep;
  // OpenAI's defaults: plain sampling at temperature 1, no truncation.
  r.sampler.temperature = 1.0f;
  r.sampler.top_k = 0;
  r.sampler.top_p = 1.0f;
  r.sampler.min_p = 0.0f;
  bool seeded = false;
  bool has_input = false;
  for (const auto& [k, v] : j.items()) {
    if (k == "model") r.model = get_string(v, k);
    else if (k == "messages" && ep == Endpoint::chat) r.messages = parse_messages(v), has_input = true;
    else if (k == "prompt" && ep == Endpoint::completions) {
      if (v.is_string()) r.prompt = v.get<std::string>();
      else if (v.is_array() && v.size() == 1 && v[0].is_string()) r.prompt = v[0].get<std::string>();
      else bad_request("'prompt' must be a string (or an array of one string)", "prompt");
      has_input = true;
    } else if (k == "max_tokens" || k == "max_completion_tokens") {
      if (!v.is_null()) r.max_tokens = int(get_int(v, k, 1, 1 << 24));
    } else if (k == "temperature") {
      if (!v.is_null()) r.sampler.temperature = float(get_number(v, k, 0, 2));
    } else if (k == "top_p") {
      if (!v.is_null()) r.sampler.top_p = float(get_number(v, k, 0, 1));
    } else if (k == "top_k") {
      if (!v.is_null()) r.sampler.top_k = int(get_int(v, k, 0, 1 << 20));
    } else if (k == "min_p") {
      if (!v.is_null()) r.sampler.min_p = float(get_number(v, k, 0, 1));
    } else if (k == "repeat_penalty") {
      if (!v.is_null()) r.sampler.repeat_penalty = float(get_number(v, k, 0.01, 10));
    } else if (k == "seed") {
      if (!v.is_null()) r.sampler.seed = uint64_t(get_int(v, k, std::numeric_limits<int64_t>::min(),
                                                          std::numeric_limits<int64_t>::max())), seeded = true;
    } else if (k == "stop") {
      r.stop = parse_stop(v);
    } else if (k == "stream") {
      if (!v.is_null()) r.stream = get_bool(v, k);
    } else if (k == "stream_options") {
      if (v.is_null()) continue;
      if (!v.is_object()) bad_request("'stream_options' must be an object", k);
      for (const auto& [sk, sv] : v.items()) {
        if (sk == "include_usage") r.include_usage = get_bool(sv, "stream_options.include_usage");
        else bad_request(fmt::format("'stream_options.{}' is not supported", sk), "stream_options." + sk);
      }
    } else if (k == "n") {
      if (!v.is_null() && get_int(v, k, 1, 128) != 1) bad_request("only n = 1 is supported", k);
    } else if (k == "presence_penalty" || k == "frequency_penalty") {
      if (!v.is_null() && get_number(v, k, -2, 2) != 0) bad_request(fmt::format("'{}' is not supported (use 0)", k), k);
    } else if (k == "logprobs") {
      const bool on = ep == Endpoint::chat ? (!v.is_null() && get_bool(v, k)) : (!v.is_null() && get_int(v, k, 0, 5) > 0);
      if (on) bad_request("'logprobs' is not supported", k);
    } else if (k == "cache_prompt") {
      if (!v.is_null()) r.cache_prompt = get_bool(v, k);
    } else if (k == "user") {
      get_string(v, k);
    } else if (k == "echo" && ep == Endpoint::completions) {
      if (!v.is_null() && get_bool(v, k)) bad_request("'echo' is not supported", k);
    } else {
      bad_request(fmt::format("unrecognized request argument supplied: {}", k), k);
    }
  }
  if (!has_input) bad_request(ep == Endpoint::chat ? "'messages' is required" : "'prompt' is required",
                              ep == Endpoint::chat ? "messages" : "prompt");
  if (!r.stream && r.include_usage) bad_request("'stream_options' is only allowed when 'stream' is true", "stream_options");
  if (!seeded) r.sampler.seed = std::random_device{}();
  return r;
}

}  // namespace kvtax::serve
