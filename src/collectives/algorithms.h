// The algorithm table: which algorithms each collective has, and the plan of a call by one of them. The
// generators behind it are pure functions (collective, n, rank, count, options) -> Plan (generators.h).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "collectives/coll_args.h"
#include "collectives/plan.h"

namespace strata {

/// Names of the algorithms `kind` supports, the first being the default.
std::vector<std::string> algorithmsFor(CollKind kind);
/// Builds the plan; throws InvalidArgument for an unknown algorithm for this collective.
Plan makePlan(const CollArgs& args, const std::string& algorithm);
}  // namespace strata
