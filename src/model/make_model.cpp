// Synthetic models of real shapes. Weight scales keep the residual stream sane through many layers:
//   token_embd        N(0, 1)                     residual starts at RMS ~1
//   q/k/v/gate/up     N(0, 1/sqrt(fan_in))        outputs have RMS ~1 given a normed input
//   attn_output, ffn_down  N(0, 1/sqrt(fan_in * 2 * n_layers))
//                                                 each of the 2L residual updates adds variance ~1/(2L),
//                                                 so the residual RMS stays O(1) at any depth
//   output            N(0, 1/sqrt(d_model))       logits of RMS ~1
//   norms             1 + 0.02 N(0, 1);  biases 0.02 N(0, 1)
#include "model/make_model.h"

#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/find_upward.h"
#include "tokenizer/byte_alphabet.h"
#include "core/f16.h"
#include "core/thread_pool.h"
#include "ggml/quants.h"
#include "gguf/gguf.h"
#include "model/synthetic_weights.h"

namespace kvtax {
namespace {

namespace fs = std::filesystem;
using gguf::Value;

enum class Init { embed, proj, out_proj, lm_head, norm, bias };

// llama.cpp's file type ids (LLAMA_FTYPE_*) for the weight types we write.
uint32_t file_type_id(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return 0;
    case GgmlType::F16: return 1;
    case GgmlType::Q4_0: return 2;
    case GgmlType::Q8_0: return 7;
    case GgmlType::BF16: return 32;
    case GgmlType::Q4_K: return 14;  // Q4_K_S: every matrix q4_K
    case GgmlType::Q5_K: return 16;  // Q5_K_S
    case GgmlType::Q6_K: return 18;
    default: fail("make-model: no file type for {}", ggml_type_name(t));
  }
}

struct Job {
  const MakeModelOptions& opt;
  ThreadPool& pool;
  gguf::Writer& w;

  void random(const std::string& name, GgmlType type, std::vector<uint64_t> ne, Init init, uint64_t fan_in) {
    const uint64_t n0 = ne[0];
    if (n0 % ggml_traits(type).block_size)
      fail("make-model: tensor '{}' row length {} is not a multiple of the {} block size", name, n0,
           ggml_type_name(type));
    float scale = 1.0f, offset = 0.0f;
    switch (init) {
      case Init::embed: break;
      case Init::proj: scale = float(1.0 / std::sqrt(double(fan_in))); break;
      case Init::out_proj: scale = float(1.0 / std::sqrt(double(fan_in) * 2.0 * opt.n_layers)); break;
      case Init::lm_head: scale = float(1.0 / std::sqrt(double(fan_in))); break;
      case Init::norm: scale = 0.02f, offset = 1.0f; break;
      case Init::bias: scale = 0.02f; break;
    }
    const uint64_t seed = opt.seed, hash = synth::fnv1a(name);
    const size_t row_bytes = ggml_row_bytes(type, n0);
    ThreadPool* pool_ptr = &pool;
    w.add_tensor_lazy(name, type, std::move(ne), [=](uint64_t r0, uint64_t r1, uint8_t* dst) {
      std::vector<std::vector<float>> bufs(pool_ptr->size(), std::vector<float>(n0));
      pool_ptr->parallel_for(int64_t(r1 - r0), [&](int64_t b, int64_t e, int tid) {
        float* x = bufs[tid].data();
        for (int64_t i = b; i < e; ++i) {
          uint64_t s = synth::row_state(seed, hash, r0 + uint64_t(i));
          for (uint64_t k = 0; k < n0; ++k) x[k] = offset + scale * synth::normal(s);
          uint8_t* out = dst + size_t(i) * row_bytes;
          switch (type) {
            case GgmlType::F32: std::memcpy(out, x, n0 * 4); break;
            case GgmlType::F16:
              for (uint64_t k = 0; k < n0; ++k) {
                const uint16_t h = f32_to_f16(x[k]);
                std::memcpy(out + 2 * k, &h, 2);
              }
              break;
            case GgmlType::BF16:
              for (uint64_t k = 0; k < n0; ++k) {
                const uint16_t h = f32_to_bf16(x[k]);
                std::memcpy(out + 2 * k, &h, 2);
              }
              break;
            default: quantize_row(type, x, out, int64_t(n0));
          }
        }
      });
    });
  }
};

void set_metadata(gguf::Writer& w, const MakeModelOptions& opt) {
  const ArchSpec& s = opt.spec;
  const std::string a = s.gguf_arch + ".";
  w.set("general.architecture", Value::of_str(s.gguf_arch));
  w.set("general.type", Value::of_str("model"));
  w.set("general.name", Value::of_str(s.hf_name + " (kvtax synthetic)"));
  w.set(a + "block_count", Value::of_u32(opt.n_layers));
  w.set(a + "context_length", Value::of_u32(s.context));
  w.set(a + "embedding_length", Value::of_u32(s.d_model));
  w.set(a + "feed_forward_length", Value::of_u32(s.d_ff));
  w.set(a + "attention.head_count", Value::of_u32(s.n_heads));
  w.set(a + "attention.head_count_kv", Value::of_u32(s.n_kv_heads));
  w.set(a + "rope.freq_base", Value::of_f32(s.rope_theta));
  w.set(a + "attention.layer_norm_rms_epsilon", Value::of_f32(s.rms_eps));
  w.set(a + "attention.key_length", Value::of_u32(s.head_dim));
  w.set(a + "attention.value_length", Value::of_u32(s.head_dim));
  if (s.gguf_arch == "llama") w.set(a + "rope.dimension_count", Value::of_u32(s.head_dim));
  w.set("general.file_type", Value::of_u32(file_type_id(opt.type)));
  w.set("general.quantization_version", Value::of_u32(2));
  w.set("kvtax.synthetic.arch", Value::of_str(s.id));
  w.set("kvtax.synthetic.seed", Value::of_u64(opt.seed));
}

}  // namespace

