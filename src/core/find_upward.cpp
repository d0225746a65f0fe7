#include "core/find_upward.h"

#include <unistd.h>

#include <filesystem>
#include <vector>

namespace kvtax {

namespace fs = std::filesystem;

std::string find_upward(const std::string& relative, PathKind kind) {
  std::error_code ec;
  std::vector<fs::path> starts;
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) starts.push_back(fs::path(std::string(exe, size_t(n))).parent_path());
  starts.push_back(fs::current_path(ec));
  for (fs::path p : starts) {
    for (; !p.empty(); p = p.parent_path()) {
      const fs::path cand = p / relative;
      if (kind == PathKind::file ? fs::is_regular_file(cand, ec) : fs::is_directory(cand, ec)) return cand.string();
      if (p == p.parent_path()) break;
    }
  }
  return "";
}

}  // namespace kvtax
