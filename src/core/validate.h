// Argument checks of one call, done once where the call enters the library (c_api.cc), before it is queued
// or run: an invalid call fails with InvalidArgument naming the argument, and the communicator stays usable.
#pragma once

#include "core/call.h"
#include "core/red_ops.h"

namespace strata {

/// Throws InvalidArgument describing what is wrong with `call` on `rank` of `nranks`.
void validateCall(const CollCall& call, int rank, int nranks, const RedOpTable& ops);

}  // namespace strata
