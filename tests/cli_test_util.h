// Runs the kvtax binary of this build as a user would, for tests of the command line.
#pragma once

#include <cstdio>
#include <string>

namespace kvtax::testing {

struct CliRun {
  int status;       // as pclose returns it (0: exit 0)
  std::string out;  // stdout and stderr together
};

// `kvtax ARGS` through the shell (ARGS may hold quotes); a failed popen gives status -1.
inline CliRun run_kvtax(const std::string& args) {
  const std::string cmd = std::string(KVTAX_BINARY) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return {-1, ""};
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  return {pclose(p), out};
}

}  // namespace kvtax::testing
