// q4 / q4r inner loops (256-bit vectors). Included by codec_loops_x86.h inside its anonymous namespace,
// after the shared helpers (Streamer, hsum, hsum8, ld_f16) it uses; no includes of its own.
//
// A q4 row is d/32 f16 scales, then 16 code bytes per 32-value block: byte j holds value j (low nibble)
// and value j + 16 (high nibble), code c stands for c - 8.
//
// K: the codes stay unsigned (0..15), so maddubs takes them directly and the -8 offset becomes one
// correction term per block (-8 x sum of q over the block), added through the same FMA that applies the
// scales. Two blocks' 32 code bytes are one 256-bit load: its low nibbles are values 0..15 of both
// blocks, its high nibbles values 16..31, and q is stored in that order, so one load, shift and two ANDs
// unpack 64 values, two maddubs and one madd leave four int32 partial sums per block, and each pair of
// blocks costs one int-to-float conversion and two FMAs per query row.
//
// V: each code byte is shuffled into the top byte of a 32-bit lane after XOR 0x88 (c ^ 8 is c - 8 as a
// 4-bit two's complement number), so the high nibble AND 0xf0000000 and the low nibble shifted left by 4
// are (c - 8) * 2^28 as int32: one conversion per 8 values, no sign extension; 2^-28 goes into the weights.

// ---- K
// Prepared q: int8 q[d] in group order, then per group 8 scale lanes and 8 correction lanes. A group is
// two blocks (b, b + 1), stored as [q_b[0..16) q_b+1[0..16) q_b[16..32) q_b+1[16..32)], with lanes
// [s_b x4, s_b+1 x4] and [c_b / 4 x4, c_b+1 / 4 x4] (s: q's block scale, c = -8 s sum(q_b)); a lone last
// block keeps its natural order with lanes [s x8] and [c / 8 x8].
inline int q4_groups(int d) { return (d / 32 + 1) / 2; }
size_t q4_prep_bytes(int d) { return size_t(d) + 64 * size_t(q4_groups(d)); }

void q4_prep(const float* q, int d, uint8_t* dst) {
  const int nb = d / 32, ng = q4_groups(d);
  int8_t* qi = reinterpret_cast<int8_t*>(dst);
  float* lanes = reinterpret_cast<float*>(dst + d);
  for (int g = 0; g < ng; ++g) {
    const int b0 = 2 * g, nbg = std::min(2, nb - b0);
    for (int bb = 0; bb < nbg; ++bb) {
      const float* x = q + 32 * (b0 + bb);
      float amax = 0;
      for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
      const float s = amax / 127.0f, inv = amax > 0 ? 127.0f / amax : 0.0f;
      int sum = 0;
      for (int i = 0; i < 32; ++i) {
        const int v = _mm_cvtss_si32(_mm_set_ss(std::clamp(x[i] * inv, -127.0f, 127.0f)));  // round to nearest even
        sum += v;
        // pair: halves of the two blocks interleaved at 16-byte granularity; lone block: natural order
        const int pos = nbg == 2 ? (i / 16) * 32 + bb * 16 + (i % 16) : i;
        qi[32 * b0 + pos] = int8_t(v);
      }
      const float c = -8.0f * s * float(sum);
      const int per = 8 / nbg;  // lanes per block
      for (int l = 0; l < per; ++l) {
        lanes[16 * g + bb * per + l] = s;
        lanes[16 * g + 8 + bb * per + l] = c / float(per);
      }
    }
  }
}

