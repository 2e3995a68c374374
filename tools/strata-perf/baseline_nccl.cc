// The NCCL baseline (--baseline nccl, with --device): NCCL's collectives on the same device buffers, on a
// stream of its own, each call timed from launch to completion (the call, then cudaStreamSynchronize), as
// Strata's device calls are. libnccl.so.2 is loaded with dlopen when the baseline starts, so strata-perf builds
// without NCCL's headers and runs where NCCL is not installed; the baseline then fails with the reason.
// NCCL's enums have the values Strata's do (the C ABI is NCCL-shaped), so types and ops pass through unchanged.
// NCCL refuses two ranks of one communicator on one GPU ("Duplicate GPU detected"), so with ranks sharing a
// GPU the baseline reports every call unsupported instead of failing the run.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "baseline.h"

namespace strata::perf {
namespace {

using ncclResult = int;
struct NcclUniqueId {
  char internal[128];
};
using NcclComm = void*;

struct NcclApi {
  ncclResult (*getVersion)(int*);
  ncclResult (*getUniqueId)(NcclUniqueId*);
  ncclResult (*commInitRank)(NcclComm*, int, NcclUniqueId, int);
  ncclResult (*commDestroy)(NcclComm);
  const char* (*getErrorString)(ncclResult);
  ncclResult (*allReduce)(const void*, void*, size_t, int, int, NcclComm, cudaStream_t);
  ncclResult (*reduceScatter)(const void*, void*, size_t, int, int, NcclComm, cudaStream_t);
  ncclResult (*allGather)(const void*, void*, size_t, int, NcclComm, cudaStream_t);
  ncclResult (*broadcast)(const void*, void*, size_t, int, int, NcclComm, cudaStream_t);
  ncclResult (*reduce)(const void*, void*, size_t, int, int, int, NcclComm, cudaStream_t);
  ncclResult (*send)(const void*, size_t, int, int, NcclComm, cudaStream_t);
  ncclResult (*recv)(void*, size_t, int, int, NcclComm, cudaStream_t);
  ncclResult (*groupStart)();
  ncclResult (*groupEnd)();
};

NcclApi loadNccl() {
  void* h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!h) h = dlopen("libnccl.so", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    throw BaselineError(std::string("nccl baseline: libnccl.so.2 cannot be loaded: ") + (e ? e : "not found"));
  }
  NcclApi a{};
  auto sym = [&](const char* name) {
    void* p = dlsym(h, name);
    if (!p) throw BaselineError(std::string("nccl baseline: libnccl has no ") + name);
    return p;
  };
  a.getVersion = reinterpret_cast<decltype(a.getVersion)>(sym("ncclGetVersion"));
  a.getUniqueId = reinterpret_cast<decltype(a.getUniqueId)>(sym("ncclGetUniqueId"));
  a.commInitRank = reinterpret_cast<decltype(a.commInitRank)>(sym("ncclCommInitRank"));
  a.commDestroy = reinterpret_cast<decltype(a.commDestroy)>(sym("ncclCommDestroy"));
  a.getErrorString = reinterpret_cast<decltype(a.getErrorString)>(sym("ncclGetErrorString"));
  a.allReduce = reinterpret_cast<decltype(a.allReduce)>(sym("ncclAllReduce"));
  a.reduceScatter = reinterpret_cast<decltype(a.reduceScatter)>(sym("ncclReduceScatter"));
  a.allGather = reinterpret_cast<decltype(a.allGather)>(sym("ncclAllGather"));
  a.broadcast = reinterpret_cast<decltype(a.broadcast)>(sym("ncclBroadcast"));
  a.reduce = reinterpret_cast<decltype(a.reduce)>(sym("ncclReduce"));
  a.send = reinterpret_cast<decltype(a.send)>(sym("ncclSend"));
  a.recv = reinterpret_cast<decltype(a.recv)>(sym("ncclRecv"));
  a.groupStart = reinterpret_cast<decltype(a.groupStart)>(sym("ncclGroupStart"));
  a.groupEnd = reinterpret_cast<decltype(a.groupEnd)>(sym("ncclGroupEnd"));
  return a;
}

class NcclCollective final : public BaselineCollective {
 public:
  NcclCollective(const NcclApi& api, NcclComm comm, cudaStream_t stream, const BaselineCall& call, int rank, int n)
      : api_(api), comm_(comm), stream_(stream), call_(call), rank_(rank), n_(n) {}
  void run() override {
    const int t = static_cast<int>(call_.type->type);
    const int op = static_cast<int>(call_.op);
    const size_t count = call_.layout.paramCount;
    ncclResult r = 0;
    if (call_.coll->isSendRecv()) {
      r = api_.groupStart();
      if (r == 0) r = api_.send(call_.send, count, t, (rank_ + 1) % n_, comm_, stream_);
      if (r == 0) r = api_.recv(call_.recv, count, t, (rank_ + n_ - 1) % n_, comm_, stream_);
      const ncclResult e = api_.groupEnd();
      if (r == 0) r = e;
    } else {
      switch (*call_.coll->collective) {
        case strataCollAllReduce: r = api_.allReduce(call_.send, call_.recv, count, t, op, comm_, stream_); break;
        case strataCollReduceScatter:
          r = api_.reduceScatter(call_.send, call_.recv, count, t, op, comm_, stream_);
          break;
        case strataCollAllGather: r = api_.allGather(call_.send, call_.recv, count, t, comm_, stream_); break;
        case strataCollBroadcast:
          r = api_.broadcast(call_.send, call_.recv, count, t, call_.root, comm_, stream_);
          break;
        case strataCollReduce: r = api_.reduce(call_.send, call_.recv, count, t, op, call_.root, comm_, stream_); break;
        case strataCollAllToAll: {
          // NCCL's all-to-all, as nccl-tests runs it: one group of sends and receives.
          const size_t bytes = count * call_.type->size;
          r = api_.groupStart();
          for (int p = 0; p < n_ && r == 0; ++p) {
            r = api_.send(static_cast<const char*>(call_.send) + static_cast<size_t>(p) * bytes, count, t, p, comm_,
                          stream_);
            if (r == 0)
              r = api_.recv(static_cast<char*>(call_.recv) + static_cast<size_t>(p) * bytes, count, t, p, comm_,
                            stream_);
          }
          const ncclResult e = api_.groupEnd();
          if (r == 0) r = e;
          break;
        }
      }
    }
    if (r != 0)
      throw BaselineError(std::string("nccl: ") + api_.getErrorString(r) + " on rank " + std::to_string(rank_));
    const cudaError_t e = cudaStreamSynchronize(stream_);
    if (e != cudaSuccess) throw BaselineError(std::string("nccl: cudaStreamSynchronize: ") + cudaGetErrorString(e));
  }

