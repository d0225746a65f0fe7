#pragma once
// ggml tensor types: ids as stored in GGUF files, one traits row per type (ggml's own numbering).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace kvtax {

enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22, IQ4_XS = 23,
  I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
  TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39, NVFP4 = 40, Q1_0 = 41, Q2_0 = 42,
};

struct GgmlTypeTraits {
  GgmlType type;
  std::string_view name;   // as llama.cpp prints it: "f32", "q4_K", ...
  uint32_t block_size;     // values per block
  uint32_t type_size;      // bytes per block
};

// nullptr for ids that are not (or no longer) ggml types.
const GgmlTypeTraits* ggml_traits(uint32_t id);
const GgmlTypeTraits& ggml_traits(GgmlType t);
std::string_view ggml_type_name(GgmlType t);
std::optional<GgmlType> ggml_type_from_name(std::string_view name);  // case-insensitive

// Bytes of a row of n values; n must be a multiple of the block size (checked by callers that parse files).
inline size_t ggml_row_bytes(GgmlType t, uint64_t n) {
  const auto& tr = ggml_traits(t);
  return size_t(n / tr.block_size) * tr.type_size;
}

}  // namespace kvtax
