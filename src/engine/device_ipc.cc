#include "engine/device_ipc.h"

#include <cstdint>

#include "util/error.h"
#include "util/log.h"

namespace strata::device_detail {

std::string mapPeerBuffers(CudaApi& api, int nranks, int me, void* own, const std::function<const void*(int)>& handleOf,
                           const std::function<std::string(int, int)>& whyNotOpened, std::vector<char*>* peers) {
  peers->assign(static_cast<size_t>(nranks), nullptr);
  (*peers)[static_cast<size_t>(me)] = static_cast<char*>(own);
  for (int r = 0; r < nranks; ++r) {
    if (r == me) continue;
    void* p = nullptr;
    const int e = api.ipcOpenMemHandle(&p, handleOf(r));
    if (e != 0) return whyNotOpened(r, e);
    (*peers)[static_cast<size_t>(r)] = static_cast<char*>(p);
  }
  return {};
}

std::string agreeOnSuccess(HostSide& host, std::string why, const char* peerFailed) {
  const int n = host.size();
  int32_t mineOk = why.empty() ? 1 : 0;
  std::vector<int32_t> oks(static_cast<size_t>(n));
  host.allGather(&mineOk, oks.data(), sizeof(int32_t));
  for (int r = 0; r < n && why.empty(); ++r)
    if (oks[static_cast<size_t>(r)] != 1) why = strprintf("rank %d could not %s", r, peerFailed);
  return why;
}

void unmapPeerBuffers(CudaApi& api, const std::vector<char*>& peers, int me) {
  for (size_t r = 0; r < peers.size(); ++r)
    if (static_cast<int>(r) != me && peers[r]) api.ipcCloseMemHandle(peers[r]);
}

void freeExportedBuffer(CudaApi& api, void* own, bool peersDone, int me, const char* what, const char* peersMay) {
  if (!own) return;
  if (peersDone) {
    api.deviceFree(own);
    return;
  }
  STRATA_WARN(kLogColl,
              "rank %d: %s left allocated: peers may still %s (communicator aborted or a peer failed before destroy)",
              me, what, peersMay);
}

}  // namespace strata::device_detail
