#include "harness/isolate.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>

#include "core/error.h"
#include "core/timer.h"

namespace kvtax::harness {
namespace {

void write_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = ::write(fd, s.data() + off, s.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // parent gone: nothing useful left to do
    off += size_t(n);
  }
}

[[noreturn]] void child_main(Runner& runner, const GenerateRequest& req, int fd) {
  int code = 0;
  std::string payload;
  try {
    runner.on_child_start();
    payload = nlohmann::json{{"result", to_json(runner.generate(req))}}.dump(-1, ' ', false,
                                                                              nlohmann::json::error_handler_t::replace);
  } catch (const std::bad_alloc&) {
    payload = R"x({"failure":"oom","message":"allocation failed (std::bad_alloc)"})x";
    code = 3;
  } catch (const std::exception& e) {
    payload = nlohmann::json{{"failure", "other"}, {"message", e.what()}}.dump(-1, ' ', false,
                                                                                nlohmann::json::error_handler_t::replace);
    code = 1;
  }
  write_all(fd, payload);
  ::close(fd);
  ::_exit(code);  // skip atexit handlers and static destructors shared with the parent
}

}  // namespace

Isolation parse_isolation(const std::string& s) {
  if (s == "none") return Isolation::none;
  if (s == "process") return Isolation::process;
  fail("isolate '{}' is not one of none, process", s);
}

const char* isolation_name(Isolation i) { return i == Isolation::none ? "none" : "process"; }

Outcome run_in_process(Runner& runner, const GenerateRequest& req) {
  Outcome o;
  try {
    o.result = runner.generate(req);
  } catch (const std::bad_alloc&) {
    o.failure = "oom";
    o.message = "allocation failed (std::bad_alloc)";
  } catch (const std::exception& e) {
    o.failure = "other";
    o.message = e.what();
  }
  return o;
}

Outcome run_in_child(Runner& runner, const GenerateRequest& req, double timeout_s) {
  int fds[2];
  if (::pipe(fds) != 0) fail("pipe: {}", std::strerror(errno));
  std::fflush(nullptr);  // buffered output would otherwise be written twice
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    fail("fork: {}", std::strerror(errno));
  }
  if (pid == 0) {
    ::close(fds[0]);
    child_main(runner, req, fds[1]);
  }
  ::close(fds[1]);
  std::string payload;
  bool timed_out = false;
  const double deadline = timeout_s > 0 ? now_seconds() + timeout_s : 0;
  char buf[65536];
  for (;;) {
    int wait_ms = -1;
    if (deadline > 0) {
      const double left = deadline - now_seconds();
      if (left <= 0) {
        timed_out = true;
        ::kill(pid, SIGKILL);
        break;
      }
      wait_ms = int(left * 1000) + 1;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int pr = ::poll(&p, 1, wait_ms);
    if (pr < 0 && errno == EINTR) continue;
    if (pr == 0) continue;  // re-check the deadline
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    payload.append(buf, size_t(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  Outcome o;
  if (timed_out) {
    o.failure = "other";
    o.message = fmt::format("timed out after {:g} s (child killed)", timeout_s);
    return o;
  }
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    o.failure = sig == SIGKILL ? "oom" : "other";
    o.message = fmt::format("child killed by signal {} ({}){}", sig, strsignal(sig),
                            sig == SIGKILL ? ", most likely the kernel OOM killer" : "");
    return o;
  }
  try {
    const auto j = nlohmann::json::parse(payload);
    if (j.contains("result")) {
      o.result = result_from_json(j.at("result"));
      return o;
    }
    o.failure = j.at("failure").get<std::string>();
    o.message = j.at("message").get<std::string>();
    return o;
  } catch (const std::exception& e) {
    o.failure = "other";
    o.message = fmt::format("child exited with status {} without a readable result ({} bytes: {})",
                            WIFEXITED(status) ? WEXITSTATUS(status) : -1, payload.size(), e.what());
    return o;
  }
}

}  // namespace kvtax::harness
