#include "model/default_model.h"

#include <cstdlib>

#include "core/error.h"
#include "core/find_upward.h"

namespace kvtax {

std::string find_default_model() {
  if (const char* env = std::getenv("KVTAX_DEFAULT_MODEL"); env && *env) return env;
  return find_upward(std::string("models/") + kDefaultModelFile, PathKind::file);
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
