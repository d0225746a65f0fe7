#pragma once
// KL divergence of an arm's next-token distributions from the reference arm's, position by position
// over the reference answer (both teacher-forced on the same tokens).
#include <vector>

#include "harness/runner.h"

namespace kvtax::harness {

struct KldStats {
  double mean = 0;  // nats, averaged over positions
  double max = 0;
  int positions = 0;
};

// KL(P || Q) for one position. Full distributions: exact (both renormalised). Top-k: summed over P's
// listed tokens, a token Q does not list gets Q's smallest listed log-probability, and the mass outside
// P's list is one more bucket; an approximation that is exact when k covers the vocabulary.
double kl_divergence(const PositionLogprobs& p, const PositionLogprobs& q);
// Throws kvtax::Error when the position counts differ or a distribution is empty.
KldStats kld_over_answer(const std::vector<PositionLogprobs>& ref, const std::vector<PositionLogprobs>& arm);

}  // namespace kvtax::harness
