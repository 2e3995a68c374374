// strata-train: AdamW with global-norm gradient clipping over the parameter ranges this rank owns.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "model.h"

namespace strain {

struct AdamW {
  float lr = 3e-3f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weightDecay = 0.1f, clip = 1.0f;
  int t = 0;
  std::vector<std::pair<size_t, size_t>> ranges;  // (offset, count) in the flat buffers
  Vec m, v;                                       // moments of the owned elements, range after range

  void init(std::vector<std::pair<size_t, size_t>> owned);
  /// Global gradient norm over every parameter of the model (TP shards summed over `tp`; under ZeRO the owned
  /// shards summed over `dp`), clipping, then one AdamW step on the owned ranges. Returns the norm before
  /// clipping.
  double step(const std::vector<Param>& params, const std::vector<size_t>& offsets, float* w, const float* g, TpCtx& tp,
              strata::Communicator* dpIfSharded);
};

}  // namespace strain
