#pragma once
// Files shipped beside the binary or the source tree (the default model, the shared fixtures), found without an
// install step: the nearest ancestor of the executable's directory, then of the working directory, holding them.
#include <string>

namespace kvtax {

enum class PathKind { file, directory };

// `relative` under the nearest such ancestor, as a path, or "" when none has it.
std::string find_upward(const std::string& relative, PathKind kind);

}  // namespace kvtax
