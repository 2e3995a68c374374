// strata-train: checkpoints hold the full (unsplit) parameters and AdamW moments, so a run can be resumed
// with any dp x tp layout, and two runs' parameters compared directly.
#pragma once

#include <string>
#include <vector>

#include "grad_sync.h"
#include "model.h"
#include "optim.h"

namespace strain {

struct CkptCtx {
  std::vector<Param>* params;
  const std::vector<size_t>* offsets;
  float* w;      // flat parameters
  size_t total;  // elements of the flat buffers
  AdamW* opt;
  TpCtx* tp;
  strata::Communicator* dp;  // null: one DP rank
  bool zero;
  bool writer;  // this rank writes the file
};

void saveCheckpoint(const std::string& path, CkptCtx& c);
void loadCheckpoint(const std::string& path, CkptCtx& c);
/// Largest |a - b| / max(1, |b|) over the parameters of two checkpoint files; throws if they do not match.
double compareCheckpoints(const std::string& a, const std::string& b, double* maxAbs);

}  // namespace strain
