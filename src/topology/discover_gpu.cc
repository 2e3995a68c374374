// GPUs and NVLink through the CUDA driver API and NVML, both loaded with dlopen so that libstrata.so has
// no link-time CUDA dependency and runs on hosts without a driver (no GPUs, no error).
//
// The CUDA driver lists the devices this process sees, in CUDA's order and under CUDA_VISIBLE_DEVICES, so
// its indices are the ones cudaSetDevice takes. NVML adds NVLink: for each active link, the PCI address of
// the far end. A far end that is one of the host's GPUs makes the two peers; any other far end is an
// NVSwitch, and all GPUs attached to switches reach one another. Without the CUDA driver, NVML's own list
// stands in. Only the few entry points used here are declared, with the types of the vendors' headers.
#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "topology/discover.h"
#include "topology/sysfs.h"
#include "util/log.h"

namespace strata {
namespace {

// ---- CUDA driver API ----------------------------------------------------------------------------------
using CUresult = int;
using CUdevice = int;
constexpr int kCuAttrComputeCapabilityMajor = 75;  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR

struct CudaDriver {
  CUresult (*init)(unsigned) = nullptr;
  CUresult (*deviceGetCount)(int*) = nullptr;
  CUresult (*deviceGet)(CUdevice*, int) = nullptr;
  CUresult (*deviceGetName)(char*, int, CUdevice) = nullptr;
  CUresult (*deviceGetPCIBusId)(char*, int, CUdevice) = nullptr;
  CUresult (*deviceGetAttribute)(int*, int, CUdevice) = nullptr;
};

// ---- NVML ---------------------------------------------------------------------------------------------
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDeviceOpaque*;
constexpr unsigned kNvmlMaxLinks = 18;  // NVML_NVLINK_MAX_LINKS
struct NvmlPciInfo {                    // nvmlPciInfo_t (the v3 layout of nvmlDeviceGetPciInfo_v3)
  char busIdLegacy[16];
  unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
};

struct Nvml {
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  nvmlReturn_t (*deviceGetCount)(unsigned*) = nullptr;
  nvmlReturn_t (*deviceGetHandleByIndex)(unsigned, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*deviceGetHandleByPciBusId)(const char*, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*deviceGetName)(nvmlDevice_t, char*, unsigned) = nullptr;
  nvmlReturn_t (*deviceGetPciInfo)(nvmlDevice_t, NvmlPciInfo*) = nullptr;
  nvmlReturn_t (*deviceGetCudaComputeCapability)(nvmlDevice_t, int*, int*) = nullptr;
  nvmlReturn_t (*deviceGetNvLinkState)(nvmlDevice_t, unsigned, int*) = nullptr;  // int: nvmlEnableState_t
  nvmlReturn_t (*deviceGetNvLinkRemotePciInfo)(nvmlDevice_t, unsigned, NvmlPciInfo*) = nullptr;
};

// Resolves `name` into `fn`; false (and a trace line) if the library lacks it.
template <class Fn>
bool resolve(void* lib, const char* libName, const char* name, Fn& fn) {
  fn = reinterpret_cast<Fn>(dlsym(lib, name));
  if (!fn) STRATA_TRACE(kLogInit, "topology: %s has no %s", libName, name);
  return fn != nullptr;
}

// The libraries stay loaded for the life of the process: unloading the CUDA driver is never safe.
void* openLibrary(const char* name) {
  void* lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!lib) STRATA_INFO(kLogInit, "topology: %s not loaded (%s)", name, dlerror());
  return lib;
}

bool loadCuda(CudaDriver& cu) {
  constexpr const char* kLib = "libcuda.so.1";
  void* lib = openLibrary(kLib);
  return lib && resolve(lib, kLib, "cuInit", cu.init) && resolve(lib, kLib, "cuDeviceGetCount", cu.deviceGetCount) &&
         resolve(lib, kLib, "cuDeviceGet", cu.deviceGet) && resolve(lib, kLib, "cuDeviceGetName", cu.deviceGetName) &&
         resolve(lib, kLib, "cuDeviceGetPCIBusId", cu.deviceGetPCIBusId) &&
         resolve(lib, kLib, "cuDeviceGetAttribute", cu.deviceGetAttribute);
}

bool loadNvml(Nvml& nv) {
  constexpr const char* kLib = "libnvidia-ml.so.1";
  void* lib = openLibrary(kLib);
  return lib && resolve(lib, kLib, "nvmlInit_v2", nv.init) && resolve(lib, kLib, "nvmlShutdown", nv.shutdown) &&
         resolve(lib, kLib, "nvmlDeviceGetCount_v2", nv.deviceGetCount) &&
         resolve(lib, kLib, "nvmlDeviceGetHandleByIndex_v2", nv.deviceGetHandleByIndex) &&
         resolve(lib, kLib, "nvmlDeviceGetHandleByPciBusId_v2", nv.deviceGetHandleByPciBusId) &&
         resolve(lib, kLib, "nvmlDeviceGetName", nv.deviceGetName) &&
         resolve(lib, kLib, "nvmlDeviceGetPciInfo_v3", nv.deviceGetPciInfo) &&
         resolve(lib, kLib, "nvmlDeviceGetCudaComputeCapability", nv.deviceGetCudaComputeCapability) &&
         resolve(lib, kLib, "nvmlDeviceGetNvLinkState", nv.deviceGetNvLinkState) &&
         resolve(lib, kLib, "nvmlDeviceGetNvLinkRemotePciInfo_v2", nv.deviceGetNvLinkRemotePciInfo);
}

// NVLink bandwidth of one link, GB/s per direction, by GPU generation (compute capability major):
// Pascal NVLink1 20; Volta, Ampere and Hopper 25 (so 6, 12 and 18 links give 150, 300, 450); Blackwell 50.
// Unknown (0): Hopper's figure.
double nvlinkLinkGBps(int ccMajor) {
  if (ccMajor <= 0) return 25;
  if (ccMajor <= 6) return 20;
  if (ccMajor < 10) return 25;
  return 50;
}

// One GPU as NVML sees it, with the far ends of its active links.
struct NvmlGpu {
  nvmlDevice_t handle = nullptr;
  std::vector<std::string> remotes;  // normalized PCI addresses, one per active link
};

std::vector<Gpu> gpusFromCuda(const CudaDriver& cu, std::vector<int>& ccMajor) {
  std::vector<Gpu> gpus;
  int n = 0;
  if (cu.init(0) != 0 || cu.deviceGetCount(&n) != 0) {
    STRATA_INFO(kLogInit, "topology: the CUDA driver did not initialize; no GPUs");
    return gpus;
  }
  for (int i = 0; i < n; ++i) {
    CUdevice dev = 0;
    if (cu.deviceGet(&dev, i) != 0) continue;
    Gpu g;
    g.index = static_cast<int>(gpus.size());
    char buf[256] = {0};
    if (cu.deviceGetName(buf, sizeof(buf) - 1, dev) == 0) g.name = buf;
    std::memset(buf, 0, sizeof(buf));
    if (cu.deviceGetPCIBusId(buf, sizeof(buf) - 1, dev) == 0) g.pciBusId = sysfs::normalizePciBusId(buf);
    int major = 0;
    if (cu.deviceGetAttribute(&major, kCuAttrComputeCapabilityMajor, dev) != 0) major = 0;
    ccMajor.push_back(major);
    gpus.push_back(std::move(g));
  }
  return gpus;
}

std::vector<Gpu> gpusFromNvml(const Nvml& nv, std::vector<int>& ccMajor) {
  std::vector<Gpu> gpus;
  unsigned n = 0;
  if (nv.deviceGetCount(&n) != 0) return gpus;
  for (unsigned i = 0; i < n; ++i) {
    nvmlDevice_t dev = nullptr;
    NvmlPciInfo pci{};
    if (nv.deviceGetHandleByIndex(i, &dev) != 0 || nv.deviceGetPciInfo(dev, &pci) != 0) continue;
    Gpu g;
    g.index = static_cast<int>(gpus.size());
    char name[256] = {0};
    if (nv.deviceGetName(dev, name, sizeof(name) - 1) == 0) g.name = name;
    g.pciBusId = sysfs::normalizePciBusId(pci.busId);
    int major = 0, minor = 0;
    if (nv.deviceGetCudaComputeCapability(dev, &major, &minor) != 0) major = 0;
    ccMajor.push_back(major);
    gpus.push_back(std::move(g));
  }
  return gpus;
}

// Fills nvlinkPeers and nvlinkGBps of `gpus` (identified by PCI address) from NVML's link states.
void addNvlinks(const Nvml& nv, std::vector<Gpu>& gpus, const std::vector<int>& ccMajor) {
  // Every GPU NVML knows, visible to this process or not: a link to a hidden GPU is not a switch.
  std::vector<std::string> allGpus;
  unsigned count = 0;
  if (nv.deviceGetCount(&count) == 0) {
    for (unsigned i = 0; i < count; ++i) {
      nvmlDevice_t dev = nullptr;
      NvmlPciInfo pci{};
      if (nv.deviceGetHandleByIndex(i, &dev) == 0 && nv.deviceGetPciInfo(dev, &pci) == 0)
        allGpus.push_back(sysfs::normalizePciBusId(pci.busId));
    }
  }
  std::vector<bool> onSwitch(gpus.size(), false);
  for (size_t i = 0; i < gpus.size(); ++i) {
    nvmlDevice_t dev = nullptr;
    if (gpus[i].pciBusId.empty() || nv.deviceGetHandleByPciBusId(gpus[i].pciBusId.c_str(), &dev) != 0) continue;
    int active = 0;
    for (unsigned link = 0; link < kNvmlMaxLinks; ++link) {
      int state = 0;
      NvmlPciInfo pci{};
      if (nv.deviceGetNvLinkState(dev, link, &state) != 0 || state != 1) continue;
      ++active;
      if (nv.deviceGetNvLinkRemotePciInfo(dev, link, &pci) != 0) continue;
      const std::string remote = sysfs::normalizePciBusId(pci.busId);
      if (std::find(allGpus.begin(), allGpus.end(), remote) == allGpus.end()) {
        onSwitch[i] = true;
        continue;
      }
      for (size_t j = 0; j < gpus.size(); ++j) {
        const int peer = gpus[j].index;
        auto& peers = gpus[i].nvlinkPeers;
        if (j != i && gpus[j].pciBusId == remote && std::find(peers.begin(), peers.end(), peer) == peers.end())
          peers.push_back(peer);
      }
    }
    gpus[i].nvlinkGBps = active * nvlinkLinkGBps(ccMajor[i]);
  }
  for (size_t i = 0; i < gpus.size(); ++i) {
    if (!onSwitch[i]) continue;
    auto& peers = gpus[i].nvlinkPeers;
    for (size_t j = 0; j < gpus.size(); ++j)
      if (j != i && onSwitch[j] && std::find(peers.begin(), peers.end(), gpus[j].index) == peers.end())
        peers.push_back(gpus[j].index);
    std::sort(peers.begin(), peers.end());
  }
}

}  // namespace

std::vector<Gpu> discoverGpus() {
  CudaDriver cu;
  Nvml nv;
  const bool haveCuda = loadCuda(cu);
  const bool haveNvml = loadNvml(nv) && nv.init() == 0;
  std::vector<int> ccMajor;
  std::vector<Gpu> gpus;
  if (haveCuda) gpus = gpusFromCuda(cu, ccMajor);
  else if (haveNvml) gpus = gpusFromNvml(nv, ccMajor);
  if (haveNvml) {
    addNvlinks(nv, gpus, ccMajor);
    nv.shutdown();
  }
  for (Gpu& g : gpus)
    if (!g.pciBusId.empty()) g.numa = sysfs::numaNode("/sys/bus/pci/devices/" + g.pciBusId);
  return gpus;
}

}  // namespace strata
