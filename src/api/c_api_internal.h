// What the C API offers the layers built on it inside the library (the NCCL drop-in, src/nccl/) beyond strata.h:
// its error record, its per-thread group, and its test of which calls are device calls.
#pragma once

#include <string>

#include "kernels/cuda_loader.h"
#include "strata/strata.h"

namespace strata {

/// Records an error as the C API's own calls do: strataGetLastError(comm) and strataGetLastError(NULL) on this
/// thread return `message` until a newer error. Returns `code`. `comm` may be NULL or not live.
strataResult_t recordApiError(strataComm_t comm, strataResult_t code, const std::string& message);

/// The calling thread's group depth: strataGroupStart calls not yet ended. Written by the group calls
/// (c_api_group.cc) only. One word with no initialiser to run, so that every call can read it for the cost of a
/// thread-local load (constinit: no guard, no wrapper call).
extern constinit thread_local int tApiGroupDepth;

/// The calling thread's group depth (tApiGroupDepth). The one depth of a thread's group: the NCCL layer's group is
/// this group, with what NCCL adds to it kept beside it.
inline int apiGroupDepth() { return tApiGroupDepth; }

/// Ends the calling thread's outermost group without running what it holds (ncclGroupSimulateEnd). Inner
/// levels just return, as strataGroupEnd does. strataInvalidUsage outside a group.
strataResult_t discardApiGroup();

/// Whether a call with these buffers is a device call: a stream makes it one; with no stream, a buffer in device
/// or managed memory does (NCCL's callers often pass stream 0, the legacy default stream). Never loads CUDA: while
/// the process has not loaded the CUDA driver no pointer can be device memory, so host callers pay one cheap check
/// (it walks the loader's list head), then the pointers. Inline: it is on every call's path.
inline bool isDeviceCall(const void* sendbuff, const void* recvbuff, strataStream_t stream) {
  if (stream) return true;
  if (!cudaDriverLoaded()) return false;
  return devicePointerOwner(sendbuff) >= 0 || devicePointerOwner(recvbuff) >= 0;
}

}  // namespace strata
