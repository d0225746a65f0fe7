#include "cuda/kv_pool.h"

#include <fmt/format.h>

#include "core/error.h"
#include "cuda/attention.h"
#include "cuda/device_model.h"

namespace kvtax::cuda {

CudaKvPool::CudaKvPool(CudaBackend& b, kv::CodecId codec, size_t n_pages) : b_(b), codec_(codec), n_pages_(n_pages) {
  const ModelConfig& c = b.model().config();
  layers_ = int(c.n_layers);
  page_bytes_ = kv_page_bytes(codec, int(c.n_kv_heads), int(c.head_dim));
  if (n_pages > size_t(INT32_MAX)) fail("--device cuda: {} KV pages are more than a page table indexes", n_pages);
  size_t free_b = 0, total_b = 0;
  check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
  const size_t want = n_pages * page_bytes_;
  if (want > free_b)
    throw DeviceOutOfMemory(fmt::format("--device cuda: the KV reservation of {:.2f} GiB exceeds the {:.2f} GiB free "
                                        "on the device",
                                        double(want) / (1ull << 30), double(free_b) / (1ull << 30)));
  pool_ = Buffer(want);
  free_.resize(n_pages);
  for (size_t i = 0; i < n_pages; ++i) free_[i] = int32_t(n_pages - 1 - i);
  b_.account(pool_.bytes(), 0);
}

CudaKvPool::~CudaKvPool() { b_.account(0, pool_.bytes()); }

size_t CudaKvPool::bytes_for(size_t tokens) const {
  const size_t P = size_t(kv_page_tokens());
  return (tokens + P - 1) / P * size_t(layers_) * page_bytes_;
}

size_t CudaKvPool::capacity_tokens() const { return n_pages_ / size_t(layers_) * size_t(kv_page_tokens()); }

int32_t CudaKvPool::take() {
  if (free_.empty()) fail("--device cuda: the KV pool has no free page");
  const int32_t p = free_.back();
  free_.pop_back();
  return p;
}

void CudaKvPool::give(int32_t page) { free_.push_back(page); }

}  // namespace kvtax::cuda
