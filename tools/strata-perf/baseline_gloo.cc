// The Gloo baseline: Gloo's collectives over its TCP transport, each with every algorithm Gloo offers for
// it (the fastest is reported):
//   allreduce      ring (gloo::allreduce, what PyTorch's Gloo backend calls), ring_chunked
//                  (AllreduceRingChunked), halving_doubling (AllreduceHalvingDoubling)
//   reducescatter  halving_doubling (ReduceScatterHalvingDoubling: Gloo has no other)
//   allgather      allgather (gloo::allgather), ring (AllgatherRing)
//   broadcast, reduce, alltoall: gloo::broadcast, gloo::reduce, gloo::alltoall
//   sendrecv       unbound buffers: send to the next rank, receive from the previous
// Gloo's older algorithms (the classes) work in place on one buffer, so out of place they first copy the
// send buffer into the receive buffer, inside the timed call, as a user of them must.
//
// Ranks meet through a gloo::rendezvous::FileStore in a directory rank 0 creates and names to the others
// over Strata; the TCP device listens on 127.0.0.1 when every rank is on one host.
#include <arpa/inet.h>
#include <gloo/allgather.h>
#include <gloo/allgather_ring.h>
#include <gloo/allreduce.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/alltoall.h>
#include <gloo/broadcast.h>
#include <gloo/config.h>
#include <gloo/reduce.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/types.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>

#include "baseline.h"

namespace strata::perf {
namespace {

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

// Calls f(T{}) with the C++ type Gloo reduces for a Strata type; false for the types Gloo lacks
// (bfloat16, the 8-bit floats).
template <class F>
bool withElementType(strataDataType_t type, F&& f) {
  switch (type) {
    case strataInt8: f(int8_t{}); return true;
    case strataUint8: f(uint8_t{}); return true;
    case strataInt32: f(int32_t{}); return true;
    case strataUint32: f(uint32_t{}); return true;
    case strataInt64: f(int64_t{}); return true;
    case strataUint64: f(uint64_t{}); return true;
    case strataFloat16: f(gloo::float16{}); return true;
    case strataFloat32: f(float{}); return true;
    case strataFloat64: f(double{}); return true;
    default: return false;
  }
}

// Gloo's element-wise reductions, for the newer API (a function) and the classes (a ReductionFunction);
// nullptr for avg, which Gloo does not have.
template <class T>
ReduceFn reduceFunction(strataRedOp_t op) {
  switch (op) {
    case strataSum: return static_cast<ReduceFn>(&gloo::sum<T>);
    case strataProd: return static_cast<ReduceFn>(&gloo::product<T>);
    case strataMax: return static_cast<ReduceFn>(&gloo::max<T>);
    case strataMin: return static_cast<ReduceFn>(&gloo::min<T>);
    default: return nullptr;
  }
}
template <class T>
const gloo::ReductionFunction<T>* reductionFunction(strataRedOp_t op) {
  switch (op) {
    case strataSum: return gloo::ReductionFunction<T>::sum;
    case strataProd: return gloo::ReductionFunction<T>::product;
    case strataMax: return gloo::ReductionFunction<T>::max;
    case strataMin: return gloo::ReductionFunction<T>::min;
    default: return nullptr;
  }
}

bool glooReduces(const BaselineCall& call) {
  bool typed = withElementType(call.type->type, [](auto) {});
  return typed && call.op != strataAvg;
}

// One prepared Gloo call: `body` holds (by shared pointer) whatever Gloo object it runs.
class GlooCollective : public BaselineCollective {
 public:
  GlooCollective(std::string what, std::function<void()> body) : what_(std::move(what)), body_(std::move(body)) {}
  void run() override {
    try {
      body_();
    } catch (const std::exception& e) {
      throw BaselineError(what_ + " failed: " + e.what());
    }
  }

