#include "cuda/attention.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "cuda/attention_launch.h"
#include "cuda/codec_tables.h"
#include "cuda/paged_kv_args.h"
#include "kv/codecs/layout.h"

namespace kvtax::cuda {

namespace {

constexpr int kMinChunk = 64;  // tokens per chunk at least: shorter chunks cost more to merge than to read

int g_waves = 1;

int row_groups(const KvView& kv, int n_heads) {
  const int n_rep = n_heads / kv.n_kv_heads, rows = detail::group_rows(kv.codec);
  return (n_rep + rows - 1) / rows;
}

// Chunks per KV head: chunks are equal work, so the grid is whole waves of the blocks that fit on the
// GPU at once (no half-empty tail wave); never chunks under kMinChunk tokens.
int splits_for(const KvView& kv, int n_heads, int len) {
  static const int sms = sm_count();
  // Occupancy per (codec, head_dim, GQA group size), asked once: it is host work on every token otherwise.
  static std::mutex mu;
  static std::map<std::tuple<int, int, int>, int> cache;
  const int n_rep = std::min(n_heads / kv.n_kv_heads, detail::group_rows(kv.codec));
  int per_sm = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    const auto key = std::make_tuple(int(kv.codec), kv.head_dim, n_rep);
    if (auto it = cache.find(key); it != cache.end()) {
      per_sm = it->second;
    } else {
      check(detail::decode_blocks_per_sm(kv.codec, kv.head_dim, n_rep, &per_sm), "decode attention occupancy");
      cache[key] = per_sm;
    }
  }
  const int slots = std::max(1, per_sm) * sms * g_waves;
  const int target = std::max(1, slots / (kv.n_kv_heads * row_groups(kv, n_heads)));
  const int max_by_len = std::max(1, (len + kMinChunk - 1) / kMinChunk);
  return std::min(target, max_by_len);
}

void check_heads(const KvView& kv, int n_heads) {
  if (n_heads <= 0 || n_heads % kv.n_kv_heads != 0)
    fail("CUDA attention: {} query heads is not a multiple of {} KV heads", n_heads, kv.n_kv_heads);
}

}  // namespace

void set_decode_waves(int waves) {
  if (waves < 1 || waves > 64) fail("CUDA attention: {} waves out of range 1..64", waves);
  g_waves = waves;
}

bool decode_supported(kv::CodecId codec, int head_dim) {
  return int(codec) < kv::kNumCodecs && (head_dim == 64 || head_dim == 128 || head_dim == 256);
}

int kv_page_tokens() { return detail::kPageTokens; }

size_t kv_page_bytes(kv::CodecId codec, int n_kv_heads, int head_dim) {
  return 2 * size_t(n_kv_heads) * detail::kPageTokens * kv::layout::row_bytes(codec, head_dim);
}

DeviceKv::DeviceKv(kv::CodecId codec, int n_kv_heads, int head_dim, int capacity)
    : codec_(codec), n_kv_heads_(n_kv_heads), head_dim_(head_dim) {
  if (!decode_supported(codec, head_dim))
    fail("CUDA attention: no kernel for KV codec {} with head_dim {} (supported: 64, 128, 256)",
         kv::codec(codec).name, head_dim);
  if (n_kv_heads <= 0 || n_kv_heads > 1024) fail("CUDA KV: {} KV heads out of range 1..1024", n_kv_heads);
  if (capacity <= 0 || capacity > (1 << 26)) fail("CUDA KV: capacity {} tokens out of range 1..2^26", capacity);
  row_bytes_ = kv::layout::row_bytes(codec, head_dim);
  if (row_bytes_ != kv::codec(codec).row_bytes(head_dim) || row_bytes_ % 4 != 0)
    fail("CUDA KV: codec {} row of {} bytes does not match the CPU format", kv::codec(codec).name, row_bytes_);
  const int n_pages = (capacity + detail::kPageTokens - 1) / detail::kPageTokens;
  capacity_ = n_pages * detail::kPageTokens;
  page_bytes_ = kv_page_bytes(codec, n_kv_heads, head_dim);
  pool_ = Buffer(size_t(n_pages) * page_bytes_);
  std::vector<int32_t> ids(static_cast<size_t>(n_pages));
  for (int i = 0; i < n_pages; ++i) ids[size_t(i)] = i;
  pages_ = Buffer(ids.size() * 4);
  pages_.upload(ids.data(), ids.size() * 4);
}

KvView DeviceKv::view() const {
  return KvView{codec_, n_kv_heads_, head_dim_, len_, row_bytes_, page_bytes_, pool_.as<uint8_t>(),
                pages_.as<int32_t>(), capacity_};
}

