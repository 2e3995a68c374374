// CUDA IPC between the ranks of one host, as the device engine's direct path (device_direct.cc) and its executor
// (device_exec.cc) use it: each rank exports one device buffer, maps every peer's from the handles an all-gather
// brought, and takes the path only if every rank could; at destroy it unmaps them and frees its own.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/host_side.h"
#include "kernels/cuda/cuda_api.h"

namespace strata::device_detail {

// Maps every peer's exported buffer here: (*peers)[r] is rank r's buffer as this process sees it, this rank's own
// (`own`) included. handleOf(r) is rank r's IPC handle. Stops at the first handle that does not open and returns
// why (whyNotOpened(r, its CUDA error)); "" when every peer's buffer is mapped.
std::string mapPeerBuffers(CudaApi& api, int nranks, int me, void* own, const std::function<const void*(int)>& handleOf,
                           const std::function<std::string(int, int)>& whyNotOpened, std::vector<char*>* peers);

// Every rank must take the same path: an all-gather (collective, so every rank calls it, whatever `why` says) of
// whether each rank succeeded. Returns this rank's `why`, or, when it is empty, "rank r could not <peerFailed>" for
// the first rank r that did not succeed; "" when every rank did.
std::string agreeOnSuccess(HostSide& host, std::string why, const char* peerFailed);

// Closes this rank's mappings of its peers' buffers (peers[me] is its own buffer, not a mapping).
void unmapPeerBuffers(CudaApi& api, const std::vector<char*>& peers, int me);

// Frees this rank's exported buffer (nothing when null), unless a peer may still access it (peersDone false: the
// communicator was aborted or a peer failed before destroy): then it is left allocated, with a warning that names
// it (`what`) and what peers may still do (`peersMay`).
void freeExportedBuffer(CudaApi& api, void* own, bool peersDone, int me, const char* what, const char* peersMay);

}  // namespace strata::device_detail
