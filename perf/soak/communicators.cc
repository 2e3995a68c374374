// strata_soak's communicators (communicators.h): splits and shrinks checked, split rounds, re-created worlds.
#include "communicators.h"

#include <algorithm>
#include <vector>

#include "failure.h"

namespace soak {

namespace {

// The ranks of a parent (0..n-1) with this rank's color, in (key, parent rank) order: the split's members.
std::vector<int> splitMembers(const std::vector<int>& color, const std::vector<int>& key, int n, int me) {
  std::vector<int> members;
  for (int r = 0; r < n; ++r)
    if (color[static_cast<size_t>(r)] == color[static_cast<size_t>(me)]) members.push_back(r);
  std::stable_sort(members.begin(), members.end(),
                   [&](int a, int b) { return key[static_cast<size_t>(a)] < key[static_cast<size_t>(b)]; });
  return members;
}

// Splits `parent` with this rank's color and key from the arrays (indexed by parent rank) and checks the new
// communicator's size and this rank's place in it. Returns an empty view for STRATA_SPLIT_NOCOLOR.
CommView split(const CommView& parent, const std::vector<int>& color, const std::vector<int>& key,
               const std::string& name) {
  const int myColor = color[static_cast<size_t>(parent.rank)];
  CommView child;
  child.name = name;
  expectOk(strataCommSplit(parent.comm, myColor, key[static_cast<size_t>(parent.rank)], &child.comm, nullptr),
           parent.comm, "strataCommSplit of " + parent.name + " into " + name);
  if (myColor == STRATA_SPLIT_NOCOLOR) {
    if (child.comm) die("strataCommSplit with STRATA_SPLIT_NOCOLOR returned a communicator for %s", name.c_str());
    return child;
  }
  gLiveComms.push_back(child.comm);
  const std::vector<int> members = splitMembers(color, key, parent.size, parent.rank);
  const int wantRank = static_cast<int>(std::find(members.begin(), members.end(), parent.rank) - members.begin());
  expectOk(strataCommCount(child.comm, &child.size), child.comm, "strataCommCount");
  expectOk(strataCommUserRank(child.comm, &child.rank), child.comm, "strataCommUserRank");
  if (child.size != static_cast<int>(members.size()) || child.rank != wantRank)
    die("strataCommSplit of %s (color %d, key %d): rank %d of %d, expected rank %d of %zu", parent.name.c_str(),
        myColor, key[static_cast<size_t>(parent.rank)], child.rank, child.size, wantRank, members.size());
  return child;
}

// Shrinks `parent` to the ranks not in `excluded` (0/1 by parent rank; the excluded do not call it) and checks the
// new communicator's size and this rank's place in it (the parent's order). Returns an empty view when excluded.
CommView shrink(const CommView& parent, const std::vector<int>& excluded, const std::string& name) {
  std::vector<int> list;
  int wantRank = 0;
  for (int r = 0; r < parent.size; ++r) {
    if (excluded[static_cast<size_t>(r)]) list.push_back(r);
    else if (r < parent.rank) ++wantRank;
  }
  CommView child;
  child.name = name;
  if (excluded[static_cast<size_t>(parent.rank)]) return child;
  expectOk(strataCommShrink(parent.comm, list.data(), static_cast<int>(list.size()), &child.comm, nullptr,
                            STRATA_SHRINK_DEFAULT),
           parent.comm, "strataCommShrink of " + parent.name + " into " + name);
  gLiveComms.push_back(child.comm);
  expectOk(strataCommCount(child.comm, &child.size), child.comm, "strataCommCount");
  expectOk(strataCommUserRank(child.comm, &child.rank), child.comm, "strataCommUserRank");
  if (child.size != parent.size - static_cast<int>(list.size()) || child.rank != wantRank)
    die("strataCommShrink of %s excluding %zu ranks: rank %d of %d, expected rank %d of %d", parent.name.c_str(),
        list.size(), child.rank, child.size, wantRank, parent.size - static_cast<int>(list.size()));
  return child;
}

}  // namespace

void release(CommView& v, Release how, const std::string& why) {
  if (!v.comm) return;
  gLiveComms.erase(std::find(gLiveComms.begin(), gLiveComms.end(), v.comm));
  const std::string what = v.name + " (" + why + ")";
  if (how == Release::kRevoke)
    expectOk(strataCommRevoke(v.comm, STRATA_REVOKE_DEFAULT), v.comm, "strataCommRevoke of " + what);
  if (how == Release::kAbort) expectOk(strataCommAbort(v.comm), nullptr, "strataCommAbort of " + what);
  else expectOk(strataCommDestroy(v.comm), nullptr, "strataCommDestroy of " + what);
  v.comm = nullptr;
}

void splitRound(CommView& world, int decider, SharedRandom& rng, size_t maxCount, Buffers& buf, Stats& st) {
  const int n = world.size;
  const int ncolors = 1 + static_cast<int>(rng.below(static_cast<uint64_t>(std::min(n, 3))));
  std::vector<int> color(static_cast<size_t>(n)), key(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    color[static_cast<size_t>(r)] =
        rng.chance(0.125) ? STRATA_SPLIT_NOCOLOR : static_cast<int>(rng.below(static_cast<uint64_t>(ncolors)));
    key[static_cast<size_t>(r)] = static_cast<int>(rng.below(3));
  }
  std::vector<Step> steps(1 + rng.below(3));
  for (Step& s : steps) s = drawStep(rng, maxCount);
  // The nested split's arrays are indexed by rank in the part; world-sized so every rank draws the same.
  const bool nested = rng.chance(0.25);
  std::vector<int> nestedColor(static_cast<size_t>(n)), nestedKey(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    nestedColor[static_cast<size_t>(r)] = static_cast<int>(rng.below(2));
    nestedKey[static_cast<size_t>(r)] = static_cast<int>(rng.below(3));
  }
  const Step nestedStep = drawStep(rng, maxCount);
  const bool useShrink = rng.chance(0.25);
  std::vector<int> excluded(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) excluded[static_cast<size_t>(r)] = r != decider && rng.chance(0.3);
  const uint64_t end = rng.below(8);  // 0-1: abort, 2: revoke, else destroy
  const Release how = end < 2 ? Release::kAbort : end == 2 ? Release::kRevoke : Release::kDestroy;

  CommView part;
  if (useShrink) {
    part = shrink(world, excluded, "shrink " + std::to_string(st.shrinks));
    ++st.shrinks;
  } else {
    const int myColor = color[static_cast<size_t>(world.rank)];
    part = split(world, color, key, "split " + std::to_string(st.splits) + " color " + std::to_string(myColor));
    ++st.splits;
  }
  if (part.comm) {
    for (const Step& s : steps) {
      runStep(s, part, buf, st);
      st.subOps += s.ops.size();
    }
    if (nested) {
      CommView inner = split(part, nestedColor, nestedKey,
                             part.name + " / color " + std::to_string(nestedColor[static_cast<size_t>(part.rank)]));
      runStep(nestedStep, inner, buf, st);
      st.subOps += nestedStep.ops.size();
      release(inner, Release::kDestroy, "nested split done");
      ++st.nestedSplits;
    }
  }
  if (how != Release::kDestroy) {
    expectOk(strataBarrier(world.comm, nullptr), world.comm,
             "strataBarrier on " + world.name + " before an abort or revoke");
    if (part.comm) ++(how == Release::kAbort ? st.aborts : st.revokes);
  }
  release(part, how, "split round done");
}

void recreateWorld(CommView& world, int& decider, SharedRandom& rng, Stats& st) {
  const int n = world.size;
  std::vector<int> color(static_cast<size_t>(n), 0), key(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) key[static_cast<size_t>(r)] = static_cast<int>(rng.below(static_cast<uint64_t>(n)));
  const bool abort = rng.chance(0.25);
  ++st.recreates;
  CommView fresh = split(world, color, key, "world " + std::to_string(st.recreates));
  const std::vector<int> order = splitMembers(color, key, n, world.rank);
  decider = static_cast<int>(std::find(order.begin(), order.end(), decider) - order.begin());
  if (abort) {
    // Abort does not wait for peers: first make sure every rank is done with the old world.
    expectOk(strataBarrier(fresh.comm, nullptr), fresh.comm, "strataBarrier on " + fresh.name + " before an abort");
    ++st.aborts;
  }
  release(world, abort ? Release::kAbort : Release::kDestroy, "replaced by " + fresh.name);
  world = fresh;
}

}  // namespace soak
