#include "kv/plan.h"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

#include "core/error.h"

namespace kvtax {

std::vector<PlanRow> plan_kv(const KvShape& shape, size_t reservation, const KvPolicy& policy) {
  std::vector<PlanRow> rows;
  for (int ki = 0; ki < kv::kNumCodecs; ++ki)
    for (int vi = 0; vi < kv::kNumCodecs; ++vi) {
      const kv::CodecInfo& kc = kv::codec(kv::CodecId(ki));
      const kv::CodecInfo& vc = kv::codec(kv::CodecId(vi));
      try {
        kv::check_head_dim(kc, shape.head_dim);
        kv::check_head_dim(vc, shape.head_dim);
      } catch (const Error&) {
        continue;  // e.g. rotated codecs at a head_dim that is not a power of two
      }
      KvSpec spec;
      spec.k = kc.name;
      spec.v = vc.name;
      spec.policy = policy;
      PlanRow r;
      r.k = kc.name;
      r.v = vc.name;
      r.k_bits = kv::bits_per_value(kc, shape.head_dim);
      r.v_bits = kv::bits_per_value(vc, shape.head_dim);
      r.bytes_per_token = double(shape.n_layers) * shape.n_kv_heads *
                          double(kc.row_bytes(shape.head_dim) + vc.row_bytes(shape.head_dim));
      r.tokens = KvCache::capacity(shape, spec, reservation);
      if (policy.window > 0) r.plateau_bytes = KvCache::bytes_needed(shape, spec, size_t(1) << 40);
      rows.push_back(r);
    }
  return rows;
}

size_t parse_size(std::string_view s) {
  const std::string str(s);
  char* end = nullptr;
  const double v = std::strtod(str.c_str(), &end);
  if (end == str.c_str() || !(v >= 0) || !std::isfinite(v)) fail("bad size '{}' (want e.g. 16GiB, 512MiB, 2GB)", s);
  const std::string unit(end);
  double mult = 0;
  if (unit.empty() || unit == "B") mult = 1;
  else if (unit == "KiB" || unit == "K") mult = 1024.0;
  else if (unit == "MiB" || unit == "M") mult = 1024.0 * 1024;
  else if (unit == "GiB" || unit == "G") mult = 1024.0 * 1024 * 1024;
  else if (unit == "TiB" || unit == "T") mult = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "KB") mult = 1e3;
  else if (unit == "MB") mult = 1e6;
  else if (unit == "GB") mult = 1e9;
  else if (unit == "TB") mult = 1e12;
  else fail("bad size unit in '{}' (B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)", s);
  const double bytes = v * mult;
  if (bytes > 1e18) fail("size '{}' is too large", s);
  return size_t(bytes);
}

}  // namespace kvtax
