#include "model/decoder.h"

#include "core/error.h"

namespace kvtax {

int32_t Decoder::eval_argmax(const int32_t*, int) {
  fail("eval_argmax: this decoder keeps no logits of its own to search (has_argmax() is false)");
}

}  // namespace kvtax