gguf::Writer builtin_byte_vocab() {
  // Byte-level BPE with no merges: every byte is one token (GPT-2's byte alphabet), plus the ChatML
  // control tokens so the chat template and end-of-turn work as in real models.
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (int b = 0; b < 256; ++b) {
    tokens.emplace_back(tok::byte_to_alphabet(uint8_t(b)));
    types.push_back(1);  // normal
  }
  for (const char* s : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    tokens.emplace_back(s);
    types.push_back(3);  // control
  }
  gguf::Writer w;
  w.set("tokenizer.ggml.model", Value::of_str("gpt2"));
  w.set("tokenizer.ggml.pre", Value::of_str("gpt-2"));
  w.set("tokenizer.ggml.tokens", Value::of_strings(tokens));
  w.set("tokenizer.ggml.token_type", Value::of_i32s(types));
  w.set("tokenizer.ggml.merges", Value::of_strings({}));
  w.set("tokenizer.ggml.bos_token_id", Value::of_u32(256));
  w.set("tokenizer.ggml.eos_token_id", Value::of_u32(258));
  w.set("tokenizer.ggml.add_bos_token", Value::of_bool(false));
  w.set("tokenizer.chat_template", Value::of_str(
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
      "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"));
  return w;
}

const std::vector<ArchSpec>& arch_specs() {
  static const std::vector<ArchSpec> specs = [] {
    std::vector<ArchSpec> v;
    ArchSpec l3{"llama3-8b", "llama", "Meta-Llama-3.1-8B", "ggml-vocab-llama-bpe.gguf",
                4096, 14336, 32, 8, 128, 128256, 131072, 500000.0f, 1e-5f};
    l3.llama3_rope = true;
    v.push_back(l3);
    ArchSpec q3{"qwen3-4b", "qwen3", "Qwen3-4B", "ggml-vocab-qwen2.gguf",
                2560, 9728, 32, 8, 128, 151936, 40960, 1000000.0f, 1e-6f};
    q3.qk_norm = true;
    q3.tied_output = true;
    v.push_back(q3);
    ArchSpec q25{"qwen2.5-7b", "qwen2", "Qwen2.5-7B", "ggml-vocab-qwen2.gguf",
                 3584, 18944, 28, 4, 128, 152064, 32768, 1000000.0f, 1e-6f};
    q25.qkv_bias = true;
    v.push_back(q25);
    v.push_back(ArchSpec{"mistral-7b", "llama", "Mistral-7B-v0.3", "ggml-vocab-llama-spm.gguf",
                         4096, 14336, 32, 8, 128, 32768, 32768, 1000000.0f, 1e-5f});
    // Not a real model: small enough for a whole sweep in minutes on 2 cores, with the real head size
    // (64, so 32-value codec blocks apply) and GQA 4:1. Its byte vocabulary needs no fixture.
    v.push_back(ArchSpec{"tiny", "llama", "kvtax-tiny", std::string(kBuiltinBytes),
                         512, 1536, 8, 2, 64, 259, 32768, 500000.0f, 1e-5f});
    return v;
  }();
  return specs;
}

