#pragma once
// Architecture hyper-parameters read from GGUF metadata ("{arch}.*" keys).
#include <cstdint>
#include <string>
#include <vector>

#include "gguf/gguf.h"

namespace kvtax {

enum class RopeKind { normal, neox };  // normal: adjacent pairs (llama); neox: halves (qwen2/qwen3)

struct RopeScaling {
  std::string type = "none";  // none | linear | yarn | llama3
  float factor = 1.0f;
  float low_freq_factor = 1.0f, high_freq_factor = 4.0f;  // llama3
  uint32_t original_context = 0;                           // llama3 / yarn
  // llama3: per-frequency divisors from the rope_freqs.weight tensor (head_dim/2 values); empty otherwise.
  std::vector<float> freq_factors;
};

struct ModelConfig {
  std::string arch;            // general.architecture: llama | qwen2 | qwen3 | ...
  std::string name;            // general.name if present
  uint32_t n_layers = 0;
  uint32_t d_model = 0;        // embedding_length
  uint32_t d_ff = 0;           // feed_forward_length
  uint32_t n_heads = 0;
  uint32_t n_kv_heads = 0;
  uint32_t head_dim = 0;       // key_length (= value_length here) or d_model / n_heads
  uint32_t n_vocab = 0;
  uint32_t context_length = 0; // trained context
  float rms_eps = 1e-5f;
  float rope_theta = 10000.0f;
  uint32_t rope_dim = 0;       // rope.dimension_count (defaults to head_dim)
  RopeKind rope_kind = RopeKind::normal;
  RopeScaling rope_scaling;
  bool qk_norm = false;        // qwen3: per-head RMSNorm of q and k
  bool qkv_bias = false;       // qwen2: biases on q, k, v
  bool tied_output = false;    // no output.weight: logits use token_embd

  // Bytes of K+V for one token at the given bytes per value (f16: 2).
  uint64_t kv_bytes_per_token(double bytes_per_value) const {
    return uint64_t(2.0 * n_layers * n_kv_heads * head_dim * bytes_per_value);
  }
};

// Reads and validates the config; throws kvtax::Error on missing or inconsistent keys.
ModelConfig read_config(const gguf::File& f);

// Architectures read_config() accepts, and the rope layout llama.cpp uses for an architecture.
bool is_supported_arch(std::string_view arch);
RopeKind rope_kind_for_arch(std::string_view arch);
std::string_view rope_kind_name(RopeKind k);

}  // namespace kvtax
