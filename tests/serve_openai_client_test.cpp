// `kvtax serve` as a separate process, driven by the official `openai` npm client (streaming and not),
// then stopped with SIGTERM. Skips when node or the package is missing (scripts/install_deps.sh installs
// both; the package lives in $KVTAX_NPM_DIR or ~/.cache/kvtax/npm).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "serve_test_util.h"

using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string npm_dir() {
  if (const char* d = std::getenv("KVTAX_NPM_DIR")) return d;
  if (const char* h = std::getenv("HOME")) return std::string(h) + "/.cache/kvtax/npm";
  return "";
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST(ServeOpenAiClient, StreamingAndNotThenSigterm) {
  if (std::system("node --version >/dev/null 2>&1") != 0) GTEST_SKIP() << "node is not installed";
  const std::string npm = npm_dir();
  if (npm.empty() || !fs::exists(fs::path(npm) / "node_modules/openai/package.json"))
    GTEST_SKIP() << "the openai npm package is not in " << npm << " (scripts/install_deps.sh installs it)";
  const std::string model = kvtax::testing::make_tiny_model("openai");
  const fs::path log = fs::temp_directory_path() / ("kvtax-serve-" + std::to_string(getpid()) + ".log");
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::freopen(log.c_str(), "w", stderr);
    execl(KVTAX_BINARY, KVTAX_BINARY, "serve", "-m", model.c_str(), "--port", "0", "--ctx", "1024", "-t", "2",
          "--name", "tiny", static_cast<char*>(nullptr));
    _exit(127);
  }
  int port = 0;
  const std::regex re("listening on http://127\\.0\\.0\\.1:([0-9]+)/v1");
  for (int i = 0; i < 1200 && port == 0; ++i) {  // up to 60 s: a busy machine starts it slowly
    std::smatch m;
    const std::string text = slurp(log);
    if (std::regex_search(text, m, re)) port = std::stoi(m[1]);
    else std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (port == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    FAIL() << "kvtax serve did not start: " << slurp(log);
  }
  const fs::path out = fs::temp_directory_path() / ("kvtax-openai-" + std::to_string(getpid()) + ".json");
  const std::string cmd = "NODE_PATH='" + npm + "/node_modules' node '" KVTAX_SOURCE_DIR "/tests/data/openai_client.cjs' " +
                          "http://127.0.0.1:" + std::to_string(port) + "/v1 > '" + out.string() + "'";
  const int rc = std::system(cmd.c_str());
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_EQ(rc, 0) << slurp(out) << slurp(log);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << slurp(log);
  EXPECT_NE(slurp(log).find("shutting down"), std::string::npos);

  const json j = json::parse(slurp(out));
  EXPECT_EQ(j["whole"]["object"], "chat.completion");
  EXPECT_EQ(j["whole"]["role"], "assistant");
  EXPECT_EQ(j["whole"]["finish"], "length");
  EXPECT_EQ(j["whole"]["usage"]["completion_tokens"], 6);
  EXPECT_GT(j["whole"]["usage"]["prompt_tokens"].get<int>(), 10);
  EXPECT_EQ(j["stream"]["content"], j["whole"]["content"]);
  EXPECT_EQ(j["stream"]["finish"], "length");
  EXPECT_EQ(j["stream"]["usage"]["completion_tokens"], 6);
  // The streamed request repeats the first one's prompt: all but its last token come from the cache.
  EXPECT_EQ(j["stream"]["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(),
            j["whole"]["usage"]["prompt_tokens"].get<int>() - 1);
  EXPECT_GE(j["stream"]["chunks"].get<int>(), 3);
  EXPECT_EQ(j["completion"]["object"], "text_completion");
  EXPECT_EQ(j["completion"]["usage"]["completion_tokens"], 4);
  EXPECT_EQ(j["error"]["status"], 404);
  EXPECT_EQ(j["models"], json::array({"tiny"}));
  fs::remove(out);
  fs::remove(log);
  fs::remove(model);
}
