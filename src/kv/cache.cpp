#include "kv/cache.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "kv/rotation.h"

#include <sys/mman.h>

namespace kvtax {

namespace {

// Large blocks start on a 2 MiB boundary and ask for transparent huge pages: attention streams the whole
// cache every token, and with 4 KiB pages every 64 cache lines cost a TLB walk and stop the prefetchers.
uint8_t* alloc_block(size_t bytes) {
  constexpr size_t kHuge = size_t(2) << 20;
  const size_t align = bytes >= kHuge / 2 ? kHuge : 64;
  void* p = nullptr;
  if (posix_memalign(&p, align, (bytes + 63) / 64 * 64) != 0) fail("KV cache: out of memory allocating a {}-byte block", bytes);
  if (align == kHuge) madvise(p, bytes / kHuge * kHuge, MADV_HUGEPAGE);
  return static_cast<uint8_t*>(p);
}

}  // namespace


namespace {

constexpr size_t kPad = 64;  // slack after a block so 32-byte SIMD loads near its end stay inside

const kv::CodecInfo& lookup(const std::string& name) {
  const kv::CodecInfo* c = kv::find_codec(name);
  if (!c) fail("unknown KV codec '{}'", name);
  return *c;
}

void check_shape(const KvShape& s) {
  if (s.n_layers <= 0 || s.n_kv_heads <= 0 || s.head_dim <= 0 || s.n_layers > 4096 || s.n_kv_heads > 4096)
    fail("bad KV shape: layers {}, kv heads {}, head_dim {}", s.n_layers, s.n_kv_heads, s.head_dim);
}

struct Sizes {
  size_t cold, hot;
  bool tiered;
};

Sizes sizes(const KvShape& s, const KvSpec& spec) {
  const auto& kc = lookup(spec.k);
  const auto& vc = lookup(spec.v);
  const size_t per = size_t(s.n_layers) * s.n_kv_heads * KvCache::kBlockTokens;
  const size_t cold = per * (kc.row_bytes(s.head_dim) + vc.row_bytes(s.head_dim)) + kPad;
  const size_t hot = per * 2 * (size_t(s.head_dim) * 2) + kPad;
  return {cold, hot, spec.policy.recent > 0};
}

}  // namespace

size_t KvCache::bytes_needed(const KvShape& s, const KvSpec& spec, size_t tokens, int max_chunk) {
  check_shape(s);
  const Sizes z = sizes(s, spec);
  const size_t B = kBlockTokens, c = size_t(std::max(max_chunk, 1));
  const size_t nb = (tokens + B - 1) / B;
  size_t live = nb;
  const auto& p = spec.policy;
  // Live blocks: every sink block plus those overlapping the last W-1 committed positions and the
  // chunk being appended (eviction happens at commit).
  if (p.window > 0) live = std::min(nb, (size_t(p.sinks) + B - 1) / B + (size_t(p.window) - 1 + c + B - 1) / B + 1);
  size_t hot = 0, transient = 0;
  if (z.tiered) {
    hot = std::min(live, (size_t(p.recent) + c + B - 1) / B + 1);
    transient = nb > hot ? z.cold : 0;  // a block is transcoded into a fresh cold block before the hot one goes
  }
  return hot * z.hot + (live - hot) * z.cold + transient;
}

size_t KvCache::capacity(const KvShape& s, const KvSpec& spec, size_t reservation, int max_chunk) {
  check_shape(s);
  const Sizes z = sizes(s, spec);
  const auto& p = spec.policy;
  if (p.window == 0 && !z.tiered) return reservation / z.cold * kBlockTokens;
  const size_t huge = size_t(1) << 40;
  if (bytes_needed(s, spec, huge, max_chunk) <= reservation) return std::numeric_limits<size_t>::max();
  size_t lo = 0, hi = huge;  // bytes_needed is monotone in tokens
  while (lo < hi) {
    const size_t mid = lo + (hi - lo + 1) / 2;
    if (bytes_needed(s, spec, mid, max_chunk) <= reservation) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

KvCache::KvCache(const KvShape& s, const KvSpec& spec, size_t max_tokens, int max_chunk)
    : shape_(s), spec_(spec), kc_(&lookup(spec.k)), vc_(&lookup(spec.v)), hot_(&kv::codec(kv::CodecId::f16)),
      max_chunk_(max_chunk) {
  check_shape(s);
  kv::check_head_dim(*kc_, s.head_dim);
  kv::check_head_dim(*vc_, s.head_dim);
  if (spec.policy.window < 0 || spec.policy.sinks < 0 || spec.policy.recent < 0) fail("KV policy values must be >= 0");
  if (spec.policy.sinks > 0 && spec.policy.window == 0) fail("KV policy: sinks need a window");
  if (max_tokens == 0 || max_tokens > (size_t(1) << 31)) fail("KV cache: max_tokens {} out of range", max_tokens);
  tiered_ = spec.policy.recent > 0;
  reserved_ = bytes_needed(s, spec, max_tokens, max_chunk);
  layer_len_.assign(s.n_layers, 0);
  tmp_.resize(size_t(s.head_dim) * 2);
}

KvCache::~KvCache() { clear(); }

size_t KvCache::row_bytes(bool hot, bool is_v) const {
  return (hot ? hot_ : (is_v ? vc_ : kc_))->row_bytes(shape_.head_dim);
}

size_t KvCache::block_bytes(bool hot) const {
  return size_t(shape_.n_layers) * shape_.n_kv_heads * kBlockTokens * (row_bytes(hot, false) + row_bytes(hot, true)) +
         kPad;
}

uint8_t* KvCache::rows_ptr(const Block& blk, int layer, int head, bool is_v) const {
  const size_t kr = row_bytes(blk.hot, false), vr = row_bytes(blk.hot, true);
  const size_t unit = size_t(kBlockTokens) * (kr + vr);
  return blk.data + (size_t(layer) * shape_.n_kv_heads + head) * unit + (is_v ? kBlockTokens * kr : 0);
}

KvCache::Block& KvCache::ensure_block(int b, int append_end) {
  if (size_t(b) >= blocks_.size()) blocks_.resize(b + 1);
  Block& blk = blocks_[b];
  if (blk.data) return blk;
  // Blocks already entirely older than the recent tier by the end of this append go straight to cold.
  const bool hot = tiered_ && int64_t(b + 1) * kBlockTokens > int64_t(append_end) - spec_.policy.recent;
  const size_t bytes = block_bytes(hot);
  if (used_ + bytes > reserved_)
    fail("KV cache reservation exhausted at position {}: {} bytes used + {} for a new block > {} reserved "
         "(spec {}, appends larger than {} tokens between commits need more)",
         int64_t(b) * kBlockTokens, used_, bytes, reserved_, spec_.str(), max_chunk_);
  blk.data = alloc_block(bytes);
  std::memset(blk.data + bytes - kPad, 0, kPad);
  blk.hot = hot;
  used_ += bytes;
  peak_ = std::max(peak_, used_);
  return blk;
}

void KvCache::free_block(Block& blk) {
  if (!blk.data) return;
  used_ -= block_bytes(blk.hot);
  std::free(blk.data);
  blk.data = nullptr;
}

void KvCache::append(int layer, int n, const float* k, const float* v) {
  if (layer < 0 || layer >= shape_.n_layers) fail("KV append: layer {} out of range 0..{}", layer, shape_.n_layers - 1);
  if (n <= 0) fail("KV append: token count must be positive, got {}", n);
  if (int64_t(layer_len_[layer]) + n > std::numeric_limits<int>::max() / 2) fail("KV append: position overflow");
  const int d = shape_.head_dim, H = shape_.n_kv_heads;
  const int start = layer_len_[layer], end = start + n;
  float* rk = tmp_.data();
  float* rv = tmp_.data() + d;
  for (int j = 0; j < n; ++j) {
    const int pos = start + j;
    const int b = pos / kBlockTokens, o = pos % kBlockTokens;
    Block& blk = ensure_block(b, end);
    const kv::CodecInfo& ck = blk.hot ? *hot_ : *kc_;
    const kv::CodecInfo& cv = blk.hot ? *hot_ : *vc_;
    const size_t kr = ck.row_bytes(d), vr = cv.row_bytes(d);
    for (int h = 0; h < H; ++h) {
      const float* ks = k + (size_t(j) * H + h) * d;
      const float* vs = v + (size_t(j) * H + h) * d;
      if (kc_->rotated) { kv::rotate(ks, d, rk); ks = rk; }
      if (vc_->rotated) { kv::rotate(vs, d, rv); vs = rv; }
      ck.encode(ks, d, rows_ptr(blk, layer, h, false) + o * kr);
      cv.encode(vs, d, rows_ptr(blk, layer, h, true) + o * vr);
    }
  }
  layer_len_[layer] = end;
}

void KvCache::commit(int n) {
  if (n <= 0) fail("KV commit: token count must be positive, got {}", n);
  for (int l = 0; l < shape_.n_layers; ++l)
    if (layer_len_[l] != n_past_ + n)
      fail("KV commit({}): layer {} has {} tokens appended, expected {}", n, l, layer_len_[l] - n_past_, n);
  n_past_ += n;
  apply_policy();
}

void KvCache::transcode(Block& blk) {
  const int d = shape_.head_dim;
  Block cold;
  const size_t bytes = block_bytes(false);
  if (used_ + bytes > reserved_)
    fail("KV cache reservation exhausted while moving a block to {} (used {}, reserved {})", spec_.str(), used_, reserved_);
  cold.data = alloc_block(bytes);
  std::memset(cold.data + bytes - kPad, 0, kPad);
  used_ += bytes;
  peak_ = std::max(peak_, used_);
  float* x = tmp_.data();
  const size_t hr = hot_->row_bytes(d), kr = kc_->row_bytes(d), vr = vc_->row_bytes(d);
  for (int l = 0; l < shape_.n_layers; ++l)
    for (int h = 0; h < shape_.n_kv_heads; ++h) {
      const uint8_t* hk = rows_ptr(blk, l, h, false);
      const uint8_t* hv = rows_ptr(blk, l, h, true);
      uint8_t* ck = rows_ptr(cold, l, h, false);
      uint8_t* cv = rows_ptr(cold, l, h, true);
      for (int t = 0; t < kBlockTokens; ++t) {  // rows are already in the codecs' (rotated) space
        hot_->decode(hk + t * hr, d, x);
        kc_->encode(x, d, ck + t * kr);
        hot_->decode(hv + t * hr, d, x);
        vc_->encode(x, d, cv + t * vr);
      }
    }
  free_block(blk);
  blk = cold;
}

void KvCache::apply_policy() {
  const auto& p = spec_.policy;
  for (size_t b = 0; b < blocks_.size(); ++b) {
    Block& blk = blocks_[b];
    if (!blk.data) continue;
    const int64_t first = int64_t(b) * kBlockTokens, last = first + kBlockTokens;  // [first, last)
    // Future queries are at positions >= n_past and see (pos - W, pos]: nothing below n_past - W + 1.
    if (p.window > 0 && first >= p.sinks && last <= int64_t(n_past_) - p.window + 1) {
      free_block(blk);
      continue;
    }
    if (tiered_ && blk.hot && last <= int64_t(n_past_) - p.recent) transcode(blk);
  }
}

void KvCache::clear() {
  for (auto& b : blocks_) free_block(b);
  blocks_.clear();
  n_past_ = 0;
  std::fill(layer_len_.begin(), layer_len_.end(), 0);
  used_ = 0;
}

int KvCache::reusable_prefix(int n) const {
  const auto& p = spec_.policy;
  const int64_t B = kBlockTokens;
  // A shorter prefix tightens the eviction condition, so iterate until no block below m breaks it.
  for (int m = std::clamp(n, 0, n_past_);;) {
    int ok = m;
    for (int64_t b = 0; b * B < m && ok == m; ++b) {
      const int64_t first = b * B, last = first + B;
      const Block* blk = size_t(b) < blocks_.size() ? &blocks_[size_t(b)] : nullptr;
      if (!blk || !blk->data) {
        // Evicted: fine if a fresh cache would have evicted it by m too, else stop before it.
        if (!(p.window > 0 && first >= p.sinks && last <= int64_t(m) - p.window + 1)) ok = int(first);
      } else if (tiered_ && !blk->hot && last > int64_t(m) - p.recent) {
        // Cold here but f16 in a fresh cache at m: its f16 rows are gone, and every block before it is
        // cold as well, so no shorter non-empty prefix is consistent either.
        return 0;
      }
    }
    if (ok == m) return m;
    m = ok;
  }
}

void KvCache::truncate(int n) {
  if (n < 0 || n > n_past_) fail("KV truncate({}): out of range 0..{}", n, n_past_);
  if (reusable_prefix(n) != n)
    fail("KV truncate({}): not exact under spec {} (longest exact prefix: {})", n, spec_.str(), reusable_prefix(n));
  const size_t keep = (size_t(n) + kBlockTokens - 1) / kBlockTokens;
  for (size_t b = keep; b < blocks_.size(); ++b) free_block(blocks_[b]);
  if (blocks_.size() > keep) blocks_.resize(keep);
  n_past_ = n;
  std::fill(layer_len_.begin(), layer_len_.end(), n);
}

double KvCache::bytes_per_token() const {
  return double(shape_.n_layers) * shape_.n_kv_heads * (kc_->row_bytes(shape_.head_dim) + vc_->row_bytes(shape_.head_dim));
}

int KvCache::layer_len(int layer) const {
  if (layer < 0 || layer >= shape_.n_layers) fail("KV cache: layer {} out of range", layer);
  return layer_len_[layer];
}

KvCache::Rows KvCache::block_rows(int layer, int kv_head, int block) const {
  Rows r;
  if (block < 0 || size_t(block) >= blocks_.size() || !blocks_[block].data) return r;
  const Block& blk = blocks_[block];
  r.k = rows_ptr(blk, layer, kv_head, false);
  r.v = rows_ptr(blk, layer, kv_head, true);
  r.kc = blk.hot ? hot_->id : kc_->id;
  r.vc = blk.hot ? hot_->id : vc_->id;
  r.k_stride = row_bytes(blk.hot, false);
  r.v_stride = row_bytes(blk.hot, true);
  return r;
}

bool KvCache::present(int pos) const {
  const int b = pos / kBlockTokens;
  return pos >= 0 && size_t(b) < blocks_.size() && blocks_[b].data;
}

void KvCache::read_token(int layer, int pos, int kv_head, float* k, float* v) const {
  if (layer < 0 || layer >= shape_.n_layers || kv_head < 0 || kv_head >= shape_.n_kv_heads || pos < 0 ||
      pos >= layer_len_[layer])
    fail("KV read_token: layer {} pos {} head {} out of range", layer, pos, kv_head);
  if (!present(pos)) fail("KV read_token: position {} was evicted", pos);
  const Rows r = block_rows(layer, kv_head, pos / kBlockTokens);
  const int o = pos % kBlockTokens, d = shape_.head_dim;
  kv::codec(r.kc).decode(r.k + o * r.k_stride, d, k);
  kv::codec(r.vc).decode(r.v + o * r.v_stride, d, v);
  if (kc_->rotated) kv::unrotate(k, d, k);
  if (vc_->rotated) kv::unrotate(v, d, v);
}

}  // namespace kvtax
