// A strata-perf run, on every rank: Strata started from the launcher's environment, the sweep over types,
// ops and sizes, the table on rank 0's stdout (and --json, --csv), the exit status.
#pragma once

#include "options.h"

namespace strata::perf {

/// Runs what `opt` describes; returns the exit status (0, kExitFailure or kExitUsage).
int runPerf(const Options& opt);

}  // namespace strata::perf
