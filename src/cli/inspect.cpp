// `kvtax inspect FILE [--json]`: what a GGUF holds and what its KV cache will cost.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "model/config.h"

namespace {

using kvtax::gguf::File;
using kvtax::gguf::Value;
using kvtax::gguf::ValueType;

constexpr uint64_t kContexts[] = {2048, 8192, 32768, 131072};

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  return u == 0 ? fmt::format("{:.0f} B", b) : fmt::format("{:.2f} {}", b, units[u]);
}

nlohmann::json value_json(const Value& v, size_t max_items) {
  switch (v.type) {
    case ValueType::UINT8: case ValueType::UINT16: case ValueType::UINT32: case ValueType::UINT64: return v.u;
    case ValueType::INT8: case ValueType::INT16: case ValueType::INT32: case ValueType::INT64: return v.i;
    case ValueType::FLOAT32: case ValueType::FLOAT64: return v.f;
    case ValueType::BOOL: return v.b;
    case ValueType::STRING: return v.s.size() > 200 ? v.s.substr(0, 200) + "..." : v.s;  // may be invalid UTF-8
    case ValueType::ARRAY: {
      nlohmann::json a = nlohmann::json::array();
      for (size_t k = 0; k < v.arr.size() && k < max_items; ++k) a.push_back(value_json(v.arr[k], max_items));
      return a;
    }
  }
  return nullptr;
}

struct Summary {
  uint64_t weight_bytes = 0;
  std::optional<kvtax::ModelConfig> cfg;
  std::string cfg_error;
};

Summary summarize(const File& f) {
  Summary s;
  for (const auto& t : f.tensors()) s.weight_bytes += t.nbytes;
  if (!f.tensors().empty()) {
    try {
      s.cfg = kvtax::read_config(f);
    } catch (const kvtax::Error& e) {
      s.cfg_error = e.what();
    }
  }
  return s;
}

void print_text(const File& f, const Summary& s) {
  fmt::print("file: {}\nsize: {} ({} bytes)\nGGUF version: {}\nalignment: {}\ndata offset: {}\n", f.path(),
             human_bytes(double(f.file_size())), f.file_size(), f.version(), f.alignment(), f.data_offset());
  fmt::print("architecture: {}\nname: {}\n", f.get_string("general.architecture").value_or("(none)"),
             f.get_string("general.name").value_or("(none)"));
  const auto* tokens = f.find("tokenizer.ggml.tokens");
  fmt::print("tokenizer: {} (pre: {}), vocab {}\n", f.get_string("tokenizer.ggml.model").value_or("(none)"),
             f.get_string("tokenizer.ggml.pre").value_or("(none)"),
             tokens && tokens->type == ValueType::ARRAY ? std::to_string(tokens->arr.size()) : "(none)");
  if (s.cfg) {
    const auto& c = *s.cfg;
    fmt::print("\nhyper-parameters:\n");
    fmt::print("  layers {}  d_model {}  d_ff {}  heads {}  kv heads {}  head dim {}  vocab {}\n", c.n_layers,
               c.d_model, c.d_ff, c.n_heads, c.n_kv_heads, c.head_dim, c.n_vocab);
    fmt::print("  context length {}  rms eps {:g}\n", c.context_length, c.rms_eps);
    fmt::print("  rope: {}  theta {:g}  dim {}  scaling {}", rope_kind_name(c.rope_kind), c.rope_theta, c.rope_dim,
               c.rope_scaling.type);
    if (c.rope_scaling.type != "none") {
      fmt::print(" (factor {:g}", c.rope_scaling.factor);
      if (c.rope_scaling.original_context) fmt::print(", original context {}", c.rope_scaling.original_context);
      if (!c.rope_scaling.freq_factors.empty()) fmt::print(", {} per-frequency factors", c.rope_scaling.freq_factors.size());
      fmt::print(")");
    }
    fmt::print("\n  qk norm {}  qkv bias {}  tied output {}\n", c.qk_norm, c.qkv_bias, c.tied_output);
    fmt::print("\nKV cache (f16): {} per token", human_bytes(double(c.kv_bytes_per_token(2))));
    for (uint64_t n : kContexts) fmt::print(", {}k: {}", n / 1024, human_bytes(double(c.kv_bytes_per_token(2) * n)));
    fmt::print("\n");
  } else if (!s.cfg_error.empty()) {
    fmt::print("\nmodel config: not available: {}\n", s.cfg_error);
  }

  fmt::print("\nmetadata ({} keys):\n", f.metadata().size());
  for (const auto& kv : f.metadata())
    fmt::print("  {:<44} {:<4} {}\n", kv.key, value_type_name(kv.value.type), kvtax::gguf::format_value(kv.value));

  fmt::print("\ntensors ({}):\n", f.tensors().size());
  for (const auto& t : f.tensors())
    fmt::print("  {:<36} {:<7} [{}]  {}\n", t.name, ggml_type_name(t.type), fmt::join(t.ne, ", "), t.nbytes);
  fmt::print("total weight bytes: {} ({})\n", s.weight_bytes, human_bytes(double(s.weight_bytes)));
}

