#pragma once
// One exception type for every user-facing failure: the CLI prints its message and exits non-zero.
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace kvtax {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace kvtax
