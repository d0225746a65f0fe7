// kvtax tokenize: text -> token ids with a GGUF file's tokenizer.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "cli/command.h"
#include "core/error.h"
#include "core/timer.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) kvtax::fail("cannot open text file '{}'", path);
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) kvtax::fail("cannot read text file '{}'", path);
  return ss.str();
}

struct Options {
  std::string model, prompt, prompt_file;
  bool no_bos = false, no_parse_special = false, pieces = false, stats = false;
};

void run(const Options& o) {
  const std::string text = o.prompt_file.empty() ? o.prompt : read_file(o.prompt_file);
  const auto file = kvtax::gguf::File::open(o.model);
  const double t0 = kvtax::now_seconds();
  const auto tok = kvtax::tok::Tokenizer::from_gguf(*file);
  const double t1 = kvtax::now_seconds();
  const auto ids = tok->encode(text, !o.no_bos, !o.no_parse_special);
  const double t2 = kvtax::now_seconds();
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) line += ' ';
    line += std::to_string(ids[i]);
    if (o.pieces) {
      line += ":'";
      line += tok->token_piece(ids[i], true);
      line += '\'';
    }
  }
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stdout);
  if (o.stats)
    std::fprintf(stderr, "tokenizer load %.3f s; %zu bytes -> %zu tokens in %.3f s (%.2f MB/s)\n", t1 - t0,
                 text.size(), ids.size(), t2 - t1, text.size() / 1e6 / std::max(t2 - t1, 1e-9));
}

const bool registered = kvtax::cli::add_command(
    {"tokenize", "Print the token ids of a text (one line, space-separated)", [](CLI::App& sub) {
       auto o = std::make_shared<Options>();
       sub.add_option("-m,--model", o->model, "GGUF file with a tokenizer")->required();
       auto* p = sub.add_option("-p,--prompt", o->prompt, "text to tokenize");
       auto* f = sub.add_option("-f,--file", o->prompt_file, "read the text from this file");
       p->excludes(f);
       sub.add_flag("--no-bos", o->no_bos, "do not add BOS/EOS even if the vocabulary asks for them");
       sub.add_flag("--no-parse-special", o->no_parse_special,
                    "treat control-token text such as <|eot_id|> as plain text");
       sub.add_flag("--pieces", o->pieces, "print id:'piece' pairs");
       sub.add_flag("--stats", o->stats, "print load and tokenization times to stderr");
       sub.callback([o, p, f] {
         if (p->count() == 0 && f->count() == 0) kvtax::fail("tokenize: give the text with -p TEXT or -f FILE");
         run(*o);
       });
     }});

}  // namespace
