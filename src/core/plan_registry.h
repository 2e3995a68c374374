// STRATA_PLANS: algorithm files (MSCCL's XML, Strata's plan files) loaded, proven (plan_proof.h) and handed to a
// communicator's selector. Each file is read and proven once per process for a piece size and slot count (a
// communicator made later, a split or a shrink, reuses it while the file is unchanged).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "collectives/selector.h"

namespace strata {

/// The programs of `spec` (comma-separated files and folders; a folder's *.xml and *.json files in name order).
/// Throws InvalidArgument naming the file that cannot be read, fails its proof, or gives a name that a built-in
/// algorithm or another file already has for its collective.
std::vector<LoadedProgram> loadPlanPrograms(const std::string& spec, size_t pieceBytes, int nslots);

/// One line naming the loaded programs and their digests, equal on ranks that loaded the same files ("" for none).
std::string programsDigest(const std::vector<LoadedProgram>& programs);

}  // namespace strata
