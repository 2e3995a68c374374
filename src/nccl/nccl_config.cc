// The NCCL drop-in's communicator config (ncclConfig_t): the fields Strata uses, checked as NCCL checks them, and
// the ones it accepts without effect, named once.
#include <cstddef>
#include <cstring>
#include <mutex>
#include <string>

#include "nccl/nccl_state.h"
#include "util/error.h"
#include "util/log.h"

namespace strata::nccl {

ncclResult_t applyConfig(const ncclConfig_t* config, CommState& state, const char* what) {
  if (!config) return ncclSuccess;
  if (config->size < offsetof(ncclConfig_t, blocking) + sizeof(int) || config->magic != NCCL_API_MAGIC) {
    return fail(nullptr, ncclInvalidArgument,
                strprintf("%s: the config (size %zu, magic 0x%x) was not initialised with NCCL_CONFIG_INITIALIZER",
                          what, config->size, config->magic));
  }
  auto has = [&](size_t offset, size_t bytes) { return config->size >= offset + bytes; };
  if (config->blocking != NCCL_CONFIG_UNDEF_INT) {
    if (config->blocking != 0 && config->blocking != 1)
      return fail(nullptr, ncclInvalidArgument,
                  strprintf("%s: config blocking %d is neither 0 nor 1", what, config->blocking));
    state.blocking = config->blocking == 1;
  }
  if (has(offsetof(ncclConfig_t, commName), sizeof(char*)) && config->commName) state.name = config->commName;
  // The rest shapes NCCL's kernels and networks (CTAs, clusters, traffic class, NVLS, ...): accepted, and named
  // once so that nobody wonders whether it took effect.
  static std::once_flag once;
  std::call_once(once, [&] {
    std::string unused;
    // Each field is read only if the caller's struct (possibly an older, smaller one) reaches it.
    auto note = [&](const char* name, size_t offset) {
      int v = NCCL_CONFIG_UNDEF_INT;
      if (!has(offset, sizeof(int))) return;
      std::memcpy(&v, reinterpret_cast<const char*>(config) + offset, sizeof(int));
      if (v != NCCL_CONFIG_UNDEF_INT) unused += std::string(unused.empty() ? "" : ", ") + name;
    };
    note("cgaClusterSize", offsetof(ncclConfig_t, cgaClusterSize));
    note("minCTAs", offsetof(ncclConfig_t, minCTAs));
    note("maxCTAs", offsetof(ncclConfig_t, maxCTAs));
    if (has(offsetof(ncclConfig_t, netName), sizeof(char*)) && config->netName)
      unused += std::string(unused.empty() ? "" : ", ") + "netName";
    note("splitShare", offsetof(ncclConfig_t, splitShare));
    note("trafficClass", offsetof(ncclConfig_t, trafficClass));
    note("collnetEnable", offsetof(ncclConfig_t, collnetEnable));
    note("CTAPolicy", offsetof(ncclConfig_t, CTAPolicy));
    note("shrinkShare", offsetof(ncclConfig_t, shrinkShare));
    note("nvlsCTAs", offsetof(ncclConfig_t, nvlsCTAs));
    note("nChannelsPerNetPeer", offsetof(ncclConfig_t, nChannelsPerNetPeer));
    note("nvlinkCentricSched", offsetof(ncclConfig_t, nvlinkCentricSched));
    note("graphUsageMode", offsetof(ncclConfig_t, graphUsageMode));
    note("numRmaCtx", offsetof(ncclConfig_t, numRmaCtx));
    note("maxP2pPeers", offsetof(ncclConfig_t, maxP2pPeers));
    note("graphStreamOrdering", offsetof(ncclConfig_t, graphStreamOrdering));
    if (!unused.empty())
      STRATA_INFO(kLogInit, "NCCL config fields that Strata does not use (accepted, no effect): %s", unused.c_str());
  });
  return ncclSuccess;
}

}  // namespace strata::nccl
