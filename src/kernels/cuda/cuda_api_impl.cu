// CudaApi over the CUDA runtime (linked statically into libstrata_cuda.so; it loads libcuda.so.1 itself when
// first initialised). Stream memory operations come from the driver through cudaGetDriverEntryPointByVersion,
// so this library does not link libcuda either and loads on machines without a driver.
#include <cuda.h>
#include <cuda_runtime.h>

#include <mutex>
#include <string>

#include "kernels/cuda/cuda_kernels.h"

namespace strata {
namespace {

using WaitValue32Fn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
using WriteValue32Fn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

class CudaRuntimeApi final : public CudaApi {
 public:
  int probe(int* deviceCount, int* driverVersion, int* runtimeVersion, std::string* why) override {
    *deviceCount = 0;
    *driverVersion = 0;
    *runtimeVersion = 0;
    cudaRuntimeGetVersion(runtimeVersion);
    cudaError_t e = cudaDriverGetVersion(driverVersion);
    if (e != cudaSuccess || *driverVersion == 0) {
      *why = "no CUDA driver: libcuda.so.1 could not be loaded (is the NVIDIA driver installed?)";
      return e != cudaSuccess ? e : cudaErrorInsufficientDriver;
    }
    e = cudaGetDeviceCount(deviceCount);
    if (e == cudaErrorInsufficientDriver) {
      *why = "the CUDA driver (version " + std::to_string(*driverVersion) +
             ") is older than the runtime Strata was built with (" + std::to_string(*runtimeVersion) + ")";
      return e;
    }
    if (e == cudaErrorNoDevice || (e == cudaSuccess && *deviceCount == 0)) {
      *why = "no CUDA device is visible (check CUDA_VISIBLE_DEVICES and nvidia-smi)";
      return e != cudaSuccess ? e : cudaErrorNoDevice;
    }
    if (e != cudaSuccess) {
      *why = std::string("cudaGetDeviceCount failed: ") + cudaGetErrorString(e);
      return e;
    }
    loadMemOps();
    return cudaSuccess;
  }

  const char* errorString(int err) override {
    // The driver's own code is the value minus kDriverErrorBase; the caller's message includes the value.
    if (err >= kDriverErrorBase) return "CUDA driver error in a stream memory operation (CUresult = code - 100000)";
    return cudaGetErrorString(static_cast<cudaError_t>(err));
  }

  int pointerDevice(const void* p) override {
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
      cudaGetLastError();  // an unregistered host pointer is not an error worth keeping
      return -1;
    }
    return (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged) ? a.device : -1;
  }
  int getDevice(int* d) override { return cudaGetDevice(d); }
  int setDevice(int d) override { return cudaSetDevice(d); }
  int streamDevice(void* s, int* d) override { return cudaStreamGetDevice(static_cast<cudaStream_t>(s), d); }
  int streamIsCapturing(void* s, bool* capturing) override {
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    const cudaError_t e = cudaStreamIsCapturing(static_cast<cudaStream_t>(s), &st);
    *capturing = st != cudaStreamCaptureStatusNone;
    return e;
  }

  int exchangeCaptureMode(int* mode) override {
    auto m = static_cast<cudaStreamCaptureMode>(*mode);
    const cudaError_t e = cudaThreadExchangeStreamCaptureMode(&m);
    *mode = static_cast<int>(m);
    return e;
  }

  int streamCreate(void** s) override {
    return cudaStreamCreateWithFlags(reinterpret_cast<cudaStream_t*>(s), cudaStreamNonBlocking);
  }
  int streamDestroy(void* s) override { return cudaStreamDestroy(static_cast<cudaStream_t>(s)); }
  int streamSynchronize(void* s) override { return cudaStreamSynchronize(static_cast<cudaStream_t>(s)); }
  int eventCreate(void** e) override {
    return cudaEventCreateWithFlags(reinterpret_cast<cudaEvent_t*>(e), cudaEventDisableTiming);
  }
  int eventDestroy(void* e) override { return cudaEventDestroy(static_cast<cudaEvent_t>(e)); }
  int eventRecord(void* e, void* s) override {
    return cudaEventRecord(static_cast<cudaEvent_t>(e), static_cast<cudaStream_t>(s));
  }
  int streamWaitEvent(void* s, void* e) override {
    return cudaStreamWaitEvent(static_cast<cudaStream_t>(s), static_cast<cudaEvent_t>(e), 0);
  }
  int eventQuery(void* e) override { return cudaEventQuery(static_cast<cudaEvent_t>(e)); }
  int memcpyAsync(void* dst, const void* src, size_t bytes, void* s) override {
    return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(s));
  }
  int memsetAsync(void* dst, int value, size_t bytes, void* s) override {
    return cudaMemsetAsync(dst, value, bytes, static_cast<cudaStream_t>(s));
  }
  int launchHostFunc(void* s, void (*fn)(void*), void* arg) override {
    return cudaLaunchHostFunc(static_cast<cudaStream_t>(s), fn, arg);
  }

