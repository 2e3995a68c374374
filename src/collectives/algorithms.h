// The algorithm table: every algorithm's record (algorithm_record.h), gathered from the family files in one
// order (the first record of a collective is its default), the lookups everything else uses, and the plan of a
// call by one of them. The generators behind it are pure functions (collective, n, rank, count, options) -> Plan.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "collectives/algorithm_record.h"
#include "collectives/coll_args.h"
#include "collectives/plan.h"

namespace strata {

/// Every record, collective by collective (in CollKind order), each collective's in table order.
std::vector<const AlgorithmRecord*> allAlgorithms();
/// The records of `kind`, the default first.
std::vector<const AlgorithmRecord*> algorithmRecords(CollKind kind);
/// Names of the algorithms `kind` supports, the first being the default.
std::vector<std::string> algorithmsFor(CollKind kind);
/// The default algorithm of `kind` (every collective has one).
const AlgorithmRecord& defaultAlgorithm(CollKind kind);
/// The record of `name` for `kind`, or nullptr.
const AlgorithmRecord* findAlgorithm(CollKind kind, std::string_view name);
/// The record of `name` for `kind`; throws InvalidArgument naming the algorithms `kind` has.
const AlgorithmRecord& algorithmOf(CollKind kind, std::string_view name);
/// Builds the plan; throws InvalidArgument for an unknown algorithm for this collective.
Plan makePlan(const CollArgs& args, const std::string& algorithm);

}  // namespace strata
