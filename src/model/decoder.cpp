#include "model/decoder.h"

#include "core/error.h"

namespace kvtax {

int32_t Decoder::eval_pick(const int32_t*, int, const TokenPick&) {
  fail("eval_pick: this decoder keeps no logits of its own to pick from (has_pick() is false)");
}

}  // namespace kvtax
