// `kvtax import-recall`: the raw weights written by tools/recall/train.py become a llama GGUF.
#include <fmt/format.h>

#include <memory>

#include "cli/command.h"
#include "model/recall_import.h"

namespace {

const bool registered = kvtax::cli::add_command(
    {"import-recall", "Write a GGUF from the recall model's raw training output (tools/recall)", [](CLI::App& sub) {
       auto o = std::make_shared<kvtax::RecallImportOptions>();
       sub.add_option("raw", o->raw_path, "Raw file written by tools/recall/train.py (model.raw)")->required();
       sub.add_option("-o,--output", o->out_path, "Output GGUF path")->required();
       sub.add_option("--name", o->name, "general.name")->capture_default_str();
       sub.add_option("--context", o->context_length, "llama.context_length to record")->capture_default_str();
       sub.callback([o] {
         const auto r = kvtax::import_recall(*o);
         fmt::print("wrote {}: {} parameters, vocab {}, trained {} steps ({} bytes)\n", o->out_path, r.n_params,
                    r.n_vocab, r.step, r.file_bytes);
       });
     }});

}  // namespace
