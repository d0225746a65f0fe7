#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "attn/cpu/loops.h"
#include "core/cpu.h"

namespace kvtax {

namespace {

// Maxima of 4 floats at a time (GCC vector extension; SSE on the baseline x86-64 this file is built for): one
// running maximum is a chain of dependent compares, ~1 ns a logit.
typedef float F4 __attribute__((vector_size(16)));
constexpr int kLanes = 16;  // a run of 16 logits: 4 vectors

inline F4 vmax(F4 a, F4 b) { return a < b ? b : a; }
inline F4 load4(const float* p) {
  F4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline float hmax(F4 v) {
  float m = v[0];
  for (int j = 1; j < 4; ++j) m = m < v[j] ? v[j] : m;
  return m;
}
inline F4 max16(const float* p) { return vmax(vmax(load4(p), load4(p + 4)), vmax(load4(p + 8), load4(p + 12))); }

float max_value(const float* l, int n) {
  int i = 0;
  float m = l[0];
  if (n >= kLanes) {
    F4 a = load4(l), b = load4(l + 4), c = load4(l + 8), d = load4(l + 12);
    for (i = kLanes; i + kLanes <= n; i += kLanes) {
      a = vmax(a, load4(l + i)), b = vmax(b, load4(l + i + 4));
      c = vmax(c, load4(l + i + 8)), d = vmax(d, load4(l + i + 12));
    }
    m = hmax(vmax(vmax(a, b), vmax(c, d)));
  }
  for (; i < n; ++i) m = m < l[i] ? l[i] : m;
  return m;
}

// Largest first, the earlier of equal logits first: the order, and so the top-k at a tie, is the same on every
// standard library (std::sort and the heap alone leave equal logits in any order).
bool by_logit(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

}  // namespace

int32_t argmax(const float* logits, int n) {
  const float m = max_value(logits, n);
  for (int i = 0; i < n; ++i)
    if (logits[i] == m) return i;  // the first of equal maxima, as std::max_element
  // m is NaN: a NaN where a running maximum starts stays there (NaN < x is false); look among the numbers instead.
  int best = kNoPick;
  for (int i = 0; i < n; ++i)
    if (!std::isnan(logits[i]) && (best == kNoPick || logits[i] > logits[best])) best = i;
  return best;
}

Sampler::Sampler(const SamplerOptions& o) : o_(o), rng_(o.seed) {}

bool Sampler::pickable(int n_vocab) const {
  if (o_.repeat_penalty != 1.0f) return false;
  if (o_.temperature <= 0.0f) return true;
  return !(o_.top_k > 0 && o_.top_k < n_vocab) && o_.top_p >= 1.0f && o_.min_p <= 0.0f;
}

TokenPick Sampler::pick() {
  if (o_.temperature <= 0.0f) return {};
  // draw() takes uniform(0, total) from rng_: total times this same canonical draw.
  return {1.0f / o_.temperature, std::uniform_real_distribution<double>(0.0, 1.0)(rng_)};
}

void Sampler::reset() {
  rng_.seed(o_.seed);
  recent_.clear();
}

void Sampler::accept(int32_t token) {
  if (o_.repeat_last_n <= 0) return;
  recent_.push_back(token);
  while (int(recent_.size()) > o_.repeat_last_n) recent_.pop_front();
}

int32_t Sampler::sample(const float* logits, int n_vocab) {
  const float* l = o_.repeat_penalty != 1.0f ? penalized(logits, n_vocab) : logits;
  const int32_t picked = o_.temperature <= 0.0f ? argmax(l, n_vocab) : draw(l, n_vocab);
  if (picked != kNoPick) accept(picked);
  return picked;
}

// The logits with the repetition penalty on the recent tokens (a copy; the caller's logits stay as they are).
const float* Sampler::penalized(const float* logits, int n) {
  penalized_.assign(logits, logits + n);
  seen_.assign(recent_.begin(), recent_.end());
  std::sort(seen_.begin(), seen_.end());
  seen_.erase(std::unique(seen_.begin(), seen_.end()), seen_.end());
  for (int32_t t : seen_) {
    if (t < 0 || t >= n) continue;
    float& l = penalized_[size_t(t)];
    l = l > 0 ? l / o_.repeat_penalty : l * o_.repeat_penalty;
  }
  return penalized_.data();
}

// The k largest logits, largest first, into cand_: one pass keeping a min-heap of k, so the vocabulary is read once
// and never copied.
void Sampler::top_candidates(const float* logits, int n, int k) {
  auto heap_less = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
    return by_logit(a, b);  // a min-heap in by_logit's order: its front is the candidate to give up first
  };
  cand_.clear();
  // A NaN logit is never a candidate's value (it would break the sort's order): -inf, which no cut keeps with weight.
  for (int i = 0; i < k; ++i) cand_.emplace_back(std::isnan(logits[i]) ? -INFINITY : logits[i], i);
  std::make_heap(cand_.begin(), cand_.end(), heap_less);
  float least = cand_.front().first;
  auto consider = [&](int i) {
    if (!(logits[i] > least)) return;
    std::pop_heap(cand_.begin(), cand_.end(), heap_less);
    cand_.back() = {logits[i], i};
    std::push_heap(cand_.begin(), cand_.end(), heap_less);
    least = cand_.front().first;
  };
  int i = k;
  for (; i + kLanes <= n; i += kLanes)  // most runs of 16 hold no logit above the k-th so far: one vector max each
    if (hmax(max16(logits + i)) > least)
      for (int j = i; j < i + kLanes; ++j) consider(j);
  for (; i < n; ++i) consider(i);
  std::sort(cand_.begin(), cand_.end(), by_logit);
}

// llama.cpp's chain after the penalty: top-k, then top-p and min-p on probabilities at temperature 1, then the draw
// at the temperature. Only as many candidates are put in logit order as the cuts need (256, then 8x more while no
// cut lands among them); with no cut at all, every token is drawn from in index order (any order samples the same
// distribution) and nothing is sorted.
int32_t Sampler::draw(const float* logits, int n) {
  const attn::MathLoops& math = attn::math_loops(simd_level());
  const bool top_k = o_.top_k > 0 && o_.top_k < n;
  if (!top_k && o_.top_p >= 1.0f && o_.min_p <= 0.0f) {
    const float mx = max_value(logits, n);
    std::vector<float>& w = weights_;
    w.resize(size_t(n));
    const float inv_t = 1.0f / o_.temperature;
    for (int i = 0; i < n; ++i) w[size_t(i)] = logits[i] * inv_t;
    const double total = math.exp_sum(w.data(), n, mx * inv_t);
    if (!(total > 0 && total < HUGE_VAL)) return kNoPick;  // NaN logits, or no weight anywhere
    double u = std::uniform_real_distribution<double>(0.0, total)(rng_);
    int i = 0;
    while (i + 1 < n && (u -= w[size_t(i)]) >= 0) ++i;
    return i;
  }
  double sum = -1;  // top-p's denominator: the top-k kept, or the whole vocabulary (one vector pass)
  std::vector<double>& p = prob_;
  for (int k = top_k ? o_.top_k : std::min(n, 256);; k = std::min(n, 8 * k)) {
    top_candidates(logits, n, k);
    const float mx = cand_[0].first;
    if (!top_k && sum < 0) {
      weights_.assign(logits, logits + n);
      sum = math.exp_sum(weights_.data(), n, mx);
    }
    p.resize(cand_.size());
    double kept = 0;
    for (size_t i = 0; i < cand_.size(); ++i) kept += p[i] = std::exp(double(cand_[i].first - mx));
    if (top_k) sum = kept;
    size_t keep = cand_.size();
    bool known = top_k || k == n;  // the kept set is known once a cut lands among these k
    if (o_.top_p < 1.0f) {
      double cum = 0;
      for (size_t i = 0; i < keep; ++i) {
        cum += p[i] / sum;
        if (cum >= o_.top_p) {
          keep = i + 1, known = true;
          break;
        }
      }
    }
    if (o_.min_p > 0.0f) {
      size_t i = 1;
      while (i < keep && p[i] >= o_.min_p * p[0]) ++i;
      known = known || i < cand_.size();
      keep = i;
    }
    if (!known) continue;
    // Draw from the kept candidates at the temperature (p is reused for the weights).
    double total = 0;
    for (size_t i = 0; i < keep; ++i) total += p[i] = std::exp(double(cand_[i].first - mx) / o_.temperature);
    if (!(total > 0 && total < HUGE_VAL)) return kNoPick;
    double u = std::uniform_real_distribution<double>(0.0, total)(rng_);
    size_t i = 0;
    while (i + 1 < keep && (u -= p[i]) >= 0) ++i;
    return cand_[i].second;
  }
}

}  // namespace kvtax