// TT tokens x R query rows; NB > 0 fixes the block count at compile time (the loops unroll and the
// accumulators stay in registers), NB = 0 reads it from nb.
template <int R, int TT, int NB>
__attribute__((always_inline)) inline void q4_dot_tokens(const uint8_t* row, size_t stride, int nb_rt, const int8_t* const* qi,
                                                         const float* const* lanes, float* const* s, int t) {
  const int nb = NB > 0 ? NB : nb_rt;
  const __m256i m = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
  const __m256i pair_idx = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
  const uint8_t* codes = row + 2 * nb;
  __m256 a[TT * R];
  #pragma GCC unroll 8
  for (int j = 0; j < TT * R; ++j) a[j] = _mm256_setzero_ps();
  int b = 0;
  #pragma GCC unroll 8
  for (; b + 2 <= nb; b += 2) {
    const int g = b / 2;
    #pragma GCC unroll 8
    for (int tt = 0; tt < TT; ++tt) {
      const uint8_t* rw = row + tt * stride;
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + tt * stride + 16 * b));
      const __m256i lo = _mm256_and_si256(x, m), hi = _mm256_and_si256(_mm256_srli_epi16(x, 4), m);
      uint32_t sc;
      std::memcpy(&sc, rw + 2 * b, 4);
      const __m256 kd = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_cvtph_ps(_mm_cvtsi32_si128(int(sc)))), pair_idx);
      #pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m256i A = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qi[r] + 32 * b));
        const __m256i B = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qi[r] + 32 * b + 32));
        const __m256i p16 = _mm256_add_epi16(_mm256_maddubs_epi16(lo, A), _mm256_maddubs_epi16(hi, B));
        const __m256 f = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
        const __m256 u = _mm256_fmadd_ps(f, _mm256_loadu_ps(lanes[r] + 16 * g), _mm256_loadu_ps(lanes[r] + 16 * g + 8));
        a[tt * R + r] = _mm256_fmadd_ps(u, kd, a[tt * R + r]);
      }
    }
  }
  if (b < nb) {  // lone last block: [low nibbles | high nibbles] in one vector
    const int g = b / 2;
    const __m128i m4 = _mm_set1_epi8(15);
    #pragma GCC unroll 8
    for (int tt = 0; tt < TT; ++tt) {
      const uint8_t* rw = row + tt * stride;
      const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + tt * stride + 16 * b));
      const __m256i c = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(x, 4), m4), _mm_and_si128(x, m4));
      const __m256 kd = _mm256_set1_ps(ld_f16(rw + 2 * b));
      #pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m256i A = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qi[r] + 32 * b));
        const __m256 f = _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(c, A), ones));
        const __m256 u = _mm256_fmadd_ps(f, _mm256_loadu_ps(lanes[r] + 16 * g), _mm256_loadu_ps(lanes[r] + 16 * g + 8));
        a[tt * R + r] = _mm256_fmadd_ps(u, kd, a[tt * R + r]);
      }
    }
  }
  if constexpr (TT * R == 8) {
    alignas(32) float res[8];
    _mm256_store_ps(res, hsum8(a));
    #pragma GCC unroll 8
    for (int tt = 0; tt < TT; ++tt)
      #pragma GCC unroll 8
      for (int r = 0; r < R; ++r) s[r][t + tt] = res[tt * R + r];
  } else {
    #pragma GCC unroll 8
    for (int tt = 0; tt < TT; ++tt)
      #pragma GCC unroll 8
      for (int r = 0; r < R; ++r) s[r][t + tt] = hsum(a[tt * R + r]);
  }
}

template <int R>
void dot_q4(const uint8_t* k, size_t stride, int n, int d, const uint8_t* const* q, float* const* s, const Prefetch& pf) {
  const int nb = d / 32;
  const int8_t* qi[R];
  const float* lanes[R];
  #pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    qi[r] = reinterpret_cast<const int8_t*>(q[r]);
    lanes[r] = reinterpret_cast<const float*>(q[r] + d);
  }
  constexpr int TT = R >= 3 ? 2 : 8 / R;  // TT x R accumulator chains per step
  Streamer pre(pf, n / TT);
  auto run = [&](auto nb_c) {
    constexpr int NB = decltype(nb_c)::value;
    int t = 0;
    for (; t + TT <= n; t += TT) {
      pre.step();
      q4_dot_tokens<R, TT, NB>(k + t * stride, stride, nb, qi, lanes, s, t);
    }
    for (; t < n; ++t) q4_dot_tokens<R, 1, NB>(k + t * stride, stride, nb, qi, lanes, s, t);
  };
  switch (nb) {  // head_dim 64, 128, 256
    case 2: run(std::integral_constant<int, 2>{}); break;
    case 4: run(std::integral_constant<int, 4>{}); break;
    case 8: run(std::integral_constant<int, 8>{}); break;
    default: run(std::integral_constant<int, 0>{}); break;
  }
}

