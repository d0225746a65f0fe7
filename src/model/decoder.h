#pragma once
// What generation drives: one sequence's forward pass over its own KV cache, on the CPU (Forward) or on a
// device (engine/device.h). Sampling and everything around it stay on the host.
#include <cstddef>
#include <cstdint>

namespace kvtax {

class Model;

class Decoder {
 public:
  virtual ~Decoder() = default;
  // Runs n tokens at positions n_past() .. n_past()+n-1 and appends their K/V; logits receives the last
  // token's logits ([n_vocab]) or, with all_logits, every token's ([n][n_vocab]).
  virtual void eval(const int32_t* tokens, int n, float* logits, bool all_logits = false) = 0;
  // Where eval() writes one row of logits fastest, or nullptr where every buffer is as good: a device decoder's
  // page-locked row, which the device copies into with no host copy after it. Valid as long as the decoder.
  virtual float* logits_row() { return nullptr; }
  // Greedy decoding without the logits on the host: eval_argmax() runs like eval() and returns the index of the last
  // row's largest logit (the first of equal ones, NaNs skipped), the token a greedy sampler picks. Only where
  // has_argmax() (a device decoder finds it where the logits are; the host then reads one int, not the vocabulary).
  virtual bool has_argmax() const { return false; }
  virtual int32_t eval_argmax(const int32_t* tokens, int n);
  virtual int n_past() const = 0;
  virtual int max_context() const = 0;
  virtual int max_batch() const = 0;
  virtual const Model& model() const = 0;
  virtual void reset() = 0;  // empty cache, same capacity
};

}  // namespace kvtax
