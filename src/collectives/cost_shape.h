// An algorithm's cost shape: the phases the cost model (cost_model.cc) prices, stated as plain numbers (steps on
// the critical path, bytes per step, messages, bytes reduced). Each algorithm writes its own next to its generator
// (its record, algorithm_record.h), from the phases below; the cost model only prices phases, so it never needs to
// know an algorithm by name.
//
// tests/unit/test_cost_model.cc builds the real plans of every algorithm at n = 1..33 over several host layouts and
// checks each shape's counts (shapeCounts) against them, so a generator and its shape cannot drift apart.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "collectives/host_layout.h"
#include "collectives/rhd_pattern.h"

namespace strata {

/// One phase of an algorithm: the unit the time formula prices, with its shape in the fields its pattern reads.
struct Phase {
  enum class Pattern {
    kRing,      // `steps` ring steps over `members`, each rank sending `stepBytes` per step
    kDirect,    // `steps` rounds in which every rank sends `stepBytes` to each of `fanout` peers at once (each
                // round priced alike: `reduceBytes` / `steps` reduced in each)
    kHalving,   // recursive halving of `stepBytes` over `rhd`'s virtual ranks, after a pair step of it
    kDoubling,  // recursive doubling up to `stepBytes` over `rhd`'s virtual ranks, then a pair step of it
    kTree,      // double binary tree: `steps` hops of the first `stepBytes` chunk, then the busiest rank's
                // `fanout` streams of `streamBytes` each (up and down, in its two trees)
    kRail,      // `steps` ring steps between hosts, each rank sending `stepBytes`, `flows` rings per host
    kHandoff,   // one intra-host step that hands finished blocks to their owners (priced as latency)
    kCopy,      // a local copy of `stepBytes`
    kChain,     // a pipelined chain along `members` (`steps` hops): all `stepBytes` cross every hop, in chunks
    kRounds,    // `steps` rounds of one small message (`stepBytes`) from every rank, each waiting for the last
  };
  Pattern pattern = Pattern::kCopy;
  int steps = 0;             // steps on the critical path
  double stepBytes = 0;      // bytes of one step's message (kHalving, kDoubling: of the data halved)
  int fanout = 1;            // messages (or streams) a rank sends per step
  double streamBytes = 0;    // kTree: bytes of one stream
  double reduceBytes = 0;    // bytes a rank reduces over the phase
  std::vector<int> members;  // kRing, kChain: the ranks, in order
  int flows = 1;             // kRail: rings leaving each host at once
  RhdPattern rhd{1};         // kHalving, kDoubling: the virtual ranks and pairs
  /// kRing, kRail: the plan is pipelined in `pieces` pieces (the hierarchical all-reduce): each step's message is
  /// cut per piece, and the phases with pieces > 1 overlap (the cost model's timeUs).
  int pieces = 1;
  /// Messages of one step: its bytes cut per piece, each piece in chunks.
  double stepMessages(double chunkBytes) const {
    return pieces * std::max(1.0, std::ceil(stepBytes / pieces / chunkBytes));
  }
};

/// What a cost shape is written against: where the ranks sit and the plans' pipeline chunk, with constructors of
/// the phases the built-in algorithms are made of.
class ShapeBuilder {
 public:
  ShapeBuilder(const HostLayout& layout, size_t chunkBytes) : layout_(layout), chunkBytes_(chunkBytes) {}

  const HostLayout& layout() const { return layout_; }
  int nranks() const { return layout_.nranks(); }
  size_t chunkBytes() const { return chunkBytes_; }

  /// Every rank, in rank order.
  std::vector<int> allRanks() const;
  /// Ranks of a largest host, in order: the intra-host rings of a hierarchical plan all look alike.
  std::vector<int> largestHost() const;

  /// A ring over `members` (no steps if it has one member).
  Phase ring(std::vector<int> members, int steps, double stepBytes, double reduceBytes) const;
  /// `rounds` direct exchanges with every other rank.
  Phase direct(int rounds, double stepBytes, double reduceBytes) const;
  /// Recursive halving (Phase::Pattern::kHalving) or doubling of `bytes` over every rank.
  Phase rhd(Phase::Pattern pattern, double bytes, bool reduce) const;
  /// A phase of `pattern` given by its steps and step bytes only (kHandoff, kCopy).
  Phase simple(Phase::Pattern pattern, int steps, double stepBytes) const;
  /// `steps` ring steps between hosts, one ring per rail: each carries 1/R of `bytes` (R rails) in H blocks.
  Phase rail(int steps, double bytes, bool reduce) const;
  /// A pipelined chain along `members` carrying `bytes` over each hop, reducing them at every hop if `reduce`.
  Phase chain(std::vector<int> members, double bytes, bool reduce) const;
  /// `rounds` rounds of one message of `bytes` per rank.
  Phase rounds(int rounds, double bytes) const;

 private:
  const HostLayout& layout_;
  size_t chunkBytes_;
};

/// An algorithm's phases for a call whose full buffer (nccl-tests' "size") is `bytes`. Never empty for a layout the
/// algorithm applies to (AlgorithmRecord::applies) with two or more ranks.
using CostShape = std::vector<Phase> (*)(const ShapeBuilder& shape, double bytes);

}  // namespace strata
