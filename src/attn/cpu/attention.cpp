#include "attn/cpu/attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "attn/cpu/loops.h"
#include "core/error.h"
#include "kv/rotation.h"

namespace kvtax {

namespace {

constexpr int kTile = 64;       // context positions per tile (divides KvCache::kBlockTokens)
constexpr int kTileRows = 64;   // query rows (positions x heads of a group) per work item
static_assert(KvCache::kBlockTokens % kTile == 0);

std::atomic<size_t> g_scratch_peak{0};
std::atomic<size_t> g_scratch_last{0};

struct Plan {
  int H, d, n_rep, L, n_q, q0;   // q0: position of the first query row
  int qt_pos, n_qt, n_ch, rows_max;
  size_t prep_cold, prep_hot;
  bool dense;  // more query rows than one pass of the loops takes: decode each K/V tile once to f32
};

// One thread's scratch; sized from the plan only (never from the context length).
struct Scratch {
  std::vector<uint8_t> bytes;
  uint8_t* prep_cold; uint8_t* prep_hot;
  float *s, *acc, *m, *l, *tmp;
  float *qf, *kd, *vd;  // dense mode: f32 query rows, decoded K and V tiles
  static size_t dense_floats(const Plan& p) {
    return p.dense ? size_t(p.rows_max) * p.d + 2 * size_t(kTile) * p.d : 0;
  }
  static size_t size(const Plan& p) {
    return size_t(p.rows_max) * (p.prep_cold + p.prep_hot) +
           4 * (size_t(p.rows_max) * (kTile + p.d + 2) + p.d + dense_floats(p)) + 256;
  }
  void setup(const Plan& p) {
    if (bytes.size() < size(p)) bytes.resize(size(p));
    uint8_t* b = bytes.data();
    prep_cold = b; b += size_t(p.rows_max) * p.prep_cold;
    prep_hot = b;  b += size_t(p.rows_max) * p.prep_hot;
    b = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(b) + 31) & ~uintptr_t(31));
    s = reinterpret_cast<float*>(b);
    acc = s + size_t(p.rows_max) * kTile;
    m = acc + size_t(p.rows_max) * p.d;
    l = m + p.rows_max;
    tmp = l + p.rows_max;
    qf = tmp + p.d;
    kd = qf + (p.dense ? size_t(p.rows_max) * p.d : 0);
    vd = kd + (p.dense ? size_t(kTile) * p.d : 0);
  }
};

thread_local Scratch t_scratch;

// Key tiles a query tile can see: [0, a1) (sinks, or everything) and [b0, b1) (window).
struct TileRanges {
  int a1, b0, b1;
  int count() const { return a1 + (b1 - b0); }
  int at(int i) const { return i < a1 ? i : b0 + (i - a1); }
};

TileRanges key_tiles(const KvPolicy& pol, int p_first, int p_last) {
  const int end = p_last / kTile + 1;
  if (pol.window == 0) return {end, end, end};
  const int w0 = std::max(0, p_first - pol.window + 1);
  const int sink_tiles = (pol.sinks + kTile - 1) / kTile;
  const int b0 = w0 / kTile;
  if (b0 <= sink_tiles) return {end, end, end};
  return {std::min(sink_tiles, end), b0, end};
}

}  // namespace

size_t attention_scratch_peak() { return g_scratch_peak.load(); }
size_t attention_scratch_last() { return g_scratch_last.load(); }

void attention(const KvCache& c, int layer, const float* q, int n_q, int n_heads, float* out, ThreadPool& pool) {
  attention_at(simd_level(), c, layer, q, n_q, n_heads, out, pool);
}

