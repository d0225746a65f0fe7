#pragma once
// CUDA runtime helpers: device presence, error checks that throw kvtax::Error, device memory.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace kvtax::cuda {

// True when a CUDA device can be used (false without a driver or GPU; tests skip then).
bool available();
// "NVIDIA H200, 132 SMs, sm_90, 139.8 GiB" for logs and results.
std::string device_summary();
int sm_count();
// Asks for the largest shared-memory carveout (the L1 / shared split) for `kernel`, once per kernel;
// KVTAX_CUDA_CARVEOUT=0 leaves it to the driver, which sizes it per kernel. Kernels with different splits overlapped
// less under programmatic dependent launch (pdl.cuh): H200, session 14, f16 decode attention at 2k 9.7 -> 7.9 us,
// q4r at 32k 29.1 -> 25.7, with one split for all.
cudaError_t prefer_max_shared(const void* kernel);

// Throws kvtax::Error naming `what` when e is not cudaSuccess.
void check(cudaError_t e, const char* what);
// After a kernel launch: the launch error, if any.
void check_launch(const char* kernel);

// Memory owned through an allocator A (A::allocate throws DeviceOutOfMemory when there is none), moved not copied.
template <class A>
class Owned {
 public:
  Owned() = default;
  explicit Owned(size_t bytes) : p_(bytes ? A::allocate(bytes) : nullptr), n_(bytes) {}
  ~Owned() {
    if (p_) A::release(p_);
  }
  Owned(Owned&& o) noexcept : p_(o.p_), n_(o.n_) { o.p_ = nullptr, o.n_ = 0; }
  Owned& operator=(Owned&& o) noexcept {
    if (this != &o) {
      if (p_) A::release(p_);
      p_ = o.p_, n_ = o.n_;
      o.p_ = nullptr, o.n_ = 0;
    }
    return *this;
  }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;

  void* get() const { return p_; }
  template <class T> T* as() const { return static_cast<T*>(p_); }
  size_t bytes() const { return n_; }

 protected:
  void* p_ = nullptr;
  size_t n_ = 0;
};

struct DeviceMemory {  // cudaMalloc
  static void* allocate(size_t bytes);
  static void release(void* p);
};
struct PageLockedMemory {  // cudaMallocHost
  static void* allocate(size_t bytes);
  static void release(void* p);
};

// Owned device memory.
class Buffer : public Owned<DeviceMemory> {
 public:
  using Owned::Owned;
  void upload(const void* src, size_t bytes, size_t offset = 0);
  void download(void* dst, size_t bytes, size_t offset = 0) const;
  // Every byte set to `byte` (0xff makes floats NaN: unwritten outputs show up).
  void fill(uint8_t byte);
};

// Owned page-locked host memory: the device copies into it at full speed and without the driver's staging (501 KB
// into pageable memory took 55-92 us on the H200 machine, into this 15-17 us).
using HostBuffer = Owned<PageLockedMemory>;

// Event timer around a region of one stream.
class EventTimer {
 public:
  EventTimer();
  ~EventTimer();
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;
  void start(cudaStream_t s = nullptr);
  float stop_ms(cudaStream_t s = nullptr);  // synchronizes

 private:
  cudaEvent_t a_ = nullptr, b_ = nullptr;
};

}  // namespace kvtax::cuda
