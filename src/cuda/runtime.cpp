#include "cuda/runtime.h"

#include <fmt/format.h>

#include <cstdlib>
#include <mutex>
#include <unordered_set>

#include "core/error.h"
#include "engine/device.h"

namespace kvtax::cuda {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail("CUDA {}: {} ({})", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }

bool available() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    cudaGetLastError();  // clear the sticky "no device" status
    return false;
  }
  return true;
}

int sm_count() {
  int dev = 0, n = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev), "multiprocessor count");
  return n;
}

cudaError_t prefer_max_shared(const void* kernel) {
  static const bool on = [] {
    const char* e = std::getenv("KVTAX_CUDA_CARVEOUT");
    return !e || std::string(e) != "0";
  }();
  if (!on) return cudaSuccess;
  static std::mutex mu;
  static std::unordered_set<const void*> done;
  std::lock_guard<std::mutex> lock(mu);
  if (done.count(kernel)) return cudaSuccess;
  const cudaError_t e =
      cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
  if (e == cudaSuccess) done.insert(kernel);
  return e;
}

std::string device_summary() {
  int dev = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  cudaDeviceProp p{};
  check(cudaGetDeviceProperties(&p, dev), "cudaGetDeviceProperties");
  return fmt::format("{}, {} SMs, sm_{}{}, {:.1f} GiB, L2 {} MiB", p.name, p.multiProcessorCount, p.major, p.minor,
                     double(p.totalGlobalMem) / (1ull << 30), p.l2CacheSize >> 20);
}

namespace {

// The allocation, or DeviceOutOfMemory naming it when there is no memory left (that error is not sticky: the device
// stays usable); any other error as check() reports it.
void* allocate_or_throw(cudaError_t (*f)(void**, size_t), size_t bytes, const char* what, const char* none_left) {
  void* p = nullptr;
  const cudaError_t e = f(&p, bytes);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    throw DeviceOutOfMemory(fmt::format("CUDA {} of {:.3f} GiB: {}", what, double(bytes) / (1ull << 30), none_left));
  }
  check(e, what);
  return p;
}

}  // namespace

void* DeviceMemory::allocate(size_t bytes) {
  return allocate_or_throw(cudaMalloc, bytes, "cudaMalloc", "the device is out of memory");
}
void DeviceMemory::release(void* p) { cudaFree(p); }
void* PageLockedMemory::allocate(size_t bytes) {
  return allocate_or_throw(cudaMallocHost, bytes, "cudaMallocHost", "no page-locked host memory left");
}
void PageLockedMemory::release(void* p) { cudaFreeHost(p); }

void Buffer::upload(const void* src, size_t bytes, size_t offset) {
  if (offset + bytes > n_) fail("CUDA upload of {} bytes at {} overflows a {}-byte buffer", bytes, offset, n_);
  check(cudaMemcpy(static_cast<uint8_t*>(p_) + offset, src, bytes, cudaMemcpyHostToDevice), "upload");
}

void Buffer::download(void* dst, size_t bytes, size_t offset) const {
  if (offset + bytes > n_) fail("CUDA download of {} bytes at {} overflows a {}-byte buffer", bytes, offset, n_);
  check(cudaMemcpy(dst, static_cast<const uint8_t*>(p_) + offset, bytes, cudaMemcpyDeviceToHost), "download");
}

void Buffer::fill(uint8_t byte) {
  if (n_) check(cudaMemset(p_, byte, n_), "cudaMemset");
}

EventTimer::EventTimer() {
  check(cudaEventCreate(&a_), "cudaEventCreate");
  check(cudaEventCreate(&b_), "cudaEventCreate");
}

EventTimer::~EventTimer() {
  cudaEventDestroy(a_);
  cudaEventDestroy(b_);
}

void EventTimer::start(cudaStream_t s) { check(cudaEventRecord(a_, s), "cudaEventRecord"); }

float EventTimer::stop_ms(cudaStream_t s) {
  check(cudaEventRecord(b_, s), "cudaEventRecord");
  check(cudaEventSynchronize(b_), "cudaEventSynchronize");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, a_, b_), "cudaEventElapsedTime");
  return ms;
}

}  // namespace kvtax::cuda
