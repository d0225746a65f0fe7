#pragma once
// An arm of a comparison: a KV codec plus an optional cache policy, written as one spec string:
//   CODEC[,KEY=VALUE]...     e.g.  f16   q8   q4r,recent=1024   f16,window=4096,sinks=4
// The harness checks only the syntax; whether the codec and policy exist is the runner's call
// (Runner::check_arm), because the in-process engine and an HTTP server support different sets.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvtax::harness {

struct Arm {
  std::string spec;                          // canonical form (keys in the order written)
  std::string codec;                         // e.g. "f16", "q4r"
  std::optional<int64_t> window, sinks;      // rotating cache: keep `window` recent tokens + `sinks` first
  std::optional<int64_t> recent;             // tiered: the most recent tokens stay in f16
  std::vector<std::pair<std::string, std::string>> extra;  // other KEY=VALUE options, passed through

  bool operator==(const Arm& o) const { return spec == o.spec; }
};

// Throws kvtax::Error naming the offending part of the spec.
Arm parse_arm(std::string_view spec);
// Parses each spec; rejects duplicates (two specs with the same canonical form).
std::vector<Arm> parse_arms(const std::vector<std::string>& specs);

}  // namespace kvtax::harness
