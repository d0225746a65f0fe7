#pragma once
// Running one generate either in this process or in a forked child, turning every way it can fail
// (allocation failure, exception, crash, signal, OOM kill, timeout) into a failure class and message so
// a sweep records the failure and goes on.
#include <string>

#include "harness/runner.h"

namespace kvtax::harness {

enum class Isolation { none, process };
Isolation parse_isolation(const std::string& s);
const char* isolation_name(Isolation i);

struct Outcome {
  GenerateResult result;     // valid when failure is empty
  std::string failure;       // "" | "oom" | "other"
  std::string message;
  bool ok() const { return failure.empty(); }
};

// In this process: std::bad_alloc -> oom, any other exception -> other.
Outcome run_in_process(Runner& runner, const GenerateRequest& req);
// In a forked child that sends its result back as JSON through a pipe. Killed by SIGKILL (what the
// kernel OOM killer sends) -> oom; other signals or exits without a result -> other. timeout_s > 0 kills
// the child after that many seconds (-> other).
Outcome run_in_child(Runner& runner, const GenerateRequest& req, double timeout_s = 0);

}  // namespace kvtax::harness