// ---- V
// Weights for a run of m rows, w[(b * m + t) * R + r] = p[r][t0 + t] * scale(t, b) * 2^-28: for one block
// the R weights of a row sit together and are broadcast by the FMA loop. (Whole pre-broadcast vectors as
// FMA memory operands were tried: 16 vector stores per row cost what the broadcasts save.) The 2^-28 goes
// into the f16 scale, which keeps it a normal float; a weight can still be subnormal when p < ~2^-98, a
// term far below the output's precision (no penalty for subnormal FMA inputs measured on this machine).
template <int R>
void q4_weights(const uint8_t* base, size_t stride, int t0, int m, int nb, const float* const* p, float* w) {
  const size_t plane = size_t(m) * R;
  for (int t = 0; t < m; ++t) {
    const uint8_t* row = base + t * stride;
    float pr[R];
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r) pr[r] = p[r][t0 + t];
    float* wt = w + size_t(t) * R;
    int b = 0;
    if constexpr (R == 4) {
      const __m128 pv = _mm_loadu_ps(pr);
      for (; b + 4 <= nb; b += 4, wt += 4 * plane) {  // four f16 scales per conversion
        const __m128 sc = _mm_mul_ps(_mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + 2 * b))),
                                     _mm_set1_ps(0x1p-28f));
        _mm_storeu_ps(wt, _mm_mul_ps(pv, _mm_shuffle_ps(sc, sc, 0x00)));
        _mm_storeu_ps(wt + plane, _mm_mul_ps(pv, _mm_shuffle_ps(sc, sc, 0x55)));
        _mm_storeu_ps(wt + 2 * plane, _mm_mul_ps(pv, _mm_shuffle_ps(sc, sc, 0xaa)));
        _mm_storeu_ps(wt + 3 * plane, _mm_mul_ps(pv, _mm_shuffle_ps(sc, sc, 0xff)));
      }
    }
    for (; b < nb; ++b, wt += plane) {
      const float sc = ld_f16(row + 2 * b) * 0x1p-28f;
      #pragma GCC unroll 8
      for (int r = 0; r < R; ++r) wt[r] = pr[r] * sc;
    }
  }
}

