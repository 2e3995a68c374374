// NCCL's device API (nccl_device.h: device communicators, teams, LSA and GIN barriers, LL all-to-all), host side.
// Strata does not provide it: the functions are exported so that programs and libraries linking them (torch links
// ncclDevCommCreate and the pointer queries) still load, and each says so with ncclInvalidUsage. The team
// queries, which cannot fail, answer with rank arithmetic: the world team is every rank, and a rank's LSA and
// rail teams are itself alone (no symmetric device memory is shared).
//
// nccl_device.h needs a CUDA compiler, so these are declared here with the same C ABI: opaque pointers, and the
// one struct passed by value (ncclTeam: three ints).
#include <string>

#include "nccl/nccl_state.h"

using namespace strata;
using namespace strata::nccl;

namespace {

struct Team {  // NCCL's struct ncclTeam
  int nRanks, rank, stride;
};

ncclResult_t notProvided(ncclComm_t comm, const char* what) {
  return fail(comm, ncclInvalidUsage,
              std::string(what) +
                  ": NCCL's device API (device communicators, LSA/GIN barriers and pointers, LL all-to-all) is not "
                  "provided by Strata's NCCL drop-in; use the host API's collectives");
}

Team selfTeam() { return Team{1, 0, 1}; }

}  // namespace

STRATA_NCCL_API(ncclResult_t, ncclCommQueryProperties, ncclComm_t comm, void* props) {
  (void)props;
  return notProvided(comm, "ncclCommQueryProperties");
}

STRATA_NCCL_API(ncclResult_t, ncclDevCommCreate, ncclComm_t comm, const void* reqs, void* outDevComm) {
  (void)reqs, (void)outDevComm;
  return notProvided(comm, "ncclDevCommCreate");
}

STRATA_NCCL_API(ncclResult_t, ncclDevCommDestroy, ncclComm_t comm, const void* devComm) {
  (void)devComm;
  return notProvided(comm, "ncclDevCommDestroy");
}

STRATA_NCCL_API(ncclResult_t, ncclGetLsaMultimemDevicePointer, ncclWindow_t window, size_t offset, void** outPtr) {
  (void)offset, (void)outPtr;
  return notProvided(window ? window->comm : nullptr, "ncclGetLsaMultimemDevicePointer");
}

STRATA_NCCL_API(ncclResult_t, ncclGetMultimemDevicePointer, ncclWindow_t window, size_t offset, void* multimem,
                void** outPtr) {
  (void)offset, (void)multimem, (void)outPtr;
  return notProvided(window ? window->comm : nullptr, "ncclGetMultimemDevicePointer");
}

STRATA_NCCL_API(ncclResult_t, ncclGetLsaDevicePointer, ncclWindow_t window, size_t offset, int lsaRank, void** outPtr) {
  (void)offset, (void)lsaRank, (void)outPtr;
  return notProvided(window ? window->comm : nullptr, "ncclGetLsaDevicePointer");
}

STRATA_NCCL_API(ncclResult_t, ncclGetPeerDevicePointer, ncclWindow_t window, size_t offset, int peer, void** outPtr) {
  (void)offset, (void)peer, (void)outPtr;
  return notProvided(window ? window->comm : nullptr, "ncclGetPeerDevicePointer");
}

STRATA_NCCL_API(ncclResult_t, ncclGinBarrierCreateRequirement, ncclComm_t comm, Team team, int nBarriers,
                void* outHandle, void* outReq) {
  (void)team, (void)nBarriers, (void)outHandle, (void)outReq;
  return notProvided(comm, "ncclGinBarrierCreateRequirement");
}

STRATA_NCCL_API(ncclResult_t, ncclLsaBarrierCreateRequirement, Team team, int nBarriers, void* outHandle,
                void* outReq) {
  (void)team, (void)nBarriers, (void)outHandle, (void)outReq;
  return notProvided(nullptr, "ncclLsaBarrierCreateRequirement");
}

STRATA_NCCL_API(ncclResult_t, ncclGinOutboxCreateRequirement, int nBlocks, int sizeLog2, void* outHandle,
                void* outReq) {
  (void)nBlocks, (void)sizeLog2, (void)outHandle, (void)outReq;
  return notProvided(nullptr, "ncclGinOutboxCreateRequirement");
}

STRATA_NCCL_API(ncclResult_t, ncclGinInboxA2ACreateRequirement, Team peers, int nBlocks, int sizeLog2, void* outHandle,
                void* outReq) {
  (void)peers, (void)nBlocks, (void)sizeLog2, (void)outHandle, (void)outReq;
  return notProvided(nullptr, "ncclGinInboxA2ACreateRequirement");
}

STRATA_NCCL_API(ncclResult_t, ncclLLA2ACreateRequirement, int nBlocks, int nSlots, void* outHandle, void* outReq) {
  (void)nBlocks, (void)nSlots, (void)outHandle, (void)outReq;
  return notProvided(nullptr, "ncclLLA2ACreateRequirement");
}

// Slots of an LL all-to-all: no such buffers exist here, so none.
STRATA_NCCL_API(int, ncclLLA2ACalcSlots, int maxElts, int maxEltSize) {
  (void)maxElts, (void)maxEltSize;
  return 0;
}

STRATA_NCCL_API(Team, ncclTeamWorld, ncclComm_t comm) {
  ncclResult_t err;
  CommState* st = usable(comm, "ncclTeamWorld", &err);
  if (!st) return Team{0, -1, 1};
  Team t{0, 0, 1};
  strataCommCount(st->comm, &t.nRanks);
  strataCommUserRank(st->comm, &t.rank);
  return t;
}

STRATA_NCCL_API(Team, ncclTeamLsa, ncclComm_t comm) {
  (void)comm;
  return selfTeam();
}

STRATA_NCCL_API(Team, ncclTeamRail, ncclComm_t comm) {
  (void)comm;
  return selfTeam();
}

// Member `rank` of `team` as a rank of the world: teams are strided sets around the calling rank.
STRATA_NCCL_API(int, ncclTeamRankToWorld, ncclComm_t comm, Team team, int rank) {
  ncclResult_t err;
  CommState* st = usable(comm, "ncclTeamRankToWorld", &err);
  if (!st) return -1;
  int me = 0;
  strataCommUserRank(st->comm, &me);
  return me + (rank - team.rank) * team.stride;
}

// The LSA team is the rank alone: its member 0 (the rank itself) is LSA rank 0; nobody else is in it.
STRATA_NCCL_API(int, ncclTeamRankToLsa, ncclComm_t comm, Team team, int rank) {
  (void)comm;
  return rank == team.rank ? 0 : -1;
}
