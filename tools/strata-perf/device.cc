#include "device.h"

#ifdef STRATA_PERF_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace strata::perf {

#ifdef STRATA_PERF_WITH_CUDA
namespace {
void ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw DeviceError(std::string(what) + " failed: " + cudaGetErrorString(e));
}
}  // namespace

bool deviceBuilt() { return true; }

std::string selectDevice(int localRank, int* device) {
  int n = 0;
  ok(cudaGetDeviceCount(&n), "cudaGetDeviceCount");
  if (n == 0) throw DeviceError("no CUDA device");
  *device = localRank % n;
  ok(cudaSetDevice(*device), "cudaSetDevice");
  cudaDeviceProp p{};
  ok(cudaGetDeviceProperties(&p, *device), "cudaGetDeviceProperties");
  char bus[32];
  cudaDeviceGetPCIBusId(bus, sizeof bus, *device);
  return std::string(p.name) + " " + bus;
}
void* deviceAlloc(size_t bytes) {
  void* p = nullptr;
  ok(cudaMalloc(&p, bytes), "cudaMalloc");
  ok(cudaMemset(p, 0, bytes), "cudaMemset");
  return p;
}
void deviceFree(void* p) { cudaFree(p); }
void* streamCreate() {
  cudaStream_t s;
  ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  return s;
}
void streamDestroy(void* s) { cudaStreamDestroy(static_cast<cudaStream_t>(s)); }
void streamSync(void* s) { ok(cudaStreamSynchronize(static_cast<cudaStream_t>(s)), "cudaStreamSynchronize"); }
void copyToDevice(void* dst, const void* src, size_t bytes) {
  ok(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy (to device)");
}
void copyToHost(void* dst, const void* src, size_t bytes) {
  ok(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy (to host)");
}
#else
namespace {
[[noreturn]] void none() { throw DeviceError("this strata-perf was built without CUDA"); }
}  // namespace
bool deviceBuilt() { return false; }
std::string selectDevice(int, int*) { none(); }
void* deviceAlloc(size_t) { none(); }
void deviceFree(void*) {}
void* streamCreate() { none(); }
void streamDestroy(void*) {}
void streamSync(void*) { none(); }
void copyToDevice(void*, const void*, size_t) { none(); }
void copyToHost(void*, const void*, size_t) { none(); }
#endif

}  // namespace strata::perf
