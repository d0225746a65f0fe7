// `kvtax make-model`: a random-weight GGUF with a real model's shapes, names and metadata.
#include <fmt/format.h>

#include <memory>

#include "cli/command.h"
#include "core/error.h"
#include "core/timer.h"
#include "model/make_model.h"

namespace {

const bool registered = kvtax::cli::add_command(
    {"make-model", "Write a random-weight GGUF with the shapes and metadata of a real model", [](CLI::App& sub) {
       struct Args {
         std::string arch, type = "f16", vocab, out;
         uint32_t layers = 2;
         uint64_t seed = 1;
         int threads = 0;
       };
       auto a = std::make_shared<Args>();
       std::string archs;
       for (const auto& s : kvtax::arch_specs()) archs += (archs.empty() ? "" : ", ") + s.id;
       sub.add_option("--arch", a->arch, "Architecture: " + archs)->required();
       sub.add_option("--layers", a->layers, "Number of transformer blocks (>= 1)")->capture_default_str();
       sub.add_option("--type", a->type, "Weight type: f32, f16, bf16, q8_0, q4_0, q4_K, q5_K, q6_K")->capture_default_str();
       sub.add_option("--seed", a->seed, "Random seed (same seed, same bytes)")->capture_default_str();
       sub.add_option("--vocab", a->vocab, "GGUF to copy tokenizer.* from (default: the shared fixture for the arch)");
       sub.add_option("--threads", a->threads, "Generator threads (0: all physical cores)");
       sub.add_option("-o,--output", a->out, "Output GGUF path")->required();
       sub.callback([a] {
         kvtax::MakeModelOptions o;
         o.spec = kvtax::arch_spec(a->arch);
         o.n_layers = a->layers;
         const auto t = kvtax::ggml_type_from_name(a->type);
         if (!t || !kvtax::make_model_supports(*t))
           kvtax::fail("--type '{}' is not one of f32, f16, bf16, q8_0, q4_0, q4_K, q5_K, q6_K", a->type);
         o.type = *t;
         o.seed = a->seed;
         o.vocab_path = a->vocab;
         o.out_path = a->out;
         o.n_threads = a->threads;
         const auto t0 = std::chrono::steady_clock::now();
         const auto r = kvtax::make_model(o);
         const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
         for (const auto& n : r.notes) fmt::print(stderr, "note: {}\n", n);
         fmt::print("wrote {}: {} {} layers {} vocab {} ({} bytes, {:.2f} GiB) in {:.2f} s\n", o.out_path, o.spec.id,
                    o.n_layers, a->type, r.n_vocab, r.file_bytes, double(r.file_bytes) / (1 << 30), s);
       });
     }});

}  // namespace
