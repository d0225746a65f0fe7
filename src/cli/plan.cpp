// kvtax plan -m MODEL.gguf --reserve 16GiB [--window W --sinks S --recent N] [--json]
// For every K/V codec pair: bits per value, bytes per token and the tokens that fit the reservation
// (and, with a window, the plateau the cache never exceeds).
#include <cstdio>
#include <limits>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "kv/plan.h"
#include "model/config.h"

namespace {

struct Opts {
  std::string model, reserve = "16GiB";
  int window = 0, sinks = 0, recent = 0;
  bool json = false;
};

void run(const Opts& o) {
  const auto file = kvtax::gguf::File::open(o.model);
  const kvtax::ModelConfig cfg = kvtax::read_config(*file);
  const kvtax::KvShape shape{int(cfg.n_layers), int(cfg.n_kv_heads), int(cfg.head_dim)};
  const size_t reservation = kvtax::parse_size(o.reserve);
  const kvtax::KvPolicy policy{o.window, o.sinks, o.recent};
  if (policy.sinks > 0 && policy.window == 0) kvtax::fail("--sinks needs --window");
  const auto rows = kvtax::plan_kv(shape, reservation, policy);
  constexpr size_t kNever = std::numeric_limits<size_t>::max();
  if (o.json) {
    nlohmann::json j;
    j["model"] = o.model;
    j["arch"] = cfg.arch;
    j["n_layers"] = cfg.n_layers;
    j["n_kv_heads"] = cfg.n_kv_heads;
    j["head_dim"] = cfg.head_dim;
    j["context_length"] = cfg.context_length;
    j["reserve_bytes"] = reservation;
    j["policy"] = {{"window", policy.window}, {"sinks", policy.sinks}, {"recent", policy.recent}};
    j["pairs"] = nlohmann::json::array();
    for (const auto& r : rows)
      j["pairs"].push_back({{"k", r.k}, {"v", r.v}, {"k_bits", r.k_bits}, {"v_bits", r.v_bits},
                            {"bytes_per_token", r.bytes_per_token},
                            {"tokens", r.tokens == kNever ? nlohmann::json(nullptr) : nlohmann::json(r.tokens)},
                            {"unbounded", r.tokens == kNever}, {"plateau_bytes", r.plateau_bytes}});
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("%s: %s, %u layers, %u KV heads, head_dim %u, trained context %u\n", o.model.c_str(),
              cfg.arch.c_str(), cfg.n_layers, cfg.n_kv_heads, cfg.head_dim, cfg.context_length);
  std::printf("reservation %s (%zu bytes)", o.reserve.c_str(), reservation);
  if (policy.window) std::printf(", window %d, sinks %d", policy.window, policy.sinks);
  if (policy.recent) std::printf(", recent %d in f16", policy.recent);
  std::printf("\n%-5s %-5s %7s %7s %14s %14s%s\n", "K", "V", "K bits", "V bits", "bytes/token", "tokens",
              policy.window ? "   plateau MiB" : "");
  for (const auto& r : rows) {
    std::printf("%-5s %-5s %7.3f %7.3f %14.0f ", r.k.c_str(), r.v.c_str(), r.k_bits, r.v_bits, r.bytes_per_token);
    if (r.tokens == kNever) std::printf("%14s", "unbounded");
    else std::printf("%14zu", r.tokens);
    if (policy.window) std::printf(" %13.1f", double(r.plateau_bytes) / (1 << 20));
    std::printf("\n");
  }
}

const bool registered = kvtax::cli::add_command(
    {"plan", "KV capacity plan: bytes per token and tokens that fit, for every K/V codec pair",
     [](CLI::App& sub) {
       auto o = std::make_shared<Opts>();
       sub.add_option("-m,--model", o->model, "GGUF model file")->required();
       sub.add_option("--reserve", o->reserve, "bytes reserved for the KV cache (e.g. 16GiB)");
       sub.add_option("--window", o->window, "sliding window (0 = unbounded)");
       sub.add_option("--sinks", o->sinks, "sink tokens kept with a window");
       sub.add_option("--recent", o->recent, "most recent tokens kept in f16");
       sub.add_flag("--json", o->json, "print JSON");
       sub.callback([o] { run(*o); });
     }});

}  // namespace
