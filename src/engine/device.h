#pragma once
// Devices the engine can run a whole model on (--device NAME). A backend library (src/cuda) registers
// itself from main() when it was built in; kvtax_lib never links it, so the CPU build needs no device
// runtime. "cpu" is not a device here: callers keep the CPU Forward path when no --device is given.
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "core/error.h"
#include "kv/cache.h"
#include "model/decoder.h"

namespace kvtax {

class Model;

// The device could not allocate memory (servers answer 503 for it rather than 500).
struct DeviceOutOfMemory : Error {
  using Error::Error;
};

// KV pages that several decoders share (a server's KV budget): a decoder takes pages as its sequence grows
// and gives them back on reset(), truncate() and destruction.
class DeviceKvPool {
 public:
  virtual ~DeviceKvPool() = default;
  virtual size_t bytes() const = 0;                     // the reservation
  virtual size_t bytes_free() const = 0;                // pages no decoder holds
  virtual size_t bytes_for(size_t tokens) const = 0;    // pages one sequence of `tokens` takes (all layers)
  virtual size_t capacity_tokens() const = 0;           // tokens one sequence could hold with every page
};

// A decoder whose KV cache and activations live on the device.
class DeviceDecoder : public Decoder {
 public:
  virtual size_t kv_bytes_used() const = 0;      // pages holding tokens now
  virtual size_t kv_bytes_reserved() const = 0;  // the reservation
  virtual size_t kv_bytes_per_token() const = 0;
  virtual size_t capacity_tokens() const = 0;    // tokens the reservation holds
  virtual size_t scratch_bytes() const = 0;      // device activations and attention partials
  // Drops every token from position n on (0 <= n <= n_past()) and gives back the pages beyond them; the
  // device codecs keep no state across positions, so this is exact.
  virtual void truncate(int n) = 0;
  // Allocates now what the first evals would allocate lazily (prefill buffers of `max_batch` rows, GEMM
  // scratch, the decode step's graph), so a device short of memory says so before serving.
  virtual void prepare(int max_batch) = 0;
};

// A model's weights uploaded once; decoders (one per KV spec or request) share them.
class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual std::string describe() const = 0;      // device name, memory, weights
  virtual size_t weight_bytes() const = 0;       // device bytes of the uploaded weights
  // Device bytes kvtax holds now and at most since the backend was opened (weights, KV, scratch).
  virtual size_t device_bytes() const = 0;
  virtual size_t peak_device_bytes() const = 0;
  // Tokens a KV reservation of `bytes` holds for this model in `spec` (whole pages).
  virtual size_t capacity_tokens(const KvSpec& spec, size_t bytes) const = 0;
  // KV bytes (whole pages) `tokens` tokens of one sequence take in `spec`.
  virtual size_t kv_bytes_for(const KvSpec& spec, size_t tokens) const = 0;
  // KV pages for `reserve_bytes` (0: just enough for max_context tokens). Throws kvtax::Error for a KV
  // spec or size the device path cannot serve, or when the device memory is short.
  virtual std::unique_ptr<DeviceDecoder> decoder(const KvSpec& spec, int max_context, size_t reserve_bytes) = 0;
  // Pages of `bytes` for decoders to share (DeviceOutOfMemory when the device cannot hold them), and a
  // decoder of up to max_context tokens taking its pages from `pool` (made for the same spec).
  virtual std::shared_ptr<DeviceKvPool> kv_pool(const KvSpec& spec, size_t bytes) = 0;
  virtual std::unique_ptr<DeviceDecoder> shared_decoder(const KvSpec& spec, int max_context,
                                                        std::shared_ptr<DeviceKvPool> pool) = 0;
};

using DeviceFactory = std::unique_ptr<DeviceBackend> (*)(const Model& m);

void register_device(std::string name, DeviceFactory f);
// Throws kvtax::Error naming the devices this build has when `name` is not one of them.
std::unique_ptr<DeviceBackend> open_device(std::string_view name, const Model& m);
// "cpu" or a registered name (for CLI validation before a model is loaded).
void check_device_name(std::string_view name);

}  // namespace kvtax
