#pragma once
// Import of the recall model trained by tools/recall/train.py: its raw file (weights, config and tokenizer,
// layout in tools/recall/README.md) becomes a llama GGUF written through the project's GGUF writer.
#include <cstdint>
#include <string>

namespace kvtax {

struct RecallImportOptions {
  std::string raw_path;   // KVTXRAW1 file
  std::string out_path;   // GGUF to write
  std::string name = "kvtax-recall";
  uint32_t context_length = 16384;  // written as llama.context_length
};

struct RecallImportResult {
  uint64_t n_params = 0;
  uint32_t n_vocab = 0;
  uint64_t step = 0;
  uint64_t file_bytes = 0;
};

// Throws kvtax::Error naming what is wrong in a malformed raw file (magic, header, shapes, offsets).
RecallImportResult import_recall(const RecallImportOptions& opt);

}  // namespace kvtax