void print_json(const File& f, const Summary& s) {
  nlohmann::json j;
  j["file"] = f.path();
  j["file_size"] = f.file_size();
  j["version"] = f.version();
  j["alignment"] = f.alignment();
  j["data_offset"] = f.data_offset();
  if (auto a = f.get_string("general.architecture")) j["architecture"] = *a;
  if (auto n = f.get_string("general.name")) j["name"] = *n;
  if (auto m = f.get_string("tokenizer.ggml.model")) j["tokenizer"]["model"] = *m;
  if (auto p = f.get_string("tokenizer.ggml.pre")) j["tokenizer"]["pre"] = *p;
  if (const auto* t = f.find("tokenizer.ggml.tokens"); t && t->type == ValueType::ARRAY)
    j["tokenizer"]["vocab_size"] = t->arr.size();
  if (s.cfg) {
    const auto& c = *s.cfg;
    j["config"] = {{"arch", c.arch}, {"n_layers", c.n_layers}, {"d_model", c.d_model}, {"d_ff", c.d_ff},
                   {"n_heads", c.n_heads}, {"n_kv_heads", c.n_kv_heads}, {"head_dim", c.head_dim},
                   {"n_vocab", c.n_vocab}, {"context_length", c.context_length}, {"rms_eps", c.rms_eps},
                   {"rope_kind", rope_kind_name(c.rope_kind)}, {"rope_theta", c.rope_theta},
                   {"rope_dim", c.rope_dim}, {"rope_scaling", {{"type", c.rope_scaling.type},
                                                               {"factor", c.rope_scaling.factor},
                                                               {"original_context", c.rope_scaling.original_context}}},
                   {"qk_norm", c.qk_norm}, {"qkv_bias", c.qkv_bias}, {"tied_output", c.tied_output}};
    j["kv_cache_f16"]["bytes_per_token"] = c.kv_bytes_per_token(2);
    for (uint64_t n : kContexts) j["kv_cache_f16"][std::to_string(n)] = c.kv_bytes_per_token(2) * n;
  } else if (!s.cfg_error.empty()) {
    j["config_error"] = s.cfg_error;
  }
  nlohmann::json md = nlohmann::json::array();
  for (const auto& kv : f.metadata()) {
    nlohmann::json e = {{"key", kv.key}, {"type", value_type_name(kv.value.type)}};
    if (kv.value.type == ValueType::ARRAY) {
      e["elem_type"] = value_type_name(kv.value.elem_type);
      e["count"] = kv.value.arr.size();
    }
    e["value"] = value_json(kv.value, 8);
    md.push_back(std::move(e));
  }
  j["metadata"] = std::move(md);
  nlohmann::json ts = nlohmann::json::array();
  for (const auto& t : f.tensors())
    ts.push_back({{"name", t.name}, {"type", ggml_type_name(t.type)}, {"shape", t.ne}, {"offset", t.offset},
                  {"bytes", t.nbytes}});
  j["tensors"] = std::move(ts);
  j["weight_bytes"] = s.weight_bytes;
  // Tokens may be arbitrary bytes: replace invalid UTF-8 rather than failing.
  fmt::print("{}\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
}

const bool registered = kvtax::cli::add_command(
    {"inspect", "Show a GGUF file's metadata, tensors, model config and KV-cache size", [](CLI::App& sub) {
       auto path = std::make_shared<std::string>();
       auto json = std::make_shared<bool>(false);
       sub.add_option("file", *path, "GGUF file")->required();
       sub.add_flag("--json", *json, "Machine-readable output");
       sub.callback([path, json] {
         const auto f = File::open(*path);
         const Summary s = summarize(*f);
         if (*json) print_json(*f, s);
         else print_text(*f, s);
       });
     }});

}  // namespace
