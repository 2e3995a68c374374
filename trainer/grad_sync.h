// strata-train: data-parallel gradient synchronisation behind a small interface, so the trainer can run it
// either as "launch one collective after backward" (PlainGradSync) or through strata::OverlapScheduler
// (OverlapGradSync, built when the scheduler is part of libstrata).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "strata/strata.hpp"

namespace strain {

struct SyncStats {
  double commMs = 0;
  double exposedMs = 0;
  double overlapPct = 0;
};

class GradSync {
 public:
  virtual ~GradSync() = default;
  /// Registers the parameters (forward order) and lays out the flat gradient buffer.
  virtual void layout(const std::vector<std::string>& names, const std::vector<size_t>& numels) = 0;
  /// Offset of parameter p in the flat buffer; parameters use the same layout.
  virtual size_t offset(int p) const = 0;
  virtual size_t totalElems() const = 0;
  virtual float* gradBuffer() = 0;
  virtual void beginStep() = 0;
  virtual void gradReady(int p) = 0;
  /// After finish(), ownedRanges() hold the gradients averaged over the DP group (all of the buffer, or this
  /// rank's shards under ZeRO).
  virtual void finish() = 0;
  virtual std::vector<std::pair<size_t, size_t>> ownedRanges() const = 0;
  /// ZeRO: shares the updated parameters (same layout) so every DP rank has all of them. No-op otherwise.
  virtual void allGatherParams(float* params) = 0;
  virtual SyncStats stats() const = 0;
  /// Collective over the DP group: writes a Chrome/Perfetto trace of every step (compute and comm lanes
  /// per DP rank) to `path`. Returns false when this synchroniser keeps no trace.
  virtual bool writeTrace(const std::string& /*path*/) { return false; }
};

/// `dp` may be null (one DP rank). zero: reduce-scatter gradients / all-gather parameters (ZeRO-1).
/// overlap: use strata::OverlapScheduler when this build has it (otherwise launch after backward).
std::unique_ptr<GradSync> makeGradSync(strata::Communicator* dp, bool zero, bool overlap,
                                       size_t bucketCapBytes = 25 << 20);
/// Whether makeGradSync(..., overlap = true) uses the overlap scheduler in this build.
bool haveOverlapScheduler();

}  // namespace strain