void DeviceKv::write_rows(int h, int pos, int n, const uint8_t* k_rows, const uint8_t* v_rows) {
  if (h < 0 || h >= n_kv_heads_ || pos < 0 || n < 0 || int64_t(pos) + n > capacity_)
    fail("CUDA KV: rows {}..{} of head {} outside capacity {} x {} heads", pos, int64_t(pos) + n, h, capacity_,
         n_kv_heads_);
  const size_t head_stride = size_t(detail::kPageTokens) * row_bytes_;
  const size_t v_off = size_t(n_kv_heads_) * head_stride;
  for (int i = 0; i < n;) {  // one run per page
    const int t = pos + i, in_page = t % detail::kPageTokens;
    const int m = std::min(n - i, detail::kPageTokens - in_page);
    const size_t off = size_t(t / detail::kPageTokens) * page_bytes_ + size_t(h) * head_stride +
                       size_t(in_page) * row_bytes_;
    pool_.upload(k_rows + size_t(i) * row_bytes_, size_t(m) * row_bytes_, off);
    pool_.upload(v_rows + size_t(i) * row_bytes_, size_t(m) * row_bytes_, off + v_off);
    i += m;
  }
  len_ = std::max(len_, pos + n);
}

void DeviceKv::set_len(int len) {
  if (len < 0 || len > capacity_) fail("CUDA KV: length {} outside capacity {}", len, capacity_);
  len_ = len;
}

void DeviceKv::copy_from(const KvCache& c, int layer) {
  const KvShape& sh = c.shape();
  if (sh.n_kv_heads != n_kv_heads_ || sh.head_dim != head_dim_)
    fail("CUDA KV: cache has {} KV heads of {}, device KV {} of {}", sh.n_kv_heads, sh.head_dim, n_kv_heads_,
         head_dim_);
  const char* name = kv::codec(codec_).name;
  if (c.spec().k != name || c.spec().v != name || c.policy().window != 0 || c.policy().recent != 0)
    fail("CUDA KV: cache spec '{}' is not plain {} (same K/V codec, no window or recent tier)", c.spec().str(),
         name);
  const int L = c.layer_len(layer);
  if (L > capacity_) fail("CUDA KV: cache holds {} tokens, device capacity {}", L, capacity_);
  for (int b = 0; b * KvCache::kBlockTokens < L; ++b) {
    const int n = std::min(KvCache::kBlockTokens, L - b * KvCache::kBlockTokens);
    for (int h = 0; h < n_kv_heads_; ++h) {
      const KvCache::Rows r = c.block_rows(layer, h, b);
      if (!r.k || r.k_stride != row_bytes_ || r.v_stride != row_bytes_)
        fail("CUDA KV: block {} of layer {} is missing or not in {} rows", b, layer, name);
      write_rows(h, b * KvCache::kBlockTokens, n, r.k, r.v);
    }
  }
  len_ = L;
}

size_t decode_scratch_bytes(const KvView& kv, int n_heads) {
  check_heads(kv, n_heads);
  const int s = splits_for(kv, n_heads, kv.max_len);
  return size_t(n_heads) * s * (kv.head_dim + 2) * sizeof(float);
}

int decode_splits(const KvView& kv, int n_heads) {
  check_heads(kv, n_heads);
  return splits_for(kv, n_heads, kv.len);
}

void decode_attention(const KvView& kv, const float* q, int n_heads, float* out, void* scratch,
                      cudaStream_t stream, void* out_codes, bool q_rotated) {
  check_heads(kv, n_heads);
  if (!kv.len_dev && kv.len <= 0) fail("CUDA attention: the device KV holds no tokens");
  if (!kv.len_dev && kv.len > kv.max_len)
    fail("CUDA attention: {} tokens past the {} the pages cover", kv.len, kv.max_len);
  detail::DecodeArgs a{};
  static_cast<detail::PagedKvArgs&>(a) = detail::paged_kv_args(kv, n_heads, q, out);
  a.len = kv.len;
  if (kv.len_dev) {
    a.len_dev = kv.len_dev;
    a.n_splits = splits_for(kv, n_heads, kv.max_len);
  } else {
    a.n_splits = splits_for(kv, n_heads, a.len);
    const int align = detail::kChunkAlign;
    a.chunk = ((a.len + a.n_splits - 1) / a.n_splits + align - 1) / align * align;
    a.n_splits = (a.len + a.chunk - 1) / a.chunk;  // every chunk non-empty
  }
  a.part = static_cast<float*>(scratch);
  a.signs = codec_tables().signs.as<float>();
  a.q_rotated = q_rotated && kv::layout::rotated(kv.codec);
  if (out_codes) a.codes = detail::gemv_quant_x(out_codes, int64_t(n_heads) * kv.head_dim);
  check(detail::launch_decode(a, stream), "decode attention launch");
}

}  // namespace kvtax::cuda
