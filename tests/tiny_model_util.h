// A 2-layer model of make-model's "tiny" architecture, written to a temporary file and loaded: the shared
// fixture of the engine tests (batching, prefix cache, KV fill). The caller deletes the model and the file.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "model/make_model.h"
#include "model/model.h"

namespace kvtax::testing {

// d_ff 0 keeps the architecture's width; *path receives the file to remove at the end of the suite.
inline Model* make_tiny_model(const std::string& tag, GgmlType type, uint64_t seed, std::string* path,
                              uint32_t d_ff = 0) {
  *path = (std::filesystem::temp_directory_path() / ("kvtax-" + tag + "-" + std::to_string(getpid()) + ".gguf"))
              .string();
  MakeModelOptions o;
  o.spec = arch_spec("tiny");
  if (d_ff) o.spec.d_ff = d_ff;
  o.n_layers = 2;
  o.type = type;
  o.seed = seed;
  o.out_path = *path;
  make_model(o);
  return Model::load(*path).release();
}

}  // namespace kvtax::testing
