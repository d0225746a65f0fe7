#include "harness/arm.h"

#include <charconv>
#include <set>

#include "core/error.h"

namespace kvtax::harness {
namespace {

bool is_name_char(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'; }
bool is_value_char(char c) {
  return is_name_char(c) || (c >= 'A' && c <= 'Z') || c == '.' || c == '-' || c == '+';
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

int64_t parse_count(std::string_view spec, std::string_view key, std::string_view value) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || p != value.data() + value.size() || v < 0)
    fail("arm '{}': {}={} is not a non-negative integer", spec, key, value);
  return v;
}

}  // namespace

Arm parse_arm(std::string_view spec_in) {
  const std::string_view spec = trim(spec_in);
  if (spec.empty()) fail("arm: empty spec (expected CODEC[,KEY=VALUE]..., e.g. f16 or q4r,recent=1024)");
  Arm arm;
  std::set<std::string> seen;
  size_t pos = 0;
  bool first = true;
  while (pos <= spec.size()) {
    const size_t comma = spec.find(',', pos);
    const std::string_view part = trim(spec.substr(pos, comma == std::string_view::npos ? spec.npos : comma - pos));
    pos = comma == std::string_view::npos ? spec.size() + 1 : comma + 1;
    if (part.empty()) fail("arm '{}': empty element between commas", spec);
    if (first) {
      for (char c : part)
        if (!is_name_char(c))
          fail("arm '{}': codec name '{}' may only hold a-z, 0-9 and _", spec, part);
      arm.codec = std::string(part);
      first = false;
      continue;
    }
    const size_t eq = part.find('=');
    if (eq == std::string_view::npos || eq == 0 || eq + 1 == part.size())
      fail("arm '{}': '{}' is not KEY=VALUE", spec, part);
    const std::string key(trim(part.substr(0, eq)));
    const std::string_view value = trim(part.substr(eq + 1));
    for (char c : key)
      if (!is_name_char(c)) fail("arm '{}': option name '{}' may only hold a-z, 0-9 and _", spec, key);
    for (char c : value)
      if (!is_value_char(c)) fail("arm '{}': value '{}' of {} holds an invalid character", spec, value, key);
    if (!seen.insert(key).second) fail("arm '{}': option {} given twice", spec, key);
    if (key == "window") arm.window = parse_count(spec, key, value);
    else if (key == "sinks") arm.sinks = parse_count(spec, key, value);
    else if (key == "recent") arm.recent = parse_count(spec, key, value);
    else arm.extra.emplace_back(key, std::string(value));
  }
  if (arm.window && *arm.window == 0) fail("arm '{}': window must be at least 1 token", spec);
  if (arm.sinks && !arm.window) fail("arm '{}': sinks= needs window= (sinks are kept beside a rotating window)", spec);
  if (arm.window && arm.recent) fail("arm '{}': window= and recent= are different policies; use one", spec);
  // Canonical form: whitespace removed, order as written.
  arm.spec = arm.codec;
  size_t p2 = 0;
  first = true;
  while (p2 <= spec.size()) {
    const size_t comma = spec.find(',', p2);
    const std::string_view part = trim(spec.substr(p2, comma == std::string_view::npos ? spec.npos : comma - p2));
    p2 = comma == std::string_view::npos ? spec.size() + 1 : comma + 1;
    if (first) { first = false; continue; }
    const size_t eq = part.find('=');
    arm.spec += fmt::format(",{}={}", trim(part.substr(0, eq)), trim(part.substr(eq + 1)));
  }
  return arm;
}

std::vector<Arm> parse_arms(const std::vector<std::string>& specs) {
  std::vector<Arm> arms;
  for (const auto& s : specs) {
    Arm a = parse_arm(s);
    for (const auto& b : arms)
      if (b.spec == a.spec) fail("arm '{}' is given twice", a.spec);
    arms.push_back(std::move(a));
  }
  return arms;
}

}  // namespace kvtax::harness
