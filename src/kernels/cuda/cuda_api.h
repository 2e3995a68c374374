// The CUDA side of Strata as seen from plain C++: a virtual interface implemented in libstrata_cuda.so.
//
// libstrata.so never links CUDA. The first time a call involves a device buffer or a CUDA stream it dlopens
// libstrata_cuda.so (src/kernels/cuda_loader.cc) and asks it for a CudaApi. That library links the CUDA runtime
// statically (cudart_static), which itself loads the driver (libcuda.so.1) only when initialised, so:
//   - a machine without a GPU or driver runs every host path and never loads CUDA at all;
//   - one build of libstrata.so runs on machines with and without GPUs;
//   - no file outside src/kernels/cuda/ includes a CUDA header.
// Streams, events and device pointers cross this interface as void*. Every method that can fail returns the
// CUDA runtime's error code (0 = success); errorString() turns it into text for Strata's messages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/reduce.h"
#include "strata/strata.h"

namespace strata {

/// The most inputs one reduce launch combines (one-shot all-reduce: one input per rank, up to 8 ranks on a
/// host). More inputs are combined by chaining launches.
inline constexpr int kCudaMaxReduceSources = 8;
/// Size of a cudaIpcMemHandle_t.
inline constexpr size_t kCudaIpcHandleBytes = 64;
/// Bumped whenever the interface changes: libstrata refuses a libstrata_cuda.so built from other sources.
inline constexpr int kCudaApiVersion = 4;

class CudaApi {
 public:
  virtual ~CudaApi() = default;

  // ---- availability -------------------------------------------------------------------------------
  /// Initialises the runtime. Fills `why` (no driver, driver too old, no device) and returns non-zero when
  /// no device can be used.
  virtual int probe(int* deviceCount, int* driverVersion, int* runtimeVersion, std::string* why) = 0;
  virtual const char* errorString(int err) = 0;
  /// Device that owns `p` when it is device (or managed) memory, -1 for host memory of any kind.
  virtual int pointerDevice(const void* p) = 0;
  virtual int getDevice(int* device) = 0;
  virtual int setDevice(int device) = 0;
  /// The device a stream belongs to (the current device for the legacy default stream).
  virtual int streamDevice(void* stream, int* device) = 0;
  virtual int streamIsCapturing(void* stream, bool* capturing) = 0;
  /// cudaThreadExchangeStreamCaptureMode: sets this thread's capture interaction mode (CUDA's values: 0 global,
  /// 1 thread-local, 2 relaxed) and returns the previous one in *mode. Allocations made while a stream captures
  /// need relaxed (they are not stream work, and the graph does not replay them).
  virtual int exchangeCaptureMode(int* mode) = 0;

  // ---- streams, events, copies ---------------------------------------------------------------------
  virtual int streamCreate(void** stream) = 0;  // non-blocking w.r.t. the legacy default stream
  virtual int streamDestroy(void* stream) = 0;
  virtual int streamSynchronize(void* stream) = 0;
  virtual int eventCreate(void** event) = 0;  // timing disabled
  virtual int eventDestroy(void* event) = 0;
  virtual int eventRecord(void* event, void* stream) = 0;
  virtual int streamWaitEvent(void* stream, void* event) = 0;
  virtual int eventQuery(void* event) = 0;  // 0 done, cudaErrorNotReady (600) pending
  virtual int memcpyAsync(void* dst, const void* src, size_t bytes, void* stream) = 0;  // any direction
  virtual int memsetAsync(void* dst, int value, size_t bytes, void* stream) = 0;
  /// Runs fn(arg) on a CUDA thread once the stream reaches this point. fn must not call CUDA.
  virtual int launchHostFunc(void* stream, void (*fn)(void*), void* arg) = 0;

  // ---- memory --------------------------------------------------------------------------------------
  virtual int deviceMalloc(void** p, size_t bytes) = 0;
  virtual int deviceFree(void* p) = 0;
  /// Pinned host memory mapped into the device's address space; *devicePtr is its device address.
  virtual int hostAllocMapped(void** hostPtr, void** devicePtr, size_t bytes) = 0;
  virtual int hostFree(void* p) = 0;
  virtual int ipcGetMemHandle(void* handle64, void* devicePtr) = 0;
  virtual int ipcOpenMemHandle(void** devicePtr, const void* handle64) = 0;
  virtual int ipcCloseMemHandle(void* devicePtr) = 0;

  // ---- stream-ordered flags ------------------------------------------------------------------------
  /// Later work on `stream` waits until the 32-bit word at `devAddr` (device memory or mapped host memory),
  /// read as a signed difference, is >= value (wrap-safe). Uses the driver's stream memory operations where
  /// the device supports them (the stream waits in the GPU front end, so another process sharing the GPU can
  /// run meanwhile), else a one-thread kernel that polls the word.
  virtual int streamWaitValue(void* stream, void* devAddr, uint32_t value) = 0;
  /// Writes value to the word at `devAddr` once earlier work on `stream` is complete and visible (system-wide
  /// memory barrier before the write).
  virtual int streamWriteValue(void* stream, void* devAddr, uint32_t value) = 0;
  /// True when streamWaitValue/WriteValue use the driver's memory operations (false: polling kernel).
  virtual bool hasStreamMemOps() = 0;

  // ---- kernels -------------------------------------------------------------------------------------
  /// dst[i] = srcs[0][i] op srcs[1][i] op ... op srcs[n-1][i] for i < count, combined left to right. Narrow
  /// floats (f16, bf16, fp8) accumulate in f32 and are rounded once, to nearest even, with the host kernels'
  /// conversions (e4m3 saturates at 448, e5m2 overflows to infinity, NaN stays NaN). For nsrcs == 2 the result
  /// is bit-identical to reduce2(); nsrcs == 1 copies. dst may alias any source exactly. Returns
  /// cudaErrorInvalidValue (1) for nsrcs outside [1, kCudaMaxReduceSources] or pointers not aligned to the
  /// element size.
  virtual int reduce(void* dst, const void* const* srcs, int nsrcs, size_t count, strataDataType_t dt, ReduceKind op,
                     void* stream) = 0;
  /// The device executor (src/device/): `lanes` thread blocks of `threads` threads on `stream`, block l running
  /// lane l of laneArgs (an array of devproto::LaneArgs in device-readable memory; opaque here, as this layer sits
  /// below the device protocol's). `dtype` (a strataDataType_t) and `op` (a ReduceKind) choose the kernel: there is
  /// one per pair, and every lane of the launch has them.
  virtual int launchExecutor(const void* laneArgs, int lanes, int threads, int dtype, int op, void* stream) = 0;
};

}  // namespace strata

/// The one symbol libstrata_cuda.so exports. Returns nullptr when `version` is not kCudaApiVersion.
extern "C" strata::CudaApi* strataCudaApiCreate(int version);
