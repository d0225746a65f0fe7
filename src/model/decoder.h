#pragma once
// What generation drives: one sequence's forward pass over its own KV cache, on the CPU (Forward) or on a
// device (engine/device.h). Sampling and everything around it stay on the host.
#include <cstddef>
#include <cstdint>

namespace kvtax {

class Model;

// A token picked where the logits are, so that the host reads one int instead of the vocabulary.
// inv_temperature 0: the largest logit (the first of equal ones, NaNs skipped), the greedy pick. Otherwise a draw from
// softmax(logits * inv_temperature): the first token, in index order, whose running sum of weights passes u times
// their total (u in [0, 1)), which is how the CPU sampler draws when no cut applies.
struct TokenPick {
  float inv_temperature = 0.0f;
  double u = 0.0;
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  // Runs n tokens at positions n_past() .. n_past()+n-1 and appends their K/V; logits receives the last
  // token's logits ([n_vocab]) or, with all_logits, every token's ([n][n_vocab]).
  virtual void eval(const int32_t* tokens, int n, float* logits, bool all_logits = false) = 0;
  // Where eval() writes one row of logits fastest, or nullptr where every buffer is as good: a device decoder's
  // page-locked row, which the device copies into with no host copy after it. Valid as long as the decoder.
  virtual float* logits_row() { return nullptr; }
  // eval_pick() runs like eval() and returns the last row's token as `pick` says, instead of its logits (-1, the
  // sampler's kNoPick, where they offer none: all NaN). Only where has_pick() (a device decoder: the logits stay
  // where they are).
  virtual bool has_pick() const { return false; }
  virtual int32_t eval_pick(const int32_t* tokens, int n, const TokenPick& pick);
  virtual int n_past() const = 0;
  virtual int max_context() const = 0;
  virtual int max_batch() const = 0;
  virtual const Model& model() const = 0;
  virtual void reset() = 0;  // empty cache, same capacity
};

}  // namespace kvtax
