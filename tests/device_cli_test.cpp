// --device on run, bench and serve: unknown devices and a CUDA device that is not there (or not built in) are
// clear errors before any work; without --device the CPU path runs as before.
#include <gtest/gtest.h>

#include <string>

#include "cli_test_util.h"

namespace {

using kvtax::testing::CliRun;

CliRun run(const std::string& args) { return kvtax::testing::run_kvtax(args); }

const std::string kModel = std::string(KVTAX_SOURCE_DIR) + "/models/kvtax-recall-12m.gguf";

}  // namespace

TEST(DeviceCli, UnknownDeviceIsAnError) {
  for (const char* cmd : {"run -p hi -n 1", "bench --lengths 1k --passes 1", "serve --host 203.0.113.1"}) {
    const CliRun r = run(std::string(cmd) + " -m " + kModel + " --device tpu");
    EXPECT_NE(r.status, 0) << cmd;
    EXPECT_NE(r.out.find("--device 'tpu' is unknown (devices in this build: cpu"), std::string::npos) << r.out;
  }
}

TEST(DeviceCli, CudaWithoutBackendOrDeviceSaysWhy) {
  const CliRun r = run("run -m " + kModel + " -p 'The vault code is' -n 4 --device cuda");
  if (r.status == 0) {  // a CUDA build on a machine with a GPU: it ran and reported the KV capacity
    EXPECT_NE(r.out.find("KV cache: "), std::string::npos) << r.out;
    return;
  }
  const bool not_built = r.out.find("built without the CUDA backend") != std::string::npos;
  const bool no_gpu = r.out.find("no CUDA device is visible") != std::string::npos;
  EXPECT_TRUE(not_built || no_gpu) << r.out;
}

// The host is a documentation address no machine has, so even with a GPU the server stops after its engine
// started (and said what its KV holds) instead of serving forever.
TEST(DeviceCli, ServeOnCudaWithoutBackendOrDeviceSaysWhy) {
  const CliRun r = run("serve -m " + kModel + " --device cuda --host 203.0.113.1 --port 8080");
  EXPECT_NE(r.status, 0) << r.out;
  if (r.out.find("KV cache: ") != std::string::npos) {  // a CUDA build on a machine with a GPU
    EXPECT_NE(r.out.find("cannot listen on 203.0.113.1"), std::string::npos) << r.out;
    return;
  }
  const bool not_built = r.out.find("built without the CUDA backend") != std::string::npos;
  const bool no_gpu = r.out.find("no CUDA device is visible") != std::string::npos;
  EXPECT_TRUE(not_built || no_gpu) << r.out;
}

TEST(DeviceCli, ReserveNeedsADevice) {
  const CliRun r = run("run -m " + kModel + " -p hi -n 1 --kv-reserve 1GiB");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--kv-reserve applies with --device"), std::string::npos) << r.out;
}
