#pragma once
// KV pages in one device allocation, handed to decoders page by page: a decoder's own reservation (run,
// bench) or a pool several decoders share (the server's KV budget).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "cuda/runtime.h"
#include "engine/device.h"
#include "kv/codecs/codec.h"

namespace kvtax::cuda {

class CudaBackend;

class CudaKvPool : public DeviceKvPool {
 public:
  // n_pages pages of one layer's page_bytes each; DeviceOutOfMemory when the device cannot hold them.
  CudaKvPool(CudaBackend& b, kv::CodecId codec, size_t n_pages);
  ~CudaKvPool() override;
  CudaKvPool(const CudaKvPool&) = delete;
  CudaKvPool& operator=(const CudaKvPool&) = delete;

  size_t bytes() const override { return pool_.bytes(); }
  size_t bytes_free() const override { return free_.size() * page_bytes_; }
  size_t bytes_for(size_t tokens) const override;
  size_t capacity_tokens() const override;

  kv::CodecId codec() const { return codec_; }
  size_t page_bytes() const { return page_bytes_; }
  size_t pages() const { return n_pages_; }
  size_t pages_free() const { return free_.size(); }
  const uint8_t* data() const { return pool_.as<uint8_t>(); }
  uint8_t* data() { return pool_.as<uint8_t>(); }
  // A free page's index (the caller checked pages_free()); give() returns one.
  int32_t take();
  void give(int32_t page);

 private:
  CudaBackend& b_;
  kv::CodecId codec_;
  size_t page_bytes_ = 0, n_pages_ = 0;
  int layers_ = 0;
  Buffer pool_;
  std::vector<int32_t> free_;  // a stack: a fresh pool hands out 0, 1, 2, ...
};

}  // namespace kvtax::cuda
