#pragma once
// The harness's in-process runner: each request gets a fresh KV cache in the arm's codecs and policy,
// over one loaded model and one thread pool. Requests that allow the prefix cache share one Session
// (per arm): each reuses the longest exact common prefix the previous one left in the cache.
#include <memory>
#include <string>

#include "core/thread_pool.h"
#include "engine/device.h"
#include "engine/session.h"
#include "harness/runner.h"
#include "model/model.h"
#include "tokenizer/chat_template.h"

namespace kvtax {

class LocalRunner : public harness::Runner {
 public:
  // device "cpu": the CPU Forward with prefix reuse; another name: the model on that device (engine/device.h),
  // weights uploaded once, a fresh device KV for every request. batch: prompt tokens per eval (0: kCpuPrefillChunk on
  // the CPU, the whole prompt on a device, which splits it into its own chunks).
  LocalRunner(const std::string& model_path, int threads, int batch, const std::string& device = "cpu");
  ~LocalRunner() override;
  std::string describe() const override;
  nlohmann::json model_info() const override;
  void check_arm(const harness::Arm& arm) const override;
  size_t count_prompt_tokens(const std::string& user_message) override;
  harness::GenerateResult generate(const harness::GenerateRequest& req) override;
  void on_child_start() override;

 private:
  std::vector<int32_t> prompt_tokens(const std::string& user_message) const;
  std::string path_;
  std::unique_ptr<Model> model_;
  tok::ChatTemplate chat_;
  int threads_, batch_;  // batch_: the CPU's chunk (0 given: kCpuPrefillChunk)
  int device_batch_;     // prompt tokens per device eval (0: the whole prompt)
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<Session> session_;  // the prefix cache; after pool_ so it is destroyed first
  std::string session_spec_;
  std::string device_;
  std::unique_ptr<DeviceBackend> backend_;
  std::unique_ptr<DeviceDecoder> decoder_;  // reused (reset) while the spec and context fit
  std::string decoder_spec_;
  harness::GenerateResult generate_on_device(const harness::GenerateRequest& req);
};

}  // namespace kvtax
