#include "model/default_model.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "core/error.h"

namespace kvtax {

namespace fs = std::filesystem;

std::string find_default_model() {
  if (const char* env = std::getenv("KVTAX_DEFAULT_MODEL"); env && *env) return env;
  std::error_code ec;
  std::vector<fs::path> starts;
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) starts.push_back(fs::path(std::string(exe, size_t(n))).parent_path());
  starts.push_back(fs::current_path(ec));
  for (fs::path p : starts) {
    for (; !p.empty(); p = p.parent_path()) {
      const fs::path cand = p / "models" / kDefaultModelFile;
      if (fs::is_regular_file(cand, ec)) return cand.string();
      if (p == p.parent_path()) break;
    }
  }
  return "";
}

std::string model_or_default(const std::string& given) {
  if (!given.empty()) return given;
  std::string p = find_default_model();
  if (p.empty())
    fail("no model given and the default models/{} was not found (pass -m FILE.gguf or set KVTAX_DEFAULT_MODEL)",
         kDefaultModelFile);
  return p;
}

}  // namespace kvtax
