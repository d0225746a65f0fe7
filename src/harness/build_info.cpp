// Machine and build description for the results' meta line. git_describe.h is rewritten by every build
// whose `git describe` changed (cmake/git_describe.cmake); the flags come from CMake's configure step.
#include <sys/utsname.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "core/cpu.h"
#include "harness/results.h"

#if __has_include("git_describe.h")
#include "git_describe.h"
#else
#define KVTAX_GIT_DESCRIBE "unknown"
#endif
#ifndef KVTAX_BUILD_FLAGS
#define KVTAX_BUILD_FLAGS "unknown"
#endif
#ifndef KVTAX_BUILD_TYPE
#define KVTAX_BUILD_TYPE "unknown"
#endif

namespace kvtax::harness {

nlohmann::json machine_info() {
  nlohmann::json j;
  const auto& f = cpu();
  j["cpu"] = cpu_model_name();
  j["physical_cores"] = f.physical_cores;
  j["logical_cores"] = f.logical_cores;
  j["simd"] = simd_name(simd_level());
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  j["ram_bytes"] = (pages > 0 && page > 0) ? uint64_t(pages) * uint64_t(page) : 0;
  utsname u{};
  if (::uname(&u) == 0) {
    j["os"] = std::string(u.sysname) + " " + u.release;
    j["hostname"] = u.nodename;
  }
  return j;
}

nlohmann::json build_info() {
  return {{"version", KVTAX_VERSION},
          {"git", KVTAX_GIT_DESCRIBE},
#if defined(__clang__)
          {"compiler", std::string("clang ") + __clang_version__},
#elif defined(__GNUC__)
          {"compiler", std::string("gcc ") + __VERSION__},
#else
          {"compiler", "unknown"},
#endif
          {"build_type", KVTAX_BUILD_TYPE},
          {"flags", KVTAX_BUILD_FLAGS}};
}

}  // namespace kvtax::harness
