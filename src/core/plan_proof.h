// The proof a loaded plan passes before it runs: every rank's plan, run together in the reference interpreter
// (interpreter.h) at the connection capacity the executor uses, on random data in every class of element the
// collective permits (1-, 2-, 4- and 8-byte elements; integers and floats), in and out of place as the file allows,
// at a count that fits one loop and at one that runs several loops and a tail, must give every rank the
// collective's reference result and must never deadlock.
#pragma once

#include <cstddef>
#include <string>

#include "collectives/plan_program.h"

namespace strata {

struct ProofOptions {
  size_t pieceBytes = 128 * 1024;  // the executor's Config::pieceBytes
  int nslots = 8;                  // the executor's Config::nslots
};

/// Runs the proof; throws InvalidArgument naming the file and what is wrong: a deadlock with every lane's position
/// (gpu, tb, step), or the first wrong chunk of the first wrong rank with its expected and actual values. Returns
/// one line saying what was run.
std::string proveProgram(const PlanProgram& p, const ProofOptions& options = {});

}  // namespace strata
