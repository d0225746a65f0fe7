#pragma once
// Options shared by the commands that run the engine (run, bench, serve): model, threads, context, KV.
#include <CLI/CLI.hpp>

#include <string>

#include "kv/cache.h"

namespace kvtax::cli {

struct EngineOptions {
  std::string model;
  int threads = 0;          // 0: all physical cores
  int ctx = 0;              // 0: the model's trained context, capped at 32768
  int batch = 0;            // prompt tokens per eval; 0: kCpuPrefillChunk on the CPU, the whole prompt on a device
  std::string kv, kv_k = "f16", kv_v = "f16";
  int kv_window = 0, kv_sinks = 0, kv_recent = 0;
  std::string device = "cpu";  // cpu, or a device backend built in (engine/device.h)
  std::string kv_reserve;      // run --kv-reserve with a device: bytes of KV pages ("8GiB"; empty: the context)

  KvSpec kv_spec() const;   // validates; throws kvtax::Error
  size_t kv_reserve_bytes() const;  // 0 when not given
};

void add_engine_options(CLI::App& app, EngineOptions& o);

inline constexpr const char* kBatchHelp =
    "Prompt tokens per forward pass (default: 512 on the CPU; a device takes the whole prompt and splits it into its "
    "own chunks)";

}  // namespace kvtax::cli
