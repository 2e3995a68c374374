// The NCCL drop-in's memory calls: ncclMemAlloc/Free (device memory through Strata's CUDA loader), buffer and
// window registration (accepted and recorded: Strata's transports need no registration), and the one-sided
// operations, which Strata does not provide.
#include <cstring>
#include <string>

#include "kernels/cuda_loader.h"
#include "nccl/nccl_state.h"
#include "util/error.h"

using namespace strata;
using namespace strata::nccl;

STRATA_NCCL_API(ncclResult_t, ncclMemAlloc, void** ptr, size_t size) {
  if (!ptr) return fail(nullptr, ncclInvalidArgument, "ncclMemAlloc: ptr is NULL");
  *ptr = nullptr;
  if (size == 0) return fail(nullptr, ncclInvalidArgument, "ncclMemAlloc: size is 0");
  try {
    CudaApi& cuda = cudaApi();
    if (int e = cuda.deviceMalloc(ptr, size); e != 0)
      return fail(nullptr, ncclUnhandledCudaError,
                  strprintf("ncclMemAlloc: cudaMalloc of %zu bytes failed: %s", size, cuda.errorString(e)));
    return ncclSuccess;
  } catch (const Error& e) {
    return fail(nullptr, ncclUnhandledCudaError,
                std::string("ncclMemAlloc allocates device memory, and CUDA cannot be used here: ") + e.what());
  }
}

STRATA_NCCL_API(ncclResult_t, ncclMemFree, void* ptr) {
  if (!ptr) return ncclSuccess;
  try {
    CudaApi& cuda = cudaApi();
    if (int e = cuda.deviceFree(ptr); e != 0)
      return fail(nullptr, ncclUnhandledCudaError,
                  strprintf("ncclMemFree(%p): cudaFree failed: %s", ptr, cuda.errorString(e)));
    return ncclSuccess;
  } catch (const Error& e) {
    return fail(nullptr, ncclUnhandledCudaError,
                strprintf("ncclMemFree(%p): no memory of ncclMemAlloc can exist here: %s", ptr, e.what()));
  }
}

STRATA_NCCL_API(ncclResult_t, ncclCommRegister, const ncclComm_t comm, void* buff, size_t size, void** handle) {
  ncclResult_t err;
  CommState* st = active(comm, "ncclCommRegister", &err);
  if (!st) return err;
  if (!buff || !handle)
    return fail(comm, ncclInvalidArgument,
                strprintf("ncclCommRegister: buff %p or handle %p is NULL", buff, static_cast<void*>(handle)));
  auto region = std::make_unique<Region>(Region{buff, size});
  std::lock_guard<std::mutex> lk(st->mu);
  *handle = region.get();
  st->regions.push_back(std::move(region));
  return ncclSuccess;
}

STRATA_NCCL_API(ncclResult_t, ncclCommDeregister, const ncclComm_t comm, void* handle) {
  ncclResult_t err;
  CommState* st = usable(comm, "ncclCommDeregister", &err);
  if (!st) return err;
  std::lock_guard<std::mutex> lk(st->mu);
  for (auto it = st->regions.begin(); it != st->regions.end(); ++it) {
    if (it->get() != handle) continue;
    st->regions.erase(it);
    return ncclSuccess;
  }
  return fail(comm, ncclInvalidArgument,
              strprintf("ncclCommDeregister: handle %p was not registered with this communicator (or was "
                        "deregistered already)",
                        handle));
}

STRATA_NCCL_API(ncclResult_t, ncclCommWindowRegister, ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
                int winFlags) {
  ncclResult_t err;
  CommState* st = active(comm, "ncclCommWindowRegister", &err);
  if (!st) return err;
  if (!buff || !win)
    return fail(comm, ncclInvalidArgument,
                strprintf("ncclCommWindowRegister: buff %p or win %p is NULL", buff, static_cast<void*>(win)));
  if (winFlags & ~(NCCL_WIN_COLL_SYMMETRIC | NCCL_WIN_STRICT_ORDERING))
    return fail(comm, ncclInvalidArgument, strprintf("ncclCommWindowRegister: unknown flags 0x%x", winFlags));
  auto w = std::make_unique<ncclWindow_vidmem>();
  w->comm = comm;
  w->ptr = buff;
  w->bytes = size;
  w->flags = winFlags;
  std::lock_guard<std::mutex> lk(st->mu);
  *win = w.get();
  st->windows.push_back(std::move(w));
  return ncclSuccess;
}

namespace {
// The window `win` of `st`, or null.
ncclWindow_vidmem* findWindow(CommState& st, ncclWindow_t win) {
  for (auto& w : st.windows)
    if (w.get() == win) return w.get();
  return nullptr;
}
}  // namespace

STRATA_NCCL_API(ncclResult_t, ncclCommWindowDeregister, ncclComm_t comm, ncclWindow_t win) {
  ncclResult_t err;
  CommState* st = usable(comm, "ncclCommWindowDeregister", &err);
  if (!st) return err;
  std::lock_guard<std::mutex> lk(st->mu);
  for (auto it = st->windows.begin(); it != st->windows.end(); ++it) {
    if (it->get() != win) continue;
    st->windows.erase(it);
    return ncclSuccess;
  }
  return fail(
      comm, ncclInvalidArgument,
      strprintf("ncclCommWindowDeregister: window %p is not one of this communicator's", static_cast<void*>(win)));
}

STRATA_NCCL_API(ncclResult_t, ncclWinGetUserPtr, ncclComm_t comm, ncclWindow_t win, void** outUserPtr) {
  ncclResult_t err;
  CommState* st = usable(comm, "ncclWinGetUserPtr", &err);
  if (!st) return err;
  if (!outUserPtr) return fail(comm, ncclInvalidArgument, "ncclWinGetUserPtr: outUserPtr is NULL");
  std::lock_guard<std::mutex> lk(st->mu);
  ncclWindow_vidmem* w = findWindow(*st, win);
  if (!w)
    return fail(comm, ncclInvalidArgument,
                strprintf("ncclWinGetUserPtr: window %p is not one of this communicator's", static_cast<void*>(win)));
  *outUserPtr = w->ptr;
  return ncclSuccess;
}

// ---- one-sided operations -------------------------------------------------------------------------------------

namespace {
ncclResult_t oneSided(ncclComm_t comm, const char* what) {
  return fail(comm, ncclInvalidUsage,
              std::string(what) +
                  ": one-sided operations (ncclPutSignal, ncclSignal, ncclWaitSignal) are not provided by Strata's "
                  "NCCL drop-in; use ncclSend/ncclRecv");
}
}  // namespace

STRATA_NCCL_API(ncclResult_t, ncclPutSignal, const void* localbuff, size_t count, ncclDataType_t datatype, int peer,
                ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
                cudaStream_t stream) {
  (void)localbuff, (void)count, (void)datatype, (void)peer, (void)peerWin, (void)peerWinOffset, (void)sigIdx, (void)ctx,
      (void)flags, (void)stream;
  return oneSided(comm, "ncclPutSignal");
}

STRATA_NCCL_API(ncclResult_t, ncclSignal, int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
                cudaStream_t stream) {
  (void)peer, (void)sigIdx, (void)ctx, (void)flags, (void)stream;
  return oneSided(comm, "ncclSignal");
}

STRATA_NCCL_API(ncclResult_t, ncclWaitSignal, int nDesc, ncclWaitSignalDesc_t* signalDescs, ncclComm_t comm,
                cudaStream_t stream) {
  (void)nDesc, (void)signalDescs, (void)stream;
  return oneSided(comm, "ncclWaitSignal");
}