 private:
  std::string what_;
  std::function<void()> body_;
};

// Where rank 0's rendezvous directory is created: STRATA_PERF_GLOO_STORE (a directory every host sees),
// else TMPDIR, else /tmp.
std::string storeParent(bool oneHost) {
  if (const char* dir = std::getenv("STRATA_PERF_GLOO_STORE"); dir != nullptr && *dir != '\0') return dir;
  if (!oneHost) {
    throw BaselineError(
        "--baseline gloo across hosts needs STRATA_PERF_GLOO_STORE=<a directory every host sees> for Gloo's "
        "rendezvous");
  }
  if (const char* dir = std::getenv("TMPDIR"); dir != nullptr && *dir != '\0') return dir;
  return "/tmp";
}

// The local address of the route to `host` (no packet is sent: a UDP connect only picks the route).
std::string localAddressTowards(const std::string& host) {
  sockaddr_in peer{};
  peer.sin_family = AF_INET;
  peer.sin_port = htons(9);
  if (inet_pton(AF_INET, host.c_str(), &peer.sin_addr) != 1) return "";
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0) return "";
  sockaddr_in local{};
  socklen_t len = sizeof(local);
  char text[INET_ADDRSTRLEN] = {0};
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&peer), sizeof(peer)) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
                  inet_ntop(AF_INET, &local.sin_addr, text, sizeof(text)) != nullptr;
  close(fd);
  return ok ? text : "";
}

