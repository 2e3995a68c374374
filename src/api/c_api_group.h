// The calling thread's group of the C ABI (strataGroupStart .. strataGroupEnd), as the collective entry points
// (c_api.cc) add to it. Its depth is apiGroupDepth() (api/c_api_internal.h).
#pragma once

#include <memory>

namespace strata {

class CommImpl;
struct CollCall;

/// Holds a validated call of the calling thread's open group until the group's outermost end runs it.
void holdGroupCall(std::shared_ptr<CommImpl> comm, const CollCall& call);

}  // namespace strata
