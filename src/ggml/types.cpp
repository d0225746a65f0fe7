#include "ggml/types.h"

#include <array>
#include <cctype>

#include "core/error.h"

namespace kvtax {
namespace {

constexpr std::array kTraits = {
    GgmlTypeTraits{GgmlType::F32, "f32", 1, 4},
    GgmlTypeTraits{GgmlType::F16, "f16", 1, 2},
    GgmlTypeTraits{GgmlType::Q4_0, "q4_0", 32, 18},
    GgmlTypeTraits{GgmlType::Q4_1, "q4_1", 32, 20},
    GgmlTypeTraits{GgmlType::Q5_0, "q5_0", 32, 22},
    GgmlTypeTraits{GgmlType::Q5_1, "q5_1", 32, 24},
    GgmlTypeTraits{GgmlType::Q8_0, "q8_0", 32, 34},
    GgmlTypeTraits{GgmlType::Q8_1, "q8_1", 32, 36},
    GgmlTypeTraits{GgmlType::Q2_K, "q2_K", 256, 84},
    GgmlTypeTraits{GgmlType::Q3_K, "q3_K", 256, 110},
    GgmlTypeTraits{GgmlType::Q4_K, "q4_K", 256, 144},
    GgmlTypeTraits{GgmlType::Q5_K, "q5_K", 256, 176},
    GgmlTypeTraits{GgmlType::Q6_K, "q6_K", 256, 210},
    GgmlTypeTraits{GgmlType::Q8_K, "q8_K", 256, 292},
    GgmlTypeTraits{GgmlType::IQ2_XXS, "iq2_xxs", 256, 66},
    GgmlTypeTraits{GgmlType::IQ2_XS, "iq2_xs", 256, 74},
    GgmlTypeTraits{GgmlType::IQ3_XXS, "iq3_xxs", 256, 98},
    GgmlTypeTraits{GgmlType::IQ1_S, "iq1_s", 256, 50},
    GgmlTypeTraits{GgmlType::IQ4_NL, "iq4_nl", 32, 18},
    GgmlTypeTraits{GgmlType::IQ3_S, "iq3_s", 256, 110},
    GgmlTypeTraits{GgmlType::IQ2_S, "iq2_s", 256, 82},
    GgmlTypeTraits{GgmlType::IQ4_XS, "iq4_xs", 256, 136},
    GgmlTypeTraits{GgmlType::I8, "i8", 1, 1},
    GgmlTypeTraits{GgmlType::I16, "i16", 1, 2},
    GgmlTypeTraits{GgmlType::I32, "i32", 1, 4},
    GgmlTypeTraits{GgmlType::I64, "i64", 1, 8},
    GgmlTypeTraits{GgmlType::F64, "f64", 1, 8},
    GgmlTypeTraits{GgmlType::IQ1_M, "iq1_m", 256, 56},
    GgmlTypeTraits{GgmlType::BF16, "bf16", 1, 2},
    GgmlTypeTraits{GgmlType::TQ1_0, "tq1_0", 256, 54},
    GgmlTypeTraits{GgmlType::TQ2_0, "tq2_0", 256, 66},
    GgmlTypeTraits{GgmlType::MXFP4, "mxfp4", 32, 17},
    GgmlTypeTraits{GgmlType::NVFP4, "nvfp4", 64, 36},  // 4 e4m3 sub-block scales + 32 bytes of nibbles
    GgmlTypeTraits{GgmlType::Q1_0, "q1_0", 128, 18},
    GgmlTypeTraits{GgmlType::Q2_0, "q2_0", 64, 18},
};

bool iequal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower((unsigned char)a[i]) != std::tolower((unsigned char)b[i])) return false;
  return true;
}

}  // namespace

const GgmlTypeTraits* ggml_traits(uint32_t id) {
  for (const auto& t : kTraits)
    if (uint32_t(t.type) == id) return &t;
  return nullptr;
}

const GgmlTypeTraits& ggml_traits(GgmlType t) {
  const GgmlTypeTraits* tr = ggml_traits(uint32_t(t));
  if (!tr) fail("unknown ggml type id {}", uint32_t(t));
  return *tr;
}

std::string_view ggml_type_name(GgmlType t) { return ggml_traits(t).name; }

std::optional<GgmlType> ggml_type_from_name(std::string_view name) {
  for (const auto& t : kTraits)
    if (iequal(t.name, name)) return t.type;
  return std::nullopt;
}

}  // namespace kvtax
