#pragma once
// What the scheduler steps: sequences with their own KV on one engine, the CPU ForwardPass or a device.
// The scheduler (admission, KV budget, prefix cache, cancellation) is the same over either.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kv/cache.h"
#include "model/decoder.h"

namespace kvtax {
class DeviceBackend;
class Model;
}  // namespace kvtax

namespace kvtax::serve {

struct SchedulerConfig;

// One sequence's KV cache on an engine.
class EngineSeq {
 public:
  virtual ~EngineSeq() = default;
  virtual size_t bytes_used() const = 0;  // KV bytes held now
  virtual int n_past() const = 0;
  virtual void clear() = 0;
  virtual void truncate(int n) = 0;  // exact for n <= reusable() of a prompt
  // Tokens of `prompt` this cache (holding `cached`, its token at each position) can keep.
  virtual int reusable(const std::vector<int32_t>& cached, const std::vector<int32_t>& prompt) const = 0;
  // Where this sequence's eval writes one row of logits fastest (Decoder::logits_row), or nullptr.
  virtual float* logits_row() { return nullptr; }
};

// One sequence's share of a step: n tokens at positions seq->n_past() .., the last one's logits out.
struct EngineRows {
  EngineSeq* seq = nullptr;
  const int32_t* tokens = nullptr;
  int n = 0;
  float* logits = nullptr;
  // Set only by an engine that picks() (Generation::pick): the engine writes the picked token to *picked instead of
  // the logits.
  std::optional<TokenPick> pick;
  int32_t* picked = nullptr;
};

class StepEngine {
 public:
  virtual ~StepEngine() = default;
  virtual size_t budget() const = 0;     // KV bytes all sequences share
  virtual int max_context() const = 0;   // tokens one sequence may hold (the context, capped by the budget)
  virtual size_t bytes_needed(size_t tokens) const = 0;  // KV bytes a sequence of `tokens` holds at most
  // True when a step runs all its sequences in one forward pass (weights read once); false when the
  // sequences are run one after another.
  virtual bool batched() const = 0;
  // True when eval() honours EngineRows::pick (Decoder::eval_pick). Asked before a sequence's pick is taken, since
  // taking it draws from the sequence's sampler.
  virtual bool picks() const { return false; }
  virtual std::string describe() const = 0;  // for the startup line
  // A new sequence (the scheduler makes `parallel` of them at start).
  virtual std::unique_ptr<EngineSeq> sequence() = 0;
  // Evaluates every row; each sequence appears at most once.
  virtual void eval(std::span<const EngineRows> rows) = 0;
};

// The CPU engine: one ForwardPass batching every row of a step; KvCache per sequence.
std::unique_ptr<StepEngine> cpu_engine(const Model& m, const SchedulerConfig& c);
// A device engine: the backend's weights, one DeviceDecoder per sequence taking its pages from one shared
// pool of the budget, stepped one sequence after another. Throws kvtax::Error (DeviceOutOfMemory when the
// device is short of memory) before serving.
std::unique_ptr<StepEngine> device_engine(DeviceBackend& dev, const SchedulerConfig& c);

}  // namespace kvtax::serve
