// `kvtax tokenize` end to end: output format, flags and error messages.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "cli_test_util.h"
#include "gguf/gguf.h"

namespace {

using kvtax::testing::CliRun;

CliRun run(const std::string& args) { return kvtax::testing::run_kvtax("tokenize " + args); }

std::string vocab(const std::string& name) {
  return (std::filesystem::path(KVTAX_SHARED_DIR) / "fixtures" / "vocab" / ("ggml-vocab-" + name + ".gguf")).string();
}

}  // namespace

TEST(TokenizeCli, PrintsIds) {
  if (!std::filesystem::exists(vocab("llama-bpe"))) GTEST_SKIP() << "../shared absent: " << vocab("llama-bpe");
  EXPECT_EQ(run("-m " + vocab("llama-bpe") + " -p 'Hello world<|eot_id|>'").out, "128000 9906 1917 128009\n");
  EXPECT_EQ(run("-m " + vocab("llama-bpe") + " -p 'Hello world' --no-bos").out, "9906 1917\n");
  const CliRun plain = run("-m " + vocab("llama-bpe") + " -p '<|eot_id|>' --no-bos --no-parse-special");
  EXPECT_EQ(plain.status, 0);
  EXPECT_EQ(plain.out.find("128009"), std::string::npos) << plain.out;
  EXPECT_EQ(run("-m " + vocab("llama-spm") + " -p 'Hello world' --pieces").out, "1:'<s>' 15043:' Hello' 3186:' world'\n");
}

TEST(TokenizeCli, ReadsTextFile) {
  if (!std::filesystem::exists(vocab("qwen2"))) GTEST_SKIP() << "../shared absent: " << vocab("qwen2");
  const auto path = std::filesystem::temp_directory_path() / "kvtax_tokenize_cli_test.txt";
  { FILE* f = std::fopen(path.c_str(), "wb"); std::fputs("Hello world", f); std::fclose(f); }
  EXPECT_EQ(run("-m " + vocab("qwen2") + " -f " + path.string()).out, "9707 1879\n");
  std::filesystem::remove(path);
}

TEST(TokenizeCli, ClearErrors) {
  CliRun r = run("-m /nonexistent/model.gguf -p hi");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("/nonexistent/model.gguf"), std::string::npos) << r.out;

  // A valid GGUF without tokenizer metadata.
  const auto path = std::filesystem::temp_directory_path() / "kvtax_tokenize_no_vocab.gguf";
  kvtax::gguf::Writer w;
  w.set("general.architecture", kvtax::gguf::Value::of_str("llama"));
  w.write(path.string());
  r = run("-m " + path.string() + " -p hi");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("no tokenizer"), std::string::npos) << r.out;
  std::filesystem::remove(path);

  r = run("-m " + path.string());
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("-p TEXT or -f FILE"), std::string::npos) << r.out;
}
