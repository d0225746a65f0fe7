#include <charconv>
#include <string>

#include "core/error.h"
#include "kv/cache.h"

namespace kvtax {

namespace {

std::string codec_names() {
  std::string s;
  for (int i = 0; i < kv::kNumCodecs; ++i) s += std::string(i ? ", " : "") + kv::codec(kv::CodecId(i)).name;
  return s;
}

std::string check_codec(std::string_view name, std::string_view spec) {
  if (!kv::find_codec(name))
    fail("KV spec '{}': unknown codec '{}' (known: {})", spec, name, codec_names());
  return std::string(name);
}

int parse_count(std::string_view key, std::string_view val, std::string_view spec) {
  int v = 0;
  const auto r = std::from_chars(val.data(), val.data() + val.size(), v);
  if (r.ec != std::errc() || r.ptr != val.data() + val.size() || v < 0)
    fail("KV spec '{}': {} needs a non-negative integer, got '{}'", spec, key, val);
  return v;
}

}  // namespace

KvSpec parse_kv_spec(std::string_view s) {
  KvSpec spec;
  if (s.empty()) fail("KV spec is empty (want e.g. 'q8' or 'q8/q4,window=4096,sinks=4')");
  size_t start = 0;
  bool first = true;
  while (start <= s.size()) {
    const size_t comma = s.find(',', start);
    const std::string_view part = s.substr(start, comma == std::string_view::npos ? s.npos : comma - start);
    if (part.empty()) fail("KV spec '{}': empty field", s);
    const size_t eq = part.find('=');
    if (eq == std::string_view::npos) {
      if (!first) fail("KV spec '{}': '{}' is not key=value", s, part);
      const size_t slash = part.find('/');
      if (slash == std::string_view::npos) {
        spec.k = spec.v = check_codec(part, s);
      } else {
        spec.k = check_codec(part.substr(0, slash), s);
        spec.v = check_codec(part.substr(slash + 1), s);
      }
    } else {
      const std::string_view key = part.substr(0, eq), val = part.substr(eq + 1);
      if (key == "k") spec.k = check_codec(val, s);
      else if (key == "v") spec.v = check_codec(val, s);
      else if (key == "window") spec.policy.window = parse_count(key, val, s);
      else if (key == "sinks") spec.policy.sinks = parse_count(key, val, s);
      else if (key == "recent") spec.policy.recent = parse_count(key, val, s);
      else fail("KV spec '{}': unknown option '{}' (known: k, v, window, sinks, recent)", s, key);
    }
    first = false;
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  if (spec.policy.sinks > 0 && spec.policy.window == 0)
    fail("KV spec '{}': sinks only make sense with a window", s);
  return spec;
}

std::string KvSpec::str() const {
  std::string s = k == v ? k : k + "/" + v;
  if (policy.window) s += ",window=" + std::to_string(policy.window);
  if (policy.sinks) s += ",sinks=" + std::to_string(policy.sinks);
  if (policy.recent) s += ",recent=" + std::to_string(policy.recent);
  return s;
}

}  // namespace kvtax
