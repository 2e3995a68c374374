// The NCCL drop-in's environment: NCCL_* variables that have a Strata meaning become their STRATA_* twins (a
// STRATA_* variable already set wins), the version line, NCCL_COMM_ID's rendezvous, and communicator log lines.
#pragma once

#include <nccl.h>

#include "nccl/nccl_state.h"

namespace strata::nccl {

/// Applies the NCCL_* variables once per process (also at load, from the library's constructor), and writes the
/// first INFO line: "Strata X implementing the NCCL A.B.C API".
void ensureEnvironment();

/// With NCCL_COMM_ID=host:port set, fills `id` with the id of a root at that address (every rank computes the
/// same one; rank 0's ncclCommInitRank starts the root there) and returns true; false without NCCL_COMM_ID.
/// Throws nothing: a malformed value is recorded and false returned after a warning.
bool commIdFromEnvironment(ncclUniqueId* id);

/// Before rank `rank` joins with `id`: if the id is NCCL_COMM_ID's and this is rank 0, starts its root service
/// here (once). Returns false, with the error recorded, if that root cannot be started.
bool prepareRoot(const ncclUniqueId& id, int rank);

/// One INFO line about a new communicator (its name, rank, size and device).
void logComm(const CommState& state, const char* what);

}  // namespace strata::nccl
