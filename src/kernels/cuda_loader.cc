#include "kernels/cuda_loader.h"

#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "util/error.h"
#include "util/log.h"

namespace strata {
namespace {

// dl_iterate_phdr reports, with the first object, how many objects have ever been loaded (dlpi_adds).
int firstAdds(dl_phdr_info* info, size_t, void* out) {
  *static_cast<unsigned long long*>(out) = info->dlpi_adds;
  return 1;  // stop after the first object
}

std::atomic<bool> gDriverLoaded{false};
std::atomic<unsigned long long> gAddsChecked{~0ull};

std::mutex gLoadMutex;
CudaApi* gApi = nullptr;
std::string gLoadError;  // set once a load failed; repeated to every later caller
bool gTried = false;

// Directory of the object this code is linked into (libstrata.so, or a statically linked executable).
std::string ownDirectory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&ownDirectory), &info) == 0 || !info.dli_fname) return "";
  std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

CudaApi* load(std::string* why) {
#ifndef STRATA_HAVE_CUDA
  *why =
      "this build of Strata has no CUDA support (configured with STRATA_WITH_CUDA=OFF or without nvcc); "
      "device buffers and CUDA streams cannot be used";
  return nullptr;
#else
  // STRATA_CUDA_LIBRARY names the library explicitly; otherwise next to libstrata, then the build tree, then
  // the loader's search path.
  std::vector<std::string> candidates;
  if (const char* env = getenv("STRATA_CUDA_LIBRARY"); env && *env) {
    candidates.push_back(env);
  } else {
    const std::string dir = ownDirectory();
    if (!dir.empty()) {
      candidates.push_back(dir + "/libstrata_cuda.so");
      candidates.push_back(dir + "/../libstrata_cuda.so");
    }
    candidates.push_back(std::string(STRATA_CUDA_BUILD_DIR) + "/libstrata_cuda.so");
    candidates.push_back("libstrata_cuda.so");
  }
  void* handle = nullptr;
  std::string errors;
  for (const std::string& c : candidates) {
    handle = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle) break;
    const char* e = dlerror();
    errors += std::string(errors.empty() ? "" : "; ") + (e ? e : c);
  }
  if (!handle) {
    *why = "libstrata_cuda.so could not be loaded (" + errors + "); set STRATA_CUDA_LIBRARY to its path";
    return nullptr;
  }
  using CreateFn = CudaApi* (*)(int);
  auto create = reinterpret_cast<CreateFn>(dlsym(handle, "strataCudaApiCreate"));
  CudaApi* api = create ? create(kCudaApiVersion) : nullptr;
  if (!api) {
    *why = "libstrata_cuda.so does not match this libstrata (interface version " + std::to_string(kCudaApiVersion) +
           "); reinstall both from one build";
    return nullptr;
  }
  int devices = 0, driver = 0, runtime = 0;
  std::string cause;
  if (api->probe(&devices, &driver, &runtime, &cause) != 0) {
    *why = cause;
    return nullptr;
  }
  gDriverLoaded.store(true, std::memory_order_release);
  STRATA_INFO(kLogInit, "CUDA: %d device(s), driver %d, runtime %d, stream memory operations %s", devices, driver,
              runtime, api->hasStreamMemOps() ? "yes" : "no (polling kernel)");
  return api;
#endif
}

}  // namespace

bool cudaDriverLoaded() {
  if (gDriverLoaded.load(std::memory_order_acquire)) return true;
  unsigned long long adds = 0;
  dl_iterate_phdr(firstAdds, &adds);
  if (adds == gAddsChecked.load(std::memory_order_relaxed)) return false;
  void* h = dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_LAZY);
  if (h) {
    dlclose(h);
    gDriverLoaded.store(true, std::memory_order_release);
    return true;
  }
  gAddsChecked.store(adds, std::memory_order_relaxed);
  return false;
}

CudaApi& cudaApi() {
  std::lock_guard<std::mutex> lk(gLoadMutex);
  if (!gTried) {
    gTried = true;
    gApi = load(&gLoadError);
  }
  if (!gApi) throw CudaError("CUDA is not available for a device buffer or CUDA stream: " + gLoadError);
  return *gApi;
}

void setCudaApiForTesting(CudaApi* api) {
  std::lock_guard<std::mutex> lk(gLoadMutex);
  gApi = api;
  gTried = api != nullptr;
  gLoadError.clear();
}

int devicePointerOwner(const void* p) {
  if (!p || !cudaDriverLoaded()) return -1;
  CudaApi* api = nullptr;
  {
    std::lock_guard<std::mutex> lk(gLoadMutex);
    if (!gTried) {
      gTried = true;
      gApi = load(&gLoadError);
      if (!gApi)
        STRATA_WARN(kLogInit,
                    "the CUDA driver is loaded but Strata cannot use CUDA (%s); buffers passed "
                    "without a stream are taken as host memory",
                    gLoadError.c_str());
    }
    api = gApi;
  }
  return api ? api->pointerDevice(p) : -1;
}

}  // namespace strata
