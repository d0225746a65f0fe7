#pragma once
// Paged KV cache. Tokens live in blocks of kBlockTokens positions; one block holds every layer and KV
// head for its positions: [layer][kv_head] { K rows [kBlockTokens][k_row], V rows [kBlockTokens][v_row] }.
// Blocks are allocated on demand and charged against a byte reservation; exceeding it throws.
//
// Policies (K and V codecs are chosen separately):
//  - unbounded: every token kept.
//  - window W + sinks S (StreamingLLM): the query at position p attends to positions < S and to
//    (p - W, p]. K is stored after RoPE with each token's ORIGINAL position, so scores keep the true
//    relative distances (no re-rotation; relative distances larger than the trained context can occur
//    for the sinks). Blocks with no sink whose positions all fall below every future query's window
//    are freed at commit.
//  - recent N (KIVI-style tiers): blocks overlapping the most recent N positions are kept in f16; a
//    block is transcoded into the chosen codecs once all its positions are older than the last N
//    (block granularity: between N and N + kBlockTokens - 1 tokens stay in f16).
// Rotated codecs (q4r, tq4, tq3): rows hold R*x (kv/rotation.h), and so do the f16 rows of the recent
// tier, so one rotated query serves every block.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kv/codecs/codec.h"

namespace kvtax {

struct KvShape { int n_layers, n_kv_heads, head_dim; };
struct KvPolicy { int window = 0; int sinks = 0; int recent = 0; };  // window 0 = unbounded
struct KvSpec {
  std::string k = "f16", v = "f16";
  KvPolicy policy;
  std::string str() const;  // canonical form, parseable by parse_kv_spec
};

// "q8" (both), "q8/q4" (K/V), options after commas: k=, v=, window=, sinks=, recent=.
// e.g. "q8,window=4096,sinks=4", "k=q8,v=q4,recent=128". Throws kvtax::Error on anything unknown.
KvSpec parse_kv_spec(std::string_view s);

class KvCache {
 public:
  static constexpr int kBlockTokens = 256;
  static constexpr int kDefaultMaxChunk = 512;  // largest append between commits the reservation plans for

  // Reserves bytes_needed(max_tokens) (allocated lazily, block by block).
  KvCache(const KvShape&, const KvSpec&, size_t max_tokens, int max_chunk = kDefaultMaxChunk);
  ~KvCache();
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  int n_past() const { return n_past_; }
  // Append n tokens of one layer: k, v are [n][n_kv_heads*head_dim] f32 (K after RoPE). Call for every
  // layer with the same n, then commit(n) once after the last layer.
  void append(int layer, int n, const float* k, const float* v);
  void commit(int n);
  void clear();
  // Drops every token from position n on (0 <= n <= n_past; also discards appends not yet committed), so
  // the cache continues as if only the first n tokens had been committed. Throws unless
  // reusable_prefix(n) == n: a truncated cache must hold exactly what a fresh one would after n tokens.
  void truncate(int n);
  // The largest m <= n (and <= n_past) for which truncate(m) is exact. Window+sinks: the blocks a query at
  // m would still see must not have been evicted. recent=N tiers: blocks already moved to the cold codecs
  // cannot be restored to f16, so they must be old enough to be cold after m tokens too (else m = 0).
  int reusable_prefix(int n) const;

  size_t bytes_used() const { return used_; }
  size_t bytes_reserved() const { return reserved_; }
  size_t peak_bytes_used() const { return peak_; }
  double bytes_per_token() const;  // steady state, in the chosen codecs
  // Largest token count whose peak fits `reservation_bytes`; SIZE_MAX when the policy plateaus below it.
  static size_t capacity(const KvShape&, const KvSpec&, size_t reservation_bytes, int max_chunk = kDefaultMaxChunk);
  // Upper bound of the bytes a cache holding `tokens` tokens ever has live (exact for unbounded, untiered).
  static size_t bytes_needed(const KvShape&, const KvSpec&, size_t tokens, int max_chunk = kDefaultMaxChunk);

  // ---- read side (attention, tests)
  const KvShape& shape() const { return shape_; }
  const KvSpec& spec() const { return spec_; }
  const KvPolicy& policy() const { return spec_.policy; }
  int layer_len(int layer) const;          // tokens appended to this layer so far (>= n_past)
  bool k_rotated() const { return kc_->rotated; }
  bool v_rotated() const { return vc_->rotated; }
  struct Rows {
    const uint8_t* k = nullptr;  // nullptr: block not present (evicted)
    const uint8_t* v = nullptr;
    kv::CodecId kc{}, vc{};
    size_t k_stride = 0, v_stride = 0;
  };
  Rows block_rows(int layer, int kv_head, int block) const;
  // Whether a query at position qpos attends to position kpos under the policy.
  bool visible(int64_t kpos, int64_t qpos) const {
    const auto& p = spec_.policy;
    return kpos <= qpos && (p.window == 0 || kpos < p.sinks || kpos > qpos - p.window);
  }
  // Decoded, un-rotated stored K and V of one token and head (what attention sees). Throws if evicted.
  void read_token(int layer, int pos, int kv_head, float* k, float* v) const;
  bool present(int pos) const;

 private:
  struct Block {
    uint8_t* data = nullptr;
    bool hot = false;  // f16 tier
  };
  size_t block_bytes(bool hot) const;
  size_t row_bytes(bool hot, bool is_v) const;
  Block& ensure_block(int b, int append_end);
  void free_block(Block& blk);
  void transcode(Block& blk);
  void apply_policy();
  uint8_t* rows_ptr(const Block& blk, int layer, int head, bool is_v) const;

  KvShape shape_;
  KvSpec spec_;
  const kv::CodecInfo* kc_;
  const kv::CodecInfo* vc_;
  const kv::CodecInfo* hot_;
  bool tiered_ = false;
  int max_chunk_;
  size_t reserved_ = 0, used_ = 0, peak_ = 0;
  int n_past_ = 0;
  std::vector<int> layer_len_;
  std::vector<Block> blocks_;
  std::vector<float> tmp_;
};

}  // namespace kvtax