  int deviceMalloc(void** p, size_t bytes) override { return cudaMalloc(p, bytes); }
  int deviceFree(void* p) override { return cudaFree(p); }
  int hostAllocMapped(void** h, void** d, size_t bytes) override {
    cudaError_t e = cudaHostAlloc(h, bytes, cudaHostAllocMapped | cudaHostAllocPortable);
    if (e != cudaSuccess) return e;
    e = cudaHostGetDevicePointer(d, *h, 0);
    if (e != cudaSuccess) {
      cudaFreeHost(*h);
      *h = nullptr;
    }
    return e;
  }
  int hostFree(void* p) override { return cudaFreeHost(p); }
  int ipcGetMemHandle(void* handle, void* p) override {
    static_assert(sizeof(cudaIpcMemHandle_t) == kCudaIpcHandleBytes, "IPC handle size");
    return cudaIpcGetMemHandle(static_cast<cudaIpcMemHandle_t*>(handle), p);
  }
  int ipcOpenMemHandle(void** p, const void* handle) override {
    cudaIpcMemHandle_t h;
    __builtin_memcpy(&h, handle, sizeof h);
    return cudaIpcOpenMemHandle(p, h, cudaIpcMemLazyEnablePeerAccess);
  }
  int ipcCloseMemHandle(void* p) override { return cudaIpcCloseMemHandle(p); }

  int streamWaitValue(void* s, void* addr, uint32_t value) override {
    if (waitValue_)
      return translate(
          waitValue_(static_cast<CUstream>(s), reinterpret_cast<CUdeviceptr>(addr), value, CU_STREAM_WAIT_VALUE_GEQ));
    return cudaWaitFlagKernel(s, addr, value);
  }
  int streamWriteValue(void* s, void* addr, uint32_t value) override {
    if (writeValue_)
      return translate(writeValue_(static_cast<CUstream>(s), reinterpret_cast<CUdeviceptr>(addr), value,
                                   CU_STREAM_WRITE_VALUE_DEFAULT));
    return cudaWriteFlagKernel(s, addr, value);
  }
  bool hasStreamMemOps() override { return waitValue_ && writeValue_; }

  int reduce(void* dst, const void* const* srcs, int nsrcs, size_t count, strataDataType_t dt, ReduceKind op,
             void* stream) override {
    return cudaReduce(dst, srcs, nsrcs, count, dt, op, stream);
  }
  int launchExecutor(const void* laneArgs, int lanes, int threads, int dtype, int op, void* stream) override {
    return cudaDevExecLaunch(laneArgs, lanes, threads, dtype, op, stream);
  }

 private:
  // Driver results are not runtime codes: they are passed on offset by kDriverErrorBase, so the message can
  // tell them apart (and the original CUresult can be read back).
  static constexpr int kDriverErrorBase = 100000;
  static int translate(CUresult r) { return r == CUDA_SUCCESS ? cudaSuccess : kDriverErrorBase + static_cast<int>(r); }

  void loadMemOps() {
    std::call_once(memOpsOnce_, [&] {
      void* wait = nullptr;
      void* write = nullptr;
      cudaDriverEntryPointQueryResult q1{}, q2{};
      // Version 12000 selects the _v2 entry points (the v1 memory operations are deprecated).
      if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &wait, 12000, cudaEnableDefault, &q1) ==
              cudaSuccess &&
          cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", &write, 12000, cudaEnableDefault, &q2) ==
              cudaSuccess &&
          q1 == cudaDriverEntryPointSuccess && q2 == cudaDriverEntryPointSuccess && wait && write) {
        waitValue_ = reinterpret_cast<WaitValue32Fn>(wait);
        writeValue_ = reinterpret_cast<WriteValue32Fn>(write);
      }
      cudaGetLastError();
    });
  }

  std::once_flag memOpsOnce_;
  WaitValue32Fn waitValue_ = nullptr;
  WriteValue32Fn writeValue_ = nullptr;
};

}  // namespace
}  // namespace strata

extern "C" __attribute__((visibility("default"))) strata::CudaApi* strataCudaApiCreate(int version) {
  if (version != strata::kCudaApiVersion) return nullptr;
  static strata::CudaRuntimeApi api;  // lives as long as the process: CUDA work may outlive any communicator
  return &api;
}
