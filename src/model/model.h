#pragma once
// A loaded model: config, weights viewed in place in the mmapped GGUF, tokenizer.
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "model/config.h"
#include "ops/cpu/matmul.h"

namespace kvtax {

namespace tok { class Tokenizer; }

struct LayerWeights {
  const float* attn_norm = nullptr;
  Weight wq, wk, wv, wo;
  const float *bq = nullptr, *bk = nullptr, *bv = nullptr;  // qwen2
  const float *q_norm = nullptr, *k_norm = nullptr;         // qwen3, [head_dim]
  const float* ffn_norm = nullptr;
  Weight w_gate, w_up, w_down;
};

class Model {
 public:
  // Throws kvtax::Error for unsupported architectures, tensor types or shapes, naming the tensor.
  static std::unique_ptr<Model> load(const std::string& path);
  ~Model();

  const ModelConfig& config() const { return config_; }
  const tok::Tokenizer& tokenizer() const { return *tokenizer_; }
  const gguf::File& file() const { return *file_; }
  const std::vector<LayerWeights>& layers() const { return layers_; }
  const Weight& token_embd() const { return token_embd_; }
  const Weight& output() const { return output_; }
  const float* output_norm() const { return output_norm_; }
  const float* rope_freqs() const { return rope_freqs_; }
  size_t weight_bytes() const { return weight_bytes_; }

 private:
  Model() = default;
  std::unique_ptr<gguf::File> file_;
  ModelConfig config_;
  std::unique_ptr<tok::Tokenizer> tokenizer_;
  std::vector<LayerWeights> layers_;
  Weight token_embd_{}, output_{};
  const float* output_norm_ = nullptr;
  const float* rope_freqs_ = nullptr;
  size_t weight_bytes_ = 0;
};

}  // namespace kvtax
