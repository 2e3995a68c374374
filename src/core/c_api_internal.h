// What the C API offers the layers built on it inside the library (the NCCL drop-in, src/nccl/) beyond strata.h:
// its error record, and its per-thread group.
#pragma once

#include <string>

#include "strata/strata.h"

namespace strata {

/// Records an error as the C API's own calls do: strataGetLastError(comm) and strataGetLastError(NULL) on this
/// thread return `message` until a newer error. Returns `code`. `comm` may be NULL or not live.
strataResult_t recordApiError(strataComm_t comm, strataResult_t code, const std::string& message);

/// The calling thread's group depth: strataGroupStart calls not yet ended.
int apiGroupDepth();

/// Ends the calling thread's outermost group without running what it holds (ncclGroupSimulateEnd). Inner
/// levels just return, as strataGroupEnd does. strataInvalidUsage outside a group.
strataResult_t discardApiGroup();

}  // namespace strata