 private:
  const NcclApi& api_;
  NcclComm comm_;
  cudaStream_t stream_;
  BaselineCall call_;
  int rank_, n_;
};

class NcclBaseline final : public Baseline {
 public:
  explicit NcclBaseline(const BaselineSettings& s) : api_(loadNccl()), rank_(s.rank), n_(s.nranks) {
    if (!s.deviceBuffers) throw BaselineError("nccl baseline: needs --device (NCCL runs on device buffers)");
    api_.getVersion(&version_);
    // One GPU per rank is NCCL's rule: find out whether any two ranks share one (same host, same PCI bus).
    int dev = 0;
    cudaGetDevice(&dev);
    char line[160] = {0};
    char host[64] = {0};
    gethostname(host, sizeof host - 1);
    char bus[32] = {0};
    cudaDeviceGetPCIBusId(bus, sizeof bus, dev);
    std::snprintf(line, sizeof line, "%s/%s", host, bus);
    std::vector<char> all(sizeof line * static_cast<size_t>(n_));
    if (strataAllGather(line, all.data(), sizeof line, strataUint8, s.comm, nullptr) != strataSuccess)
      throw BaselineError("nccl baseline: gathering device ids failed");
    for (int a = 0; a < n_; ++a)
      for (int b = a + 1; b < n_; ++b)
        if (std::strncmp(&all[sizeof line * static_cast<size_t>(a)], &all[sizeof line * static_cast<size_t>(b)],
                         sizeof line) == 0)
          sharedGpu_ = true;
    if (sharedGpu_) return;  // every call reports unsupported
    NcclUniqueId id{};
    if (rank_ == 0 && api_.getUniqueId(&id) != 0) throw BaselineError("nccl baseline: ncclGetUniqueId failed");
    if (strataBroadcast(&id, &id, sizeof id, strataUint8, 0, s.comm, nullptr) != strataSuccess)
      throw BaselineError("nccl baseline: broadcasting the unique id failed");
    const ncclResult r = api_.commInitRank(&comm_, n_, id, rank_);
    if (r != 0) throw BaselineError(std::string("nccl baseline: ncclCommInitRank: ") + api_.getErrorString(r));
    if (cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking) != cudaSuccess)
      throw BaselineError("nccl baseline: cudaStreamCreate failed");
  }
  ~NcclBaseline() override {
    if (comm_) api_.commDestroy(comm_);
    if (stream_) cudaStreamDestroy(stream_);
  }
  const char* name() const override { return "nccl"; }
  std::string version() const override {
    return "NCCL " + std::to_string(version_ / 10000) + "." + std::to_string(version_ / 100 % 100) + "." +
           std::to_string(version_ % 100) + (sharedGpu_ ? " (not run: ranks share a GPU, which NCCL refuses)" : "");
  }
  std::vector<std::string> algorithms(const BaselineCall&) const override {
    if (sharedGpu_) return {};
    return {"default"};
  }
  std::unique_ptr<BaselineCollective> prepare(const BaselineCall& call, const std::string&) override {
    return std::make_unique<NcclCollective>(api_, comm_, stream_, call, rank_, n_);
  }

 private:
  NcclApi api_;
  int rank_, n_;
  int version_ = 0;
  bool sharedGpu_ = false;
  NcclComm comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

}  // namespace

std::unique_ptr<Baseline> makeNcclBaseline(const BaselineSettings& settings) {
  return std::make_unique<NcclBaseline>(settings);
}

}  // namespace strata::perf
