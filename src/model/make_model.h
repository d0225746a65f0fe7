#pragma once
// Random-weight GGUF models with the exact tensor names, shapes and metadata of real checkpoints, so
// memory, bandwidth and KV-cache behaviour can be measured without downloading weights.
#include <cstdint>
#include <string>
#include <vector>

#include "ggml/types.h"

namespace kvtax {

// --vocab value (and the tiny arch's default) for make-model's own byte-level vocabulary.
inline constexpr std::string_view kBuiltinBytes = "builtin:bytes";

struct ArchSpec {
  std::string id;          // llama3-8b | qwen3-4b | qwen2.5-7b | mistral-7b
  std::string gguf_arch;   // general.architecture
  std::string hf_name;     // general.name
  std::string default_vocab;  // file under <shared>/fixtures/vocab used when --vocab is not given
  uint32_t d_model = 0, d_ff = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, n_vocab = 0, context = 0;
  float rope_theta = 10000.0f, rms_eps = 1e-5f;
  bool qk_norm = false, qkv_bias = false, tied_output = false;
  bool llama3_rope = false;  // rope_freqs.weight: factor 8, low 1, high 4, original context 8192
};

const std::vector<ArchSpec>& arch_specs();
const ArchSpec& arch_spec(std::string_view id);  // throws Error listing the known ids

struct MakeModelOptions {
  ArchSpec spec;
  uint32_t n_layers = 1;
  GgmlType type = GgmlType::F16;  // 2D weight matrices and token_embd; norms, biases stay f32
  uint64_t seed = 0;
  std::string vocab_path;         // GGUF whose tokenizer.* keys are copied; empty: the arch default
  std::string out_path;
  int n_threads = 0;              // 0: all physical cores
};

struct MakeModelResult {
  std::string vocab_path;
  uint32_t n_vocab = 0;
  uint64_t file_bytes = 0;
  std::vector<std::string> notes;  // e.g. vocab size differs from the real model's
};

// Writes the model (streamed, tensor by tensor). Throws kvtax::Error on bad options.
MakeModelResult make_model(const MakeModelOptions& opt);

// Types make_model can write weights in.
bool make_model_supports(GgmlType t);

// llama3 rope frequency divisors (head_dim/2 values), computed as llama.cpp's converter does.
std::vector<float> llama3_rope_factors(uint32_t head_dim, float theta, float factor, float low_freq_factor,
                                       float high_freq_factor, uint32_t original_context);

// Directory of the shared vocab fixtures, or "" when none is found ($KVTAX_SHARED_DIR, then ../shared
// next to the source tree of the running binary, then ./../shared).
std::string find_vocab_dir();

}  // namespace kvtax