class GlooBaseline : public Baseline {
 public:
  explicit GlooBaseline(const BaselineSettings& settings) : s_(settings) {
    const bool oneHost = allOnOneHost();
    gloo::transport::tcp::attr attr = deviceAttr(oneHost);
    std::shared_ptr<gloo::transport::Device> device;
    try {
      device = gloo::transport::tcp::CreateDevice(attr);
    } catch (const std::exception& e) {
      throw BaselineError("rank " + std::to_string(s_.rank) + ": Gloo cannot open a TCP device on '" +
                          (attr.iface.empty() ? attr.hostname : attr.iface) + "': " + e.what());
    }
    const std::filesystem::path dir = shareStoreDirectory(oneHost);
    auto context = std::make_shared<gloo::rendezvous::Context>(s_.rank, s_.nranks);
    if (s_.timeout.count() > 0) context->setTimeout(s_.timeout);
    std::string failure;
    try {
      gloo::rendezvous::FileStore store(dir.string());
      context->connectFullMesh(store, device);
    } catch (const std::exception& e) {
      failure = e.what();
    }
    // Every rank has read the store (or failed) before rank 0 removes it.
    const strataResult_t rc = strataBarrier(s_.comm, nullptr);
    if (s_.rank == 0) {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
    if (!failure.empty()) {
      throw BaselineError("rank " + std::to_string(s_.rank) + ": Gloo's rendezvous through " + dir.string() +
                          " failed: " + failure);
    }
    strataCheck(rc, "strataBarrier after Gloo's rendezvous");
    context_ = std::move(context);
  }

  const char* name() const override { return "gloo"; }

  std::string version() const override {
    std::string v = "Gloo " + std::to_string(GLOO_VERSION_MAJOR) + "." + std::to_string(GLOO_VERSION_MINOR) + "." +
                    std::to_string(GLOO_VERSION_PATCH);
#ifdef STRATA_PERF_GLOO_PACKAGE
    v += " (package " STRATA_PERF_GLOO_PACKAGE ")";
#endif
    return v;
  }

  std::vector<std::string> algorithms(const BaselineCall& call) const override {
    const Layout& l = call.layout;
    const size_t eltSize = call.type->size;
    // The classes count elements and bytes in ints.
    const bool intSized =
        l.sendCount * eltSize <= static_cast<size_t>(INT_MAX) && l.recvCount * eltSize <= static_cast<size_t>(INT_MAX);
    if (l.paramCount == 0) return {};  // Gloo's algorithms assume data to move
    if (call.coll->isSendRecv()) {
      if (s_.nranks < 2) return {};  // a Gloo context has no pair to itself
      return {"unbound_buffers"};
    }
    switch (*call.coll->collective) {
      case strataCollAllReduce:
        if (!glooReduces(call)) return {};
        if (!intSized) return {"ring"};
        return {"ring", "ring_chunked", "halving_doubling"};
      case strataCollReduceScatter:
        if (!glooReduces(call) || !intSized) return {};
        return {"halving_doubling"};
      case strataCollAllGather:
        if (!intSized) return {"allgather"};
        return {"allgather", "ring"};
      case strataCollBroadcast: return {"broadcast"};
      case strataCollReduce:
        if (!glooReduces(call)) return {};
        return {"reduce"};
      case strataCollAllToAll: return {"alltoall"};
    }
    return {};
  }

  std::unique_ptr<BaselineCollective> prepare(const BaselineCall& call, const std::string& algorithm) override {
    const std::string what = "rank " + std::to_string(s_.rank) + ": gloo " + algorithm + " (" +
                             std::to_string(call.layout.paramCount) + " x " + call.type->name + ")";
    std::function<void()> body;
    try {
      if (call.coll->reduces) {
        withElementType(call.type->type, [&](auto tag) { body = prepareReduction<decltype(tag)>(call, algorithm); });
      } else {
        body = prepareMovement(call, algorithm);
      }
    } catch (const std::exception& e) {
      throw BaselineError(what + " setup failed: " + e.what());
    }
    if (!body) throw BaselineError(what + ": no such algorithm");
    return std::make_unique<GlooCollective>(what, std::move(body));
  }

 private:
  void strataCheck(strataResult_t rc, const char* what) const { checkStrata(s_, rc, what); }

  bool allOnOneHost() const {
    const std::vector<std::string> names = rankHostNames(s_);
    return std::all_of(names.begin(), names.end(), [&](const std::string& h) { return h == names[0]; });
  }

  // Loopback on one host; else STRATA_SOCKET_IFNAME, the route towards MASTER_ADDR, or the host name.
  static gloo::transport::tcp::attr deviceAttr(bool oneHost) {
    gloo::transport::tcp::attr attr;
    if (oneHost) {
      attr.hostname = "127.0.0.1";
    } else if (const char* ifname = std::getenv("STRATA_SOCKET_IFNAME"); ifname != nullptr && *ifname != '\0') {
      attr.iface = ifname;
    } else if (const char* master = std::getenv("MASTER_ADDR");
               master != nullptr && !localAddressTowards(master).empty()) {
      attr.hostname = localAddressTowards(master);
    } else {
      char name[256] = {0};
      gethostname(name, sizeof(name) - 1);
      attr.hostname = name;
    }
    return attr;
  }

  // Rank 0 makes a fresh directory and tells the others its path.
  std::filesystem::path shareStoreDirectory(bool oneHost) const {
    constexpr size_t kPath = 4096;
    std::vector<char> path(kPath, '\0');
    int made = 1;
    if (s_.rank == 0) {
      std::string templ = storeParent(oneHost) + "/strata-perf-gloo-XXXXXX";
      if (templ.size() < kPath && mkdtemp(templ.data()) != nullptr) {
        std::memcpy(path.data(), templ.c_str(), templ.size());
      } else {
        made = 0;
      }
    }
    strataCheck(strataBroadcast(path.data(), path.data(), kPath, strataUint8, 0, s_.comm, nullptr),
                "strataBroadcast of Gloo's rendezvous directory");
    if (path[0] == '\0' || !made) {
      throw BaselineError("rank " + std::to_string(s_.rank) +
                          ": rank 0 could not create a directory for Gloo's rendezvous (under " +
                          (std::getenv("STRATA_PERF_GLOO_STORE") ? "STRATA_PERF_GLOO_STORE" : "TMPDIR or /tmp") + ")");
    }
    return std::filesystem::path(path.data());
  }

  // A class algorithm works in place on the receive buffer: out of place, the input is copied there first.
  static std::function<void()> copyThenRun(std::shared_ptr<gloo::Algorithm> algo, const BaselineCall& call,
                                           size_t bytes) {
    return [algo = std::move(algo), send = call.send, recv = call.recv, bytes] {
      std::memcpy(recv, send, bytes);
      algo->run();
    };
  }

  // allreduce, reducescatter and reduce on element type T.
  template <class T>
  std::function<void()> prepareReduction(const BaselineCall& call, const std::string& algorithm) {
    const Layout& l = call.layout;
    T* send = static_cast<T*>(const_cast<void*>(call.send));
    T* recv = static_cast<T*>(call.recv);
    const ReduceFn fn = reduceFunction<T>(call.op);
    const gloo::ReductionFunction<T>* classFn = reductionFunction<T>(call.op);
    const size_t bytes = l.sendCount * sizeof(T);
    const int count = static_cast<int>(std::min<size_t>(l.sendCount, INT_MAX));
    switch (*call.coll->collective) {
      case strataCollAllReduce:
        if (algorithm == "ring") {
          auto opts = std::make_shared<gloo::AllreduceOptions>(context_);
          opts->setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
          opts->setInput(send, l.paramCount);
          opts->setOutput(recv, l.paramCount);
          opts->setReduceFunction(fn);
          return [opts] { gloo::allreduce(*opts); };
        }
        if (algorithm == "ring_chunked") {
          auto algo = std::make_shared<gloo::AllreduceRingChunked<T>>(context_, std::vector<T*>{recv}, count, classFn);
          return copyThenRun(algo, call, bytes);
        }
        if (algorithm == "halving_doubling") {
          auto algo =
              std::make_shared<gloo::AllreduceHalvingDoubling<T>>(context_, std::vector<T*>{recv}, count, classFn);
          return copyThenRun(algo, call, bytes);
        }
        return {};
      case strataCollReduceScatter: {
        // Reduces the whole buffer in place and leaves this rank's block at its start; recv has room for it
        // all (strata-perf's buffers hold maxbytes).
        const std::vector<int> recvElems(static_cast<size_t>(s_.nranks), static_cast<int>(l.recvCount));
        auto algo = std::make_shared<gloo::ReduceScatterHalvingDoubling<T>>(context_, std::vector<T*>{recv}, count,
                                                                            recvElems, classFn);
        return copyThenRun(algo, call, bytes);
      }
      case strataCollReduce: {
        auto opts = std::make_shared<gloo::ReduceOptions>(context_);
        opts->setInput(send, l.paramCount);
        opts->setOutput(recv, l.paramCount);
        opts->setRoot(call.root);
        opts->setReduceFunction(fn);
        return [opts] { gloo::reduce(*opts); };
      }
      default: return {};
    }
  }

  // Collectives that only move data move bytes, so every type is supported.
  std::function<void()> prepareMovement(const BaselineCall& call, const std::string& algorithm) {
    const Layout& l = call.layout;
    const size_t eltSize = call.type->size;
    uint8_t* send = static_cast<uint8_t*>(const_cast<void*>(call.send));
    uint8_t* recv = static_cast<uint8_t*>(call.recv);
    const size_t sendBytes = l.sendCount * eltSize, recvBytes = l.recvCount * eltSize;
    if (call.coll->isSendRecv()) {
      std::shared_ptr<gloo::transport::UnboundBuffer> out = context_->createUnboundBuffer(send, sendBytes);
      std::shared_ptr<gloo::transport::UnboundBuffer> in = context_->createUnboundBuffer(recv, recvBytes);
      const uint64_t slot = static_cast<uint64_t>(context_->nextSlot());
      const int next = (s_.rank + 1) % s_.nranks, prev = (s_.rank + s_.nranks - 1) % s_.nranks;
      const auto timeout = context_->getTimeout();
      return [out, in, slot, next, prev, timeout] {
        in->recv(prev, slot);
        out->send(next, slot);
        if (!in->waitRecv(timeout) || !out->waitSend(timeout)) throw std::runtime_error("send/recv aborted");
      };
    }
    switch (*call.coll->collective) {
      case strataCollAllGather:
        if (algorithm == "allgather") {
          auto opts = std::make_shared<gloo::AllgatherOptions>(context_);
          opts->setInput(send, sendBytes);
          opts->setOutput(recv, recvBytes);
          return [opts] { gloo::allgather(*opts); };
        }
        if (algorithm == "ring") {
          auto algo = std::make_shared<gloo::AllgatherRing<uint8_t>>(context_, std::vector<const uint8_t*>{send}, recv,
                                                                     static_cast<int>(sendBytes));
          return [algo] { algo->run(); };
        }
        return {};
      case strataCollBroadcast: {
        auto opts = std::make_shared<gloo::BroadcastOptions>(context_);
        if (s_.rank == call.root) opts->setInput(send, sendBytes);
        opts->setOutput(recv, recvBytes);
        opts->setRoot(call.root);
        return [opts] { gloo::broadcast(*opts); };
      }
      case strataCollAllToAll: {
        auto opts = std::make_shared<gloo::AlltoallOptions>(context_);
        opts->setInput(send, sendBytes);
        opts->setOutput(recv, recvBytes);
        return [opts] { gloo::alltoall(*opts); };
      }
      default: return {};
    }
  }

  BaselineSettings s_;
  std::shared_ptr<gloo::Context> context_;
};

}  // namespace

std::unique_ptr<Baseline> makeGlooBaseline(const BaselineSettings& settings) {
  return std::make_unique<GlooBaseline>(settings);
}

}  // namespace strata::perf