void attention_at(SimdLevel level, const KvCache& c, int layer, const float* q, int n_q, int n_heads, float* out,
                  ThreadPool& pool) {
  if (level > simd_level()) level = simd_level();
  const KvShape& sh = c.shape();
  const kv::CodecId kc_cold = kv::find_codec(c.spec().k)->id, hot = kv::CodecId::f16;
  // SIMD loops work on 16-value slices; tq4's integer K dot on 32-value blocks.
  if (sh.head_dim % 16 != 0 || (sh.head_dim % 32 != 0 && kc_cold == kv::CodecId::tq4)) level = SimdLevel::scalar;
  Plan p{};
  p.H = sh.n_kv_heads;
  p.d = sh.head_dim;
  if (n_heads <= 0 || n_heads % p.H != 0)
    fail("attention: {} query heads is not a multiple of {} KV heads", n_heads, p.H);
  p.n_rep = n_heads / p.H;
  p.L = c.layer_len(layer);
  if (n_q <= 0 || n_q > p.L) fail("attention: {} query rows but layer {} holds {} tokens", n_q, layer, p.L);
  p.n_q = n_q;
  p.q0 = p.L - n_q;
  p.qt_pos = std::max(1, kTileRows / p.n_rep);
  p.n_qt = (n_q + p.qt_pos - 1) / p.qt_pos;
  p.rows_max = std::min(p.qt_pos, n_q) * p.n_rep;
  p.dense = p.rows_max > attn::kMaxRows;
  const attn::KLoops& kl_cold = attn::k_loops(kc_cold, level);
  const attn::KLoops& kl_hot = attn::k_loops(hot, level);
  p.prep_cold = (kl_cold.prep_bytes(p.d) + 31) / 32 * 32;
  p.prep_hot = c.policy().recent > 0 ? (kl_hot.prep_bytes(p.d) + 31) / 32 * 32 : 0;
  const int nth = pool.size();
  const int target = 4 * nth;  // enough items for balance; a constant, so scratch never scales with context
  const int base_items = p.H * p.n_qt;
  p.n_ch = base_items >= target ? 1 : (target + base_items - 1) / base_items;
  const int n_items = base_items * p.n_ch;
  const size_t part_stride = size_t(p.rows_max) * (p.d + 2);  // acc[d] + m + l per row
  std::vector<float> partials(p.n_ch > 1 ? size_t(n_items) * part_stride : 0);
  {
    const size_t bytes = size_t(nth) * Scratch::size(p) + partials.size() * sizeof(float);
    g_scratch_last.store(bytes);
    size_t prev = g_scratch_peak.load();
    while (bytes > prev && !g_scratch_peak.compare_exchange_weak(prev, bytes)) {}
  }
  const attn::MathLoops& math = attn::math_loops(level);
  const attn::KLoops& kl_f32 = attn::k_loops(kv::CodecId::f32, level);
  const attn::VLoops& vl_f32 = attn::v_loops(kv::CodecId::f32, level);
  const float qscale = 1.0f / std::sqrt(float(p.d));
  const bool k_rot = c.k_rotated(), v_rot = c.v_rotated();
  const int d = p.d;
  const int stride_q = n_heads * d;
  std::atomic<int> next{0};

  pool.run([&](int, int) {
    Scratch& S = t_scratch;
    S.setup(p);
    const uint8_t* qc[kTileRows];
    const uint8_t* qh[kTileRows];
    const uint8_t* qd[kTileRows];  // dense mode: f32 rows in the f32 loops' prepared format
    float* sp[kTileRows];
    float* op[kTileRows];
    int qpos[kTileRows];
    for (;;) {
      const int item = next.fetch_add(1);
      if (item >= n_items) break;
      const int ch = item % p.n_ch, hq = item / p.n_ch;
      const int h = hq % p.H, qt = hq / p.H;
      const int i0 = qt * p.qt_pos, np = std::min(p.qt_pos, n_q - i0), rows = np * p.n_rep;
      for (int r = 0; r < rows; ++r) {
        const int pi = r / p.n_rep, g = r % p.n_rep;
        const float* src = q + size_t(i0 + pi) * stride_q + size_t(h * p.n_rep + g) * d;
        for (int i = 0; i < d; ++i) S.tmp[i] = src[i] * qscale;
        if (k_rot) kv::rotate(S.tmp, d, S.tmp);
        if (p.dense) {
          float* qr = S.qf + size_t(r) * d;
          std::memcpy(qr, S.tmp, sizeof(float) * d);
          qd[r] = reinterpret_cast<const uint8_t*>(qr);
        }
        qc[r] = S.prep_cold + size_t(r) * p.prep_cold;
        kl_cold.prep(S.tmp, d, const_cast<uint8_t*>(qc[r]));
        if (p.prep_hot) {
          qh[r] = S.prep_hot + size_t(r) * p.prep_hot;
          kl_hot.prep(S.tmp, d, const_cast<uint8_t*>(qh[r]));
        }
        sp[r] = S.s + size_t(r) * kTile;
        op[r] = S.acc + size_t(r) * d;
        std::memset(op[r], 0, sizeof(float) * d);
        S.m[r] = -std::numeric_limits<float>::infinity();
        S.l[r] = 0;
        qpos[r] = p.q0 + i0 + pi;
      }
      const int p_first = p.q0 + i0, p_last = p_first + np - 1;
      const TileRanges tr = key_tiles(c.policy(), p_first, p_last);
      const int nt = tr.count();
      const int t_begin = int(int64_t(nt) * ch / p.n_ch), t_end = int(int64_t(nt) * (ch + 1) / p.n_ch);
      for (int ti = t_begin; ti < t_end; ++ti) {
        const int k0 = tr.at(ti) * kTile;
        const int n = std::min(kTile, p.L - k0);
        if (n <= 0) continue;
        const int k_last = k0 + n - 1;
        // Fast path: every row sees every key of the tile.
        const KvPolicy& pol = c.policy();
        const bool all_visible =
            k_last <= p_first && (pol.window == 0 || k_last < pol.sinks || k0 > p_last - pol.window);
        bool any_visible = all_visible;
        for (int r = 0; r < rows && !any_visible; ++r)
          for (int t = 0; t < n && !any_visible; ++t) any_visible = c.visible(k0 + t, qpos[r]);
        if (!any_visible) continue;
        const KvCache::Rows kvr = c.block_rows(layer, h, k0 / KvCache::kBlockTokens);
        if (!kvr.k) fail("attention: KV block at position {} was evicted (call attention before commit)", k0);
        const int off = k0 % KvCache::kBlockTokens;
        const uint8_t* krows = kvr.k + size_t(off) * kvr.k_stride;
        const uint8_t* vrows = kvr.v + size_t(off) * kvr.v_stride;
        const bool is_hot = kvr.kc == hot && kc_cold != hot;
        const attn::KLoops* kl = is_hot ? &kl_hot : &kl_cold;
        const attn::VLoops* vl = &attn::v_loops(kvr.vc, level);
        const uint8_t* const* qp = is_hot ? qh : qc;
        size_t k_stride = kvr.k_stride, v_stride = kvr.v_stride;
        if (p.dense) {  // decode the tile once; all query rows of the item then run the f32 loops over it
          attn::v_loops(kvr.kc, level).decode(krows, kvr.k_stride, n, d, S.kd);
          vl->decode(vrows, kvr.v_stride, n, d, S.vd);
          krows = reinterpret_cast<const uint8_t*>(S.kd);
          vrows = reinterpret_cast<const uint8_t*>(S.vd);
          k_stride = v_stride = sizeof(float) * d;
          kl = &kl_f32;
          vl = &vl_f32;
          qp = qd;
        }
        // While K is scored, pull this tile's V rows in; while V is summed, the next tile's K rows.
        const attn::Prefetch pf_v = p.dense ? attn::Prefetch{} : attn::Prefetch{vrows, size_t(n) * v_stride};
        attn::Prefetch pf_k_next;
        if (ti + 1 < t_end && !p.dense) {
          const int k0n = tr.at(ti + 1) * kTile;
          const KvCache::Rows nr = c.block_rows(layer, h, k0n / KvCache::kBlockTokens);
          if (nr.k && k0n < p.L)
            pf_k_next = {nr.k + size_t(k0n % KvCache::kBlockTokens) * nr.k_stride,
                         size_t(std::min(kTile, p.L - k0n)) * nr.k_stride};
        }
        for (int r0 = 0; r0 < rows; r0 += attn::kMaxRows) {
          const int R = std::min(attn::kMaxRows, rows - r0);
          kl->dot[R - 1](krows, k_stride, n, d, qp + r0, sp + r0, r0 == 0 ? pf_v : attn::Prefetch{});
        }
        for (int r = 0; r < rows; ++r) {
          float* s = sp[r];
          if (!all_visible)
            for (int t = 0; t < n; ++t)
              if (!c.visible(k0 + t, qpos[r])) s[t] = -std::numeric_limits<float>::infinity();
          float mx = -std::numeric_limits<float>::infinity();
          for (int t = 0; t < n; ++t) mx = std::max(mx, s[t]);
          if (mx == -std::numeric_limits<float>::infinity()) {
            std::memset(s, 0, sizeof(float) * n);
            continue;
          }
          const float m_new = std::max(S.m[r], mx);
          const float corr = std::exp(S.m[r] - m_new);  // 0 on the first visible tile
          S.l[r] = S.l[r] * corr + math.exp_sum(s, n, m_new);
          if (corr != 1.0f) math.scale(op[r], d, corr);
          S.m[r] = m_new;
        }
        for (int r0 = 0; r0 < rows; r0 += attn::kMaxRows) {
          const int R = std::min(attn::kMaxRows, rows - r0);
          vl->acc[R - 1](vrows, v_stride, n, d, sp + r0, op + r0, r0 == 0 ? pf_k_next : attn::Prefetch{});
        }
      }
      if (p.n_ch == 1) {
        for (int r = 0; r < rows; ++r) {
          const int pi = r / p.n_rep, g = r % p.n_rep;
          float* dst = out + size_t(i0 + pi) * stride_q + size_t(h * p.n_rep + g) * d;
          const float inv = S.l[r] > 0 ? 1.0f / S.l[r] : 0.0f;
          for (int i = 0; i < d; ++i) dst[i] = op[r][i] * inv;
          if (v_rot) kv::unrotate(dst, d, dst);
        }
      } else {
        float* part = partials.data() + size_t(item) * part_stride;
        for (int r = 0; r < rows; ++r) {
          float* pr = part + size_t(r) * (d + 2);
          std::memcpy(pr, op[r], sizeof(float) * d);
          pr[d] = S.m[r];
          pr[d + 1] = S.l[r];
        }
      }
    }
  });
  if (p.n_ch == 1) return;
  // Exact merge of the chunks' online-softmax states: out = sum_c e^(m_c - M) acc_c / sum_c e^(m_c - M) l_c.
  pool.parallel_for(base_items, [&](int64_t b, int64_t e, int) {
    std::vector<float> o(d);
    for (int64_t hq = b; hq < e; ++hq) {
      const int h = int(hq % p.H), qt = int(hq / p.H);
      const int i0 = qt * p.qt_pos, np = std::min(p.qt_pos, n_q - i0), rows = np * p.n_rep;
      const float* part = partials.data() + size_t(hq) * p.n_ch * part_stride;
      for (int r = 0; r < rows; ++r) {
        float M = -std::numeric_limits<float>::infinity();
        for (int ch = 0; ch < p.n_ch; ++ch) M = std::max(M, part[ch * part_stride + size_t(r) * (d + 2) + d]);
        std::fill(o.begin(), o.end(), 0.0f);
        double lsum = 0;
        if (M != -std::numeric_limits<float>::infinity())
          for (int ch = 0; ch < p.n_ch; ++ch) {
            const float* pr = part + ch * part_stride + size_t(r) * (d + 2);
            if (pr[d] == -std::numeric_limits<float>::infinity()) continue;
            const float w = std::exp(pr[d] - M);
            lsum += double(w) * pr[d + 1];
            for (int i = 0; i < d; ++i) o[i] += w * pr[i];
          }
        const int pi = r / p.n_rep, g = r % p.n_rep;
        float* dst = out + size_t(i0 + pi) * stride_q + size_t(h * p.n_rep + g) * d;
        const float inv = lsum > 0 ? float(1.0 / lsum) : 0.0f;
        for (int i = 0; i < d; ++i) dst[i] = o[i] * inv;
        if (v_rot) kv::unrotate(dst, d, dst);
      }
    }
  });
}

}  // namespace kvtax
