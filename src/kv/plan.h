#pragma once
// Capacity planning: for a KV shape and a byte reservation, what every codec pair costs per token and
// how many tokens fit (exactly as KvCache would allocate them, block padding included).
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "kv/cache.h"

namespace kvtax {

struct PlanRow {
  std::string k, v;
  double k_bits = 0, v_bits = 0;  // per value, scales included
  double bytes_per_token = 0;     // steady state, all layers
  size_t tokens = 0;              // that fit; SIZE_MAX = never fills (window plateau fits)
  size_t plateau_bytes = 0;       // with a window policy: the most the cache ever holds; 0 = grows forever
};

// Every (K, V) codec pair usable at this head_dim, in registry order. Throws on a bad shape.
std::vector<PlanRow> plan_kv(const KvShape& shape, size_t reservation_bytes, const KvPolicy& policy = {});

// "16GiB", "512MiB", "1.5GB", "1000000" -> bytes. Throws kvtax::Error on anything else.
size_t parse_size(std::string_view s);

}  // namespace kvtax
