#pragma once
// Reaching a deep KV cache without prefilling it: a short real prefill, then that prefix's stored K/V
// rows appended again and again. Benchmarks use it to time decode at depth D in seconds instead of the
// minutes a D-token prefill takes on a small CPU (decode speed does not depend on the stored values).
#include <cstdint>
#include <vector>

#include "model/forward.h"

namespace kvtax {

// Runs `prefix` through fw (positions 0..prefix-1, in chunks of fw.max_batch()), then appends copies of
// those positions' stored K and V (decoded from the cache and encoded again, in every layer) until
// fw.n_past() == depth; position p holds the rows of position p % prefix.size(). With depth <=
// prefix.size() only the first `depth` tokens are run. Needs an empty cache; throws kvtax::Error on an
// empty prefix, a non-empty cache, or a depth beyond the context.
void fill_kv_by_tiling(Forward& fw, const std::vector<int32_t>& prefix, int depth);

}  // namespace kvtax
