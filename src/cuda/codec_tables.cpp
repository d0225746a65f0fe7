#include "cuda/codec_tables.h"

#include <vector>

#include "kv/codecs/formats.h"
#include "kv/rotation.h"

namespace kvtax::cuda {

const CodecTables& codec_tables() {
  // Thresholds are computed here in float exactly as kv/codecs/tq.cpp does.
  static CodecTables* t = [] {
    auto* r = new CodecTables;
    auto up = [](const float* p, size_t n) {
      Buffer b(n * 4);
      b.upload(p, n * 4);
      return b;
    };
    auto thr = [](const float* lv, int k) {
      std::vector<float> v(size_t(k - 1));
      for (int i = 0; i + 1 < k; ++i) v[size_t(i)] = 0.5f * (lv[i] + lv[i + 1]);
      return v;
    };
    r->signs = up(kv::rotation_signs(), kv::kRotationMaxDim);
    r->tq4 = up(kv::tq4_levels().data(), 16);
    r->tq3 = up(kv::tq3_levels().data(), 8);
    const auto t4 = thr(kv::tq4_levels().data(), 16), t3 = thr(kv::tq3_levels().data(), 8);
    r->tq4_thr = up(t4.data(), t4.size());
    r->tq3_thr = up(t3.data(), t3.size());
    return r;
  }();
  return *t;
}

}  // namespace kvtax::cuda
