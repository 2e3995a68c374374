// strata_soak's communicators: split rounds (random colors or a shrink, operations on the parts, a nested split,
// then destroy, abort or revoke) and re-created worlds; and how a communicator goes.
#pragma once

#include <cstddef>
#include <string>

#include "comm_view.h"
#include "shared_random.h"
#include "step.h"

namespace soak {

// How a communicator goes: destroy; abort; or revoke, then destroy. Abort and revoke do not wait for peers, so the
// caller first makes sure that every rank is done with it.
enum class Release { kDestroy, kAbort, kRevoke };

/// Releases `v` as `how` says (`why` for messages) and forgets it as a live communicator.
void release(CommView& v, Release how, const std::string& why);

// Random colors (some ranks out), or a shrink of the world that excludes random ranks (never `decider`, whose
// process hosts the bootstrap root); a few operations on each part, maybe a split of a part; then destroy, or abort
// or revoke once a barrier on the world shows that every rank has finished with the parts.
// A world shrunk before (excluding ranks that are alive and take part again) is shrunk again like any other.
void splitRound(CommView& world, int decider, SharedRandom& rng, size_t maxCount, Buffers& buf, Stats& st);

// A new world: a split of the old one with one color and random keys (so ranks move), then the old one goes.
// `decider` (the rank that decides when to sample and stop) follows its process to its new rank.
void recreateWorld(CommView& world, int& decider, SharedRandom& rng, Stats& st);

}  // namespace soak
