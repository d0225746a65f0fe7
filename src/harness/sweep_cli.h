#pragma once
// Command-line options of a sweep, shared by every subcommand that runs one (kvtax bench, and later a
// server-backed variant): add_sweep_options() declares them, resolve_sweep_options() turns the parsed
// strings into validated SweepOptions (preset applied first, explicit options win).
#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "harness/sweep.h"

namespace kvtax::harness {

struct SweepCliArgs {
  std::vector<std::string> arms;
  std::string lengths;            // "" -> preset or 2k,8k,16k,32k
  int passes = -1, warmup = -1;   // -1 -> preset or 3 / 1
  uint64_t seed = 0;
  int facts = 0;                  // 0: the five default vault codes; N: N random facts from the seed
  std::string placement = "early";
  std::string filler = "repeat";
  bool binding = true;
  int binding_limit = 0;
  int max_tokens = 64;
  int binding_max_tokens = 16;
  bool kld = true;
  int kld_top_k = 0;
  std::string isolate = "none";
  double run_timeout_s = 0;
  std::string reserve;            // "" -> runner default; e.g. 13.37GiB, 512MiB, 1000000
  std::string out;
  bool resume = false;
  std::string preset;             // "seed"
  bool prefix_reuse = false;
  int prefix_tokens = 500;
  int prefix_passes = 4;
  bool quiet = false;
};

void add_sweep_options(CLI::App& app, SweepCliArgs& args);
// Throws kvtax::Error naming the bad option and value.
SweepOptions resolve_sweep_options(const SweepCliArgs& args);

// "2k,8k,16k,32k" -> 2000, 8000, 16000, 32000. k means 1000 (the original targets were 2000/8000/16000/
// 32000 tokens), m means 1000000; plain integers are taken as they are.
std::vector<int64_t> parse_lengths(std::string_view s);
// "13.37GiB", "512MiB", "4KiB", "8GB", "1000000" -> bytes.
size_t parse_bytes(std::string_view s);

}  // namespace kvtax::harness
