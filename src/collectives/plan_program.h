// Algorithms users bring: a collective's schedule as a file, in chunk units, for every rank at once. Two formats
// load into one PlanProgram:
//  - MSCCL's XML (msccl-tools' MSCCLang writes it): a `gpu` per rank, a `tb` (thread block) per lane with one send
//    peer, one receive peer and a channel, `step`s of the types s, r, rrc, rrs, rcs, rrcs, cpy, re and nop on chunks
//    of the input (i), output (o) and scratch (s) buffers, and cross-lane waits (depid/deps);
//  - Strata's own plan file (JSON, "strata-plan"), which any built-in algorithm can be dumped to (dumpProgram).
//
// A program's buffers are cut into chunks as MSCCL's executor cuts them: the larger of the input and output holds
// `chunksPerLoop` chunks, every chunk of every buffer (scratch included) has the same size, and a buffer of n
// blocks (the output of an all-gather, the input of a reduce-scatter, both of an all-to-all) holds chunksPerLoop /
// n chunks per block. For a call of `count` elements per block, a chunk is count / k elements (k chunks per
// block); a chunk longer than a quarter of the executor's pipeline chunk (a piece, at the defaults) runs in loops,
// each loop running every step on the next slice of each chunk (the last loop smaller), so a step holds one slot
// of its connection per chunk; the
// count % k elements left at the end of each block run concurrently with the default built-in algorithm on a
// connection of their own (planOf).
//
// Loading checks the program's structure and names the gpu, the tb and the step of what is wrong; the proof that
// it computes its collective and cannot deadlock is core/plan_proof.h's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collectives/coll_args.h"
#include "collectives/cost_shape.h"
#include "collectives/plan.h"

namespace strata {

/// A region of a program's buffer in chunks.
struct ChunkRegion {
  int buf = kBufSend;  // kBufSend (MSCCL's i), kBufRecv (o), kBufScratch (s)
  int offset = 0;      // chunks
  int count = 0;       // chunks
};

struct ProgramStep {
  OpKind kind = OpKind::kNop;
  int sendPeer = -1, recvPeer = -1;
  int channel = 0;
  ChunkRegion src, dst;
  /// Cross-lane wait: lane `afterLane` (an index into the rank's lanes) has completed step `afterStep`; -1: none.
  int afterLane = -1, afterStep = -1;
  bool hasDep = false;  // MSCCL's hasdep: another step waits for this one (the executor sets a flag)
};

struct ProgramLane {
  int id = 0;  // MSCCL's tb id (the lane's index in a Strata plan file)
  int sendPeer = -1, recvPeer = -1, channel = 0;
  std::vector<ProgramStep> steps;
};

struct ProgramRank {
  int inputChunks = 0, outputChunks = 0, scratchChunks = 0;
  std::vector<ProgramLane> lanes;
};

struct PlanProgram {
  std::string file;    // where it was read from, for messages
  std::string format;  // "msccl" or "strata-plan"
  std::string name;    // the algorithm's name (MSCCL's algo name)
  std::string proto;   // MSCCL's proto (Simple, LL, LL128), informative
  CollKind kind = CollKind::kAllReduce;
  int nranks = 0;
  int nchannels = 1;
  int chunksPerLoop = 1;
  bool inPlace = false, outOfPlace = true;  // the placements the program serves
  uint64_t minBytes = 0, maxBytes = UINT64_MAX;
  std::vector<ProgramRank> ranks;

  /// Blocks of `buf` (kBufSend or kBufRecv): n for the per-rank buffers of all-gather, reduce-scatter, all-to-all.
  int blocks(int buf) const;
  /// Chunks per block of the larger buffer: a call of `count` elements per block has chunks of count / this.
  int chunksPerBlock() const;
  /// Channels the program's lanes use (1 + the largest).
  int channels() const;
  /// Where step `step` of lane `lane` of rank `rank` is, as the file names it ("gpu 2 tb 3 step 5").
  std::string where(int rank, int lane, int step) const;
};

/// Reads an MSCCL XML or a Strata plan file (by its content: '<' or '{' first) and checks its structure. Throws
/// InvalidArgument naming the file and what is wrong (and where: gpu, tb, step).
std::shared_ptr<const PlanProgram> loadProgram(const std::string& path);
/// The same from text already read; `origin` names it in messages.
std::shared_ptr<const PlanProgram> parseProgram(const std::string& text, const std::string& origin);
std::shared_ptr<const PlanProgram> parseMscclXml(const std::string& text, const std::string& origin);
std::shared_ptr<const PlanProgram> parseStrataPlan(const std::string& text, const std::string& origin);

/// The structural checks every loaded program passes (called by the parsers): peers, channels, chunks inside
/// their buffers, dependencies that exist and form no cycle, and every send matched by a receive of as many chunks
/// on the same channel. Throws InvalidArgument.
void checkProgram(const PlanProgram& p);

/// Where an op of a plan made by planOf came from (for the proof's messages).
struct OpOrigin {
  int lane = -1;  // program lane; -1: the tail's built-in plan
  int step = -1;  // step of that lane
  size_t loop = 0;
};

/// Whether the program serves a call on `nranks` ranks of `bytes` (nccl-tests' size), `inPlace`, with `root`
/// (broadcast and reduce: a file describes root 0); when not, `why` says why.
bool programServes(const PlanProgram& p, int nranks, size_t bytes, bool inPlace, std::string* why, int root = 0);

/// Rank args.rank's plan of the program for args (kind and nranks must be the program's): the program's steps on
/// each loop's slices, then the tail. `origins`, when given, gets each op's origin (index: lane, op).
Plan planOf(const PlanProgram& p, const CollArgs& args, std::vector<std::vector<OpOrigin>>* origins = nullptr);

/// Every step's level on the program's critical path (index: rank, lane, step): one more than the latest of its
/// lane predecessor, the step it waits for and, for a receive, the send it pairs with. `longest` gets the path's
/// length in steps. Throws InvalidArgument if the steps wait on each other in a cycle (through messages).
std::vector<std::vector<std::vector<int>>> stepLevels(const PlanProgram& p, int* longest);

/// What the cost model prices of a program, per loop, for its busiest rank.
struct ProgramFigures {
  int criticalSteps = 1;     // stepLevels' longest path
  int sendPeers = 1;         // peers it sends to
  double sentChunks = 0;     // chunks it sends
  double reducedChunks = 0;  // chunks it reduces
};
ProgramFigures programFigures(const PlanProgram& p);
/// The program's cost shape for a call whose larger buffer is `bytes`: the critical path as rounds in which the
/// busiest rank sends its chunks to its peers at once (Phase::Pattern::kDirect), and its reductions.
std::vector<Phase> programShape(const PlanProgram& p, const ProgramFigures& f, double bytes);

/// A built-in algorithm's plans for `nranks` ranks (hostOf: the host of each rank, empty: one) at `count` elements
/// per block, in one loop, as a program whose chunk is one element: planOf at that count gives the same plans.
PlanProgram dumpProgram(CollKind kind, const std::string& algorithm, int nranks, size_t count,
                        const std::vector<int>& hostOf = {});
/// The program as a Strata plan file.
std::string writeStrataPlan(const PlanProgram& p);

}  // namespace strata
