#include <cstdio>

#include "cli/command.h"
#include "core/cpu.h"

namespace {
const bool registered = kvtax::cli::add_command({"cpu", "Print the CPU features kvtax dispatches on", [](CLI::App& sub) {
  sub.callback([] {
    const auto& f = kvtax::cpu();
    std::printf("model: %s\nphysical cores: %d\nlogical cores: %d\navx2: %d\navx512: %d\navx512_vnni: %d\n"
                "avx512_bf16: %d\nkernels: %s\n",
                kvtax::cpu_model_name().c_str(), f.physical_cores, f.logical_cores, f.avx2, f.avx512,
                f.avx512_vnni, f.avx512_bf16, kvtax::simd_name(kvtax::simd_level()));
  });
}});
}  // namespace
