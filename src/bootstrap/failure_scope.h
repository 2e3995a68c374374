// Which of a job's failures end which communicator's waits: a failure, what it is about, and a view's scope.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace strata {

/// One failure recorded on this rank, and what it is about (see FailureScope).
struct BootstrapFailure {
  std::string text;
  uint32_t epoch = 0;      // a report: the shrink epoch of the communicator that failed
  int deadWorld = -1;      // a death: the world rank that died
  bool everyView = false;  // the root is lost, leaving, or refused the job: whatever needs it cannot work
  uint64_t commId = 0;     // non-zero: about this communicator only (a revoke), whatever the epoch
};

/// The failures one bootstrap view (one communicator) hears of. In epoch 0 (the world and its splits) every
/// failure of the job ends every communicator: survivors fail fast, whichever communicator the culprit was in. A
/// shrink (strataCommShrink) makes a view one epoch later than its parent, whose failures it recovers from: it
/// ignores the deaths of ranks it does not contain and the failures reported from earlier epochs, and still hears
/// of its own members' deaths, of failures reported at its epoch or later, and of the root's loss. A failure
/// about one communicator (a revoke) ends that communicator only.
struct FailureScope {
  uint64_t commId = 0;
  uint32_t epoch = 0;
  std::vector<int> worldRanks;  // sorted world ranks of the view (used from epoch 1 on)
  bool covers(const BootstrapFailure& f) const;
};

}  // namespace strata
