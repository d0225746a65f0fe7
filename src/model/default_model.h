#pragma once
// The model commands use when no -m is given: the recall model shipped in the repository
// (models/kvtax-recall-12m.gguf, see models/kvtax-recall-12m.md).
#include <string>

namespace kvtax {

inline constexpr const char* kDefaultModelFile = "kvtax-recall-12m.gguf";

// KVTAX_DEFAULT_MODEL if set, else models/<kDefaultModelFile> in the nearest ancestor directory of the
// executable (or of the working directory) that has it; "" when none is found.
std::string find_default_model();

// `given` if not empty, else find_default_model(); throws kvtax::Error saying how to pass a model when
// there is none.
std::string model_or_default(const std::string& given);

}  // namespace kvtax