// One pass over m rows for half-blocks j0 .. j0 + NH - 1 of block b (half j: values 8j..8j+7 from the
// low nibbles, 16+8j..16+8j+7 from the high nibbles); the outputs stay in registers for the pass.
template <int R, int NH, int P>
__attribute__((always_inline)) inline void q4_acc_pass(const uint8_t* base, size_t stride, int m, int nb, int b, int j0,
                                                       const float* w, float* const* o, Streamer& pre) {
  const __m256i k88 = _mm256_set1_epi8(char(0x88)), top = _mm256_set1_epi32(int(0xf0000000u));
  // byte k of the half's 8 code bytes -> top byte of lane k (the 16 code bytes are in both 128-bit lanes)
  const __m256i ctl[2] = {
      _mm256_setr_epi8(-1, -1, -1, 0, -1, -1, -1, 1, -1, -1, -1, 2, -1, -1, -1, 3,
                       -1, -1, -1, 4, -1, -1, -1, 5, -1, -1, -1, 6, -1, -1, -1, 7),
      _mm256_setr_epi8(-1, -1, -1, 8, -1, -1, -1, 9, -1, -1, -1, 10, -1, -1, -1, 11,
                       -1, -1, -1, 12, -1, -1, -1, 13, -1, -1, -1, 14, -1, -1, -1, 15)};
  const uint8_t* codes = base + 2 * size_t(nb) + 16 * size_t(b);
  const float* wb = w + size_t(b) * m * R;
  auto fma_row = [&](__m256 (&acc)[R][2 * NH], const uint8_t* cr, const float* wt) __attribute__((always_inline)) {
    const __m256i x =
        _mm256_xor_si256(_mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(cr))), k88);
    __m256 v[2 * NH];
    #pragma GCC unroll 8
    for (int h = 0; h < NH; ++h) {
      const __m256i dw = _mm256_shuffle_epi8(x, ctl[j0 + h]);
      v[2 * h] = _mm256_cvtepi32_ps(_mm256_slli_epi32(dw, 4));
      v[2 * h + 1] = _mm256_cvtepi32_ps(_mm256_and_si256(dw, top));
    }
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 wv = _mm256_broadcast_ss(wt + r);
      #pragma GCC unroll 8
      for (int j = 0; j < 2 * NH; ++j) acc[r][j] = _mm256_fmadd_ps(wv, v[j], acc[r][j]);
    }
  };
  auto out = [&](int r, int j) { return o[r] + 32 * b + 8 * (j0 + j / 2) + 16 * (j % 2); };
  __m256 a[P][R][2 * NH];
  #pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
    #pragma GCC unroll 8
    for (int j = 0; j < 2 * NH; ++j) {
      a[0][r][j] = _mm256_loadu_ps(out(r, j));
      #pragma GCC unroll 8
      for (int ps = 1; ps < P; ++ps) a[ps][r][j] = _mm256_setzero_ps();
    }
  const bool pf_on = pre.active();
  int t = 0;
  for (; t + 2 <= m; t += 2) {
    if (pf_on) pre.one();
    fma_row(a[0], codes + t * stride, wb + t * R);
    fma_row(a[P - 1], codes + (t + 1) * stride, wb + (t + 1) * R);
  }
  if (t < m) fma_row(a[0], codes + t * stride, wb + t * R);
  #pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
    #pragma GCC unroll 8
    for (int j = 0; j < 2 * NH; ++j) {
      __m256 x = a[0][r][j];
      #pragma GCC unroll 8
      for (int ps = 1; ps < P; ++ps) x = _mm256_add_ps(x, a[ps][r][j]);
      _mm256_storeu_ps(out(r, j), x);
    }
}

template <int R>
void acc_v_q4(const uint8_t* v, size_t stride, int n, int d, const float* const* p, float* const* o, const Prefetch& pf) {
  const int nb = d / 32;
  constexpr int NH = R <= 2 ? 2 : 1;  // half-blocks per pass and accumulator sets, so that
  constexpr int P = R == 1 ? 2 : 1;   // R x 2NH x P = 6..8 independent chains
  constexpr int kWeights = kvtax::attn::kMaxRows * 64 * 16;
  const int run = std::max(1, std::min(64, kWeights / (R * nb)));
  Streamer pre(pf, 1);  // one line per two rows until the range is covered
  alignas(32) float w[kWeights];
  for (int t0 = 0; t0 < n; t0 += run) {
    const int m = std::min(run, n - t0);
    const uint8_t* base = v + size_t(t0) * stride;
    q4_weights<R>(base, stride, t0, m, nb, p, w);
    for (int b = 0; b < nb; ++b)
      for (int j0 = 0; j0 < 2; j0 += NH) q4_acc_pass<R, NH, P>(base, stride, m, nb, b, j0, w, o, pre);
  }
}

constexpr KLoops make_k_q4() { return {q4_prep_bytes, q4_prep, {dot_q4<1>, dot_q4<2>, dot_q4<3>, dot_q4<4>}}; }