const ArchSpec& arch_spec(std::string_view id) {
  std::string known;
  for (const auto& s : arch_specs()) {
    if (s.id == id) return s;
    known += (known.empty() ? "" : ", ") + s.id;
  }
  fail("unknown architecture '{}' (known: {})", id, known);
}

bool make_model_supports(GgmlType t) {
  return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16 || t == GgmlType::Q8_0 ||
         t == GgmlType::Q4_0 || t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K;
}

std::vector<float> llama3_rope_factors(uint32_t head_dim, float theta, float factor, float low_freq_factor,
                                       float high_freq_factor, uint32_t original_context) {
  const double low_wavelen = original_context / low_freq_factor;
  const double high_wavelen = original_context / high_freq_factor;
  std::vector<float> out;
  for (uint32_t i = 0; i < head_dim; i += 2) {
    const double freq = 1.0 / std::pow(double(theta), double(i) / head_dim);
    const double wavelen = 2 * M_PI / freq;
    if (wavelen < high_wavelen) {
      out.push_back(1.0f);
    } else if (wavelen > low_wavelen) {
      out.push_back(factor);
    } else {  // blend between the two regimes
      const double smooth = (original_context / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
      out.push_back(float(1.0 / ((1 - smooth) / factor + smooth)));
    }
  }
  return out;
}

std::string find_vocab_dir() {
  if (const char* env = std::getenv("KVTAX_SHARED_DIR"); env && *env) {
    std::error_code ec;
    const fs::path p = fs::path(env) / "fixtures" / "vocab";
    if (fs::is_directory(p, ec)) return p.string();
  }
  return find_upward("shared/fixtures/vocab", PathKind::directory);
}

MakeModelResult make_model(const MakeModelOptions& opt) {
  const ArchSpec& s = opt.spec;
  if (opt.n_layers < 1) fail("make-model: --layers must be >= 1");
  if (!make_model_supports(opt.type))
    fail("make-model: type {} is not supported (f32, f16, bf16, q8_0, q4_0, q4_K, q5_K, q6_K)", ggml_type_name(opt.type));
  if (opt.type != GgmlType::F32 && opt.type != GgmlType::F16 && opt.type != GgmlType::BF16 &&
      !can_quantize(opt.type))
    fail("make-model: quantizing to {} is not available in this build", ggml_type_name(opt.type));
  if (opt.out_path.empty()) fail("make-model: no output path");
  if (s.n_kv_heads == 0 || s.n_heads % s.n_kv_heads) fail("make-model: bad head counts in spec '{}'", s.id);

  MakeModelResult res;
  res.vocab_path = opt.vocab_path;
  if (res.vocab_path.empty() && s.default_vocab == kBuiltinBytes) res.vocab_path = kBuiltinBytes;
  if (res.vocab_path.empty()) {
    const std::string dir = find_vocab_dir();
    if (dir.empty() || !fs::exists(fs::path(dir) / s.default_vocab))
      fail("make-model: no vocab given and the default {} was not found (set KVTAX_SHARED_DIR or pass --vocab "
           "FILE.gguf)", s.default_vocab);
    res.vocab_path = (fs::path(dir) / s.default_vocab).string();
  }
  std::unique_ptr<gguf::File> vocab;
  std::vector<uint8_t> builtin;
  if (res.vocab_path == kBuiltinBytes) {
    builtin = builtin_byte_vocab().to_bytes();
    vocab = gguf::File::parse(builtin, std::string(kBuiltinBytes));
  } else {
    vocab = gguf::File::open(res.vocab_path);
  }
  const Value* tokens = vocab->find("tokenizer.ggml.tokens");
  if (!tokens || tokens->type != gguf::ValueType::ARRAY || tokens->arr.empty())
    fail("make-model: {} has no tokenizer.ggml.tokens array", res.vocab_path);
  if (tokens->arr.size() > UINT32_MAX) fail("make-model: {}: vocabulary too large", res.vocab_path);
  res.n_vocab = uint32_t(tokens->arr.size());
  if (res.n_vocab != s.n_vocab)
    res.notes.push_back(fmt::format("vocab {} has {} tokens; {} has {}: the model uses {}", res.vocab_path,
                                    res.n_vocab, s.id, s.n_vocab, res.n_vocab));

  gguf::Writer w;
  set_metadata(w, opt);
  if (s.gguf_arch == "llama") w.set(s.gguf_arch + ".vocab_size", Value::of_u32(res.n_vocab));
  for (const auto& kv : vocab->metadata())
    if (kv.key.starts_with("tokenizer.")) w.set(kv.key, kv.value);

  ThreadPool pool(opt.n_threads);
  Job job{opt, pool, w};
  const uint64_t d = s.d_model, q = uint64_t(s.n_heads) * s.head_dim, kv = uint64_t(s.n_kv_heads) * s.head_dim;
  const GgmlType t = opt.type, f32 = GgmlType::F32;
  job.random("token_embd.weight", t, {d, res.n_vocab}, Init::embed, d);
  if (s.llama3_rope) {
    const auto f = llama3_rope_factors(s.head_dim, s.rope_theta, 8.0f, 1.0f, 4.0f, 8192);
    std::vector<uint8_t> bytes(f.size() * 4);
    std::memcpy(bytes.data(), f.data(), bytes.size());
    w.add_tensor("rope_freqs.weight", f32, {f.size()}, std::move(bytes));
  }
  for (uint32_t l = 0; l < opt.n_layers; ++l) {
    const std::string b = fmt::format("blk.{}.", l);
    job.random(b + "attn_norm.weight", f32, {d}, Init::norm, d);
    job.random(b + "attn_q.weight", t, {d, q}, Init::proj, d);
    job.random(b + "attn_k.weight", t, {d, kv}, Init::proj, d);
    job.random(b + "attn_v.weight", t, {d, kv}, Init::proj, d);
    if (s.qkv_bias) {
      job.random(b + "attn_q.bias", f32, {q}, Init::bias, d);
      job.random(b + "attn_k.bias", f32, {kv}, Init::bias, d);
      job.random(b + "attn_v.bias", f32, {kv}, Init::bias, d);
    }
    if (s.qk_norm) {
      job.random(b + "attn_q_norm.weight", f32, {s.head_dim}, Init::norm, d);
      job.random(b + "attn_k_norm.weight", f32, {s.head_dim}, Init::norm, d);
    }
    job.random(b + "attn_output.weight", t, {q, d}, Init::out_proj, q);
    job.random(b + "ffn_norm.weight", f32, {d}, Init::norm, d);
    job.random(b + "ffn_gate.weight", t, {d, s.d_ff}, Init::proj, d);
    job.random(b + "ffn_up.weight", t, {d, s.d_ff}, Init::proj, d);
    job.random(b + "ffn_down.weight", t, {s.d_ff, d}, Init::out_proj, s.d_ff);
  }
  job.random("output_norm.weight", f32, {d}, Init::norm, d);
  if (!s.tied_output) job.random("output.weight", t, {d, res.n_vocab}, Init::lm_head, d);

  w.write(opt.out_path);
  res.file_bytes = fs::file_size(opt.out_path);
  return res;
}

}  // namespace kvtax
