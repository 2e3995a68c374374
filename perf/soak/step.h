// One step of strata_soak run on a communicator: its operations prepared, issued as the step says, waited for and
// checked; and the counts the run reports.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "comm_view.h"
#include "operations.h"

namespace soak {

struct Stats {
  uint64_t iterations = 0;
  uint64_t ops[kNumKinds] = {};
  uint64_t bytes = 0;  // per operation, the larger of this rank's input and output
  uint64_t grouped = 0, async = 0, preMulSums = 0;
  uint64_t splits = 0, shrinks = 0, nestedSplits = 0, recreates = 0, aborts = 0, revokes = 0, subOps = 0;
};

struct Buffers {
  std::vector<unsigned char> send, recv;
  size_t slotBytes = 0;  // the share of each operation of a group
};

/// Runs `step` on `v` in `buf`'s slots and checks every result; dies on a failed call or a wrong result.
void runStep(const Step& step, const CommView& v, Buffers& buf, Stats& st);

}  // namespace soak
