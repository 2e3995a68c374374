// The per-plan analysis of which sends may travel as references to the sender's memory (shm single copy): a
// reference is refused where the plan writes the region after (or beside) the send.
#include <gtest/gtest.h>

#include <vector>

#include "collectives/algorithms.h"
#include "collectives/coll_args.h"
#include "collectives/generators.h"
#include "collectives/plan.h"
#include "collectives/send_refs.h"

namespace strata {
namespace {

// Both with rank 1, the peer of every op here.
Op send(Region src) { return gen::sendOp(1, src); }
Op recv(Region dst) { return gen::recvOp(1, dst); }

Plan planOf(std::vector<std::vector<Op>> lanes) {
  Plan p;
  p.rank = 0;
  p.nranks = 2;
  p.lanes = std::move(lanes);
  return p;
}

TEST(SendRefs, ASendWhoseRegionALaterOpOfItsLaneWritesIsRefused) {
  const Plan p = planOf({{send({kBufRecv, 0, 100}), recv({kBufRecv, 99, 10}), send({kBufRecv, 200, 100})}});
  const SendRefs refs(p, {});
  EXPECT_FALSE(refs.allows(&p.lanes[0][0]));
  EXPECT_TRUE(refs.allows(&p.lanes[0][2]));
  EXPECT_EQ(refs.size(), 1u);
}

TEST(SendRefs, AnEarlierWriteOrADisjointLaterOneIsNoObstacle) {
  const Plan p = planOf({{recv({kBufRecv, 0, 100}), send({kBufRecv, 0, 100}), recv({kBufRecv, 100, 100})}});
  const SendRefs refs(p, {});
  EXPECT_TRUE(refs.allows(&p.lanes[0][1]));
}

TEST(SendRefs, AWriteInAnotherLaneIsRefusedWhateverItsPosition) {
  const Plan p = planOf({{send({kBufSend, 0, 100})}, {recv({kBufSend, 50, 1})}});
  EXPECT_FALSE(SendRefs(p, {}).allows(&p.lanes[0][0]));
}

TEST(SendRefs, CopySendWhoseOwnDestinationOverlapsItsSourceIsRefused) {
  Op cs;
  cs.kind = OpKind::kCopySend;
  cs.sendPeer = 1;
  cs.src = {kBufRecv, 0, 100};
  cs.dst = {kBufRecv, 50, 100};
  Op same = cs;
  same.dst = cs.src;  // a copy onto itself writes nothing
  const Plan p = planOf({{cs}, {}});
  const Plan q = planOf({{same}});
  EXPECT_FALSE(SendRefs(p, {}).allows(&p.lanes[0][0]));
  EXPECT_TRUE(SendRefs(q, {}).allows(&q.lanes[0][0]));
}

// In place the send buffer is part of the receive buffer: the alias makes a write there visible.
TEST(SendRefs, AliasedBuffersAreOneMemory) {
  const Plan p = planOf({{send({kBufSend, 0, 10}), recv({kBufRecv, 12, 1})}});
  const BufferAlias alias{kBufSend, kBufRecv, 5};
  EXPECT_TRUE(SendRefs(p, {}).allows(&p.lanes[0][0]));
  EXPECT_FALSE(SendRefs(p, {&alias, 1}).allows(&p.lanes[0][0]));
}

CollArgs ringArgs(CollKind kind, bool inPlace) {
  CollArgs a;
  a.kind = kind;
  a.nranks = 4;
  a.rank = 1;
  a.count = 1 << 20;
  a.inPlace = inPlace;
  a.chunkElems = 1 << 16;
  return a;
}

// An in-place ring all-reduce sends its own segment first and later receives the reduced segment into the same
// memory: that first send must copy. The all-gather half forwards what it has received (kRecvCopySend), and
// nothing overwrites that afterwards: those may go as references.
TEST(SendRefs, InPlaceRingAllReduceCopiesItsFirstSendsAndForwardsTheGatherByReference) {
  const Plan p = makePlan(ringArgs(CollKind::kAllReduce, true), "ring");
  const BufferAlias alias{kBufSend, kBufRecv, 0};
  const SendRefs refs(p, {&alias, 1});
  size_t firstSends = 0, forwards = 0, forwardsAllowed = 0;
  for (const auto& lane : p.lanes) {
    for (const Op& op : lane) {
      if (op.kind == OpKind::kSend) {
        ++firstSends;
        EXPECT_FALSE(refs.allows(&op)) << "a send of a region the ring later rewrites";
      }
      if (op.kind == OpKind::kRecvCopySend) {
        ++forwards;
        forwardsAllowed += refs.allows(&op);
      }
    }
  }
  EXPECT_GT(firstSends, 0u);
  EXPECT_GT(forwards, 0u);
  EXPECT_EQ(forwardsAllowed, forwards);
}

// Out of place all-gather: every send (the own block's copySend, the forwards) may go as a reference.
TEST(SendRefs, OutOfPlaceRingAllGatherSendsEverythingByReference) {
  const Plan p = makePlan(ringArgs(CollKind::kAllGather, false), "ring");
  const SendRefs refs(p, {});
  size_t sends = 0;
  for (const auto& lane : p.lanes)
    for (const Op& op : lane)
      if (op.sends()) {
        ++sends;
        EXPECT_TRUE(refs.allows(&op)) << opKindName(op.kind);
      }
  EXPECT_GT(sends, 0u);
  EXPECT_TRUE(SendRefs::worthAnalysing(p, 4, 131072));
  EXPECT_FALSE(SendRefs::worthAnalysing(makePlan(ringArgs(CollKind::kAllGather, false), "ring"), 4, 1024));
}

// Without its peers' plans a ring all-reduce would send its first (reduce-scatter) sends by reference, which the
// next rank only reduces: dropReducedByPeers keeps the all-gather forwards and drops those.
TEST(SendRefs, SendsThePeerReducesGoBackToCopying) {
  for (int n : {2, 3, 4}) {
    SCOPED_TRACE(n);
    CollArgs a = ringArgs(CollKind::kAllReduce, false);
    a.nranks = n;
    a.rank = 1;
    const Plan p = makePlan(a, "ring");
    SendRefs refs(p, {});
    size_t sends = 0;
    for (const auto& lane : p.lanes)
      for (const Op& op : lane)
        if (op.kind == OpKind::kSend) {
          ++sends;
          EXPECT_TRUE(refs.allows(&op)) << "out of place the send buffer is never written";
        }
    ASSERT_GT(sends, 0u);
    refs.dropReducedByPeers(p, [&](int peer) {
      CollArgs b = a;
      b.rank = peer;
      return makePlan(b, "ring");
    });
    size_t forwards = 0;
    for (const auto& lane : p.lanes) {
      for (const Op& op : lane) {
        if (op.kind == OpKind::kSend) {
          EXPECT_FALSE(refs.allows(&op)) << "the next rank reduces it";
        }
        if (op.kind == OpKind::kRecvCopySend) {
          ++forwards;
          EXPECT_TRUE(refs.allows(&op)) << opKindName(op.kind) << ": the next rank only stores (and forwards) it";
        }
        if (op.kind == OpKind::kRecvReduceCopySend) {
          EXPECT_FALSE(refs.allows(&op)) << "a freshly reduced piece goes through the FIFO (cheaper than a read)";
        }
      }
    }
    if (n > 2) {
      EXPECT_GT(forwards, 0u);  // two ranks forward nothing but the reduced piece
    }
  }
  // All-gather: every receiver only stores: nothing is dropped.
  const Plan g = makePlan(ringArgs(CollKind::kAllGather, false), "ring");
  SendRefs refs(g, {});
  const size_t before = refs.size();
  refs.dropReducedByPeers(g, [&](int peer) {
    CollArgs b = ringArgs(CollKind::kAllGather, false);
    b.rank = peer;
    return makePlan(b, "ring");
  });
  EXPECT_EQ(refs.size(), before);
}

}  // namespace
}  // namespace strata
