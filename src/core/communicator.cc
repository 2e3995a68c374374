#include "core/communicator.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "collectives/cost_model.h"
#include "core/plan_registry.h"
#include "topology/host.h"
#include "util/error.h"
#include "util/json_escape.h"
#include "util/log.h"

namespace strata {
namespace {

// The device engine's maker (host_side.h): installed by the C API before its first communicator.
std::atomic<DeviceSideFactory> gDeviceSideFactory{nullptr};

// SIGUSR1 dumps the flight recorder of every live communicator of the process (when STRATA_FLIGHT_RECORDER_DIR
// is set and the application has no SIGUSR1 handler of its own). The handler only writes to a pipe; a thread
// of this process does the dumping.
class FlightRecorderSignals {
 public:
  void add(const std::shared_ptr<CommImpl>& comm) {
    if (comm->config().flightRecorderDir.empty()) return;
    std::lock_guard<std::mutex> lk(mu_);
    comms_.erase(std::remove_if(comms_.begin(), comms_.end(), [](const auto& w) { return w.expired(); }), comms_.end());
    comms_.push_back(comm);
    if (!started_) start();
  }

 private:
  static int& pipeWriteEnd() {
    static int fd = -1;
    return fd;
  }
  static void onSignal(int) {
    const int saved = errno;
    const char c = 1;
    if (::write(pipeWriteEnd(), &c, 1) < 0) {
    }
    errno = saved;
  }
  void start() {
    struct sigaction old {};
    if (sigaction(SIGUSR1, nullptr, &old) != 0 || old.sa_handler != SIG_DFL) return;  // the application's own
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return;
    pipeWriteEnd() = fds[1];
    started_ = true;
    std::thread([this, rd = fds[0]] {
      char c;
      while (::read(rd, &c, 1) > 0 || errno == EINTR) {
        std::vector<std::shared_ptr<CommImpl>> live;
        {
          std::lock_guard<std::mutex> lk(mu_);
          for (const auto& w : comms_)
            if (auto sp = w.lock()) live.push_back(sp);
        }
        for (const auto& c2 : live) c2->autoDump("SIGUSR1");
      }
    }).detach();  // lives as long as the process: it only waits on the pipe
    struct sigaction sa {};
    sa.sa_handler = onSignal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, nullptr);
  }

  std::mutex mu_;
  std::vector<std::weak_ptr<CommImpl>> comms_;
  bool started_ = false;
};

FlightRecorderSignals& flightRecorderSignals() {
  static auto* s = new FlightRecorderSignals();  // never destroyed: its thread may run until exit
  return *s;
}

// The root's record of waits, through this communicator's bootstrap view (gone after destroy: then silent).
class BootstrapWaitBoard final : public WaitBoard {
 public:
  explicit BootstrapWaitBoard(std::weak_ptr<Bootstrap> boot) : boot_(std::move(boot)) {}
  void publishWait(const std::vector<int>& peers, const std::string& what) override {
    if (auto b = boot_.lock()) b->publishWait(peers, what);
  }
  std::string explainWait(const std::vector<int>& peers) override {
    auto b = boot_.lock();
    return b ? b->explainWait(peers) : "";
  }

 private:
  std::weak_ptr<Bootstrap> boot_;
};

int64_t nowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// More ranks on this host than CPUs they may run on together: the union of their affinity masks (a launcher
// that binds each rank to its own core, as mpirun does, gives each a one-CPU mask, yet the ranks do not share
// cores). Collective: every rank contributes its mask.
bool hostOversubscribed(Bootstrap& bootstrap, const std::vector<std::string>& hostIds, int rank) {
  const std::string& me = hostIds[static_cast<size_t>(rank)];
  const int localRanks = static_cast<int>(std::count(hostIds.begin(), hostIds.end(), me));
  cpu_set_t cpus;
  if (sched_getaffinity(0, sizeof(cpus), &cpus) != 0) {
    CPU_ZERO(&cpus);
    CPU_SET(0, &cpus);
  }
  const auto masks = bootstrap.allGather(&cpus, sizeof(cpus));
  cpu_set_t hostCpus;
  CPU_ZERO(&hostCpus);
  for (size_t r = 0; r < masks.size(); ++r) {
    if (hostIds[r] != me || masks[r].size() != sizeof(cpu_set_t)) continue;
    cpu_set_t m;
    std::memcpy(&m, masks[r].data(), sizeof(m));
    CPU_OR(&hostCpus, &hostCpus, &m);
  }
  const int ncpu = std::max(1, CPU_COUNT(&hostCpus));
  const bool over = localRanks > ncpu;
  STRATA_INFO(kLogInit, "rank %d: %d rank(s) on this host share %d CPU(s)%s", rank, localRanks, ncpu,
              over ? ": oversubscribed, waits yield at once" : "");
  return over;
}

}  // namespace

// ---- lifecycle ----------------------------------------------------------------------------------------

CommImpl::CommImpl(const Config& config, std::shared_ptr<Bootstrap> bootstrap)
    : config_(config),
      bootstrap_(std::move(bootstrap)),
      rank_(bootstrap_->rank()),
      nranks_(bootstrap_->size()),
      failure_(rank_),
      redOps_(rank_),
      queue_(rank_, failure_, [this](std::span<const CollCall> calls) { execute(calls); }) {}

std::shared_ptr<CommImpl> CommImpl::create(const Config& config, std::shared_ptr<Bootstrap> bootstrap,
                                           std::string name) {
  // Before any communication, so a misspelt name or a file that fails its proof fails at once.
  std::vector<LoadedProgram> programs = loadPlanPrograms(config.plans, config.pieceBytes, config.nslots);
  Selector::checkForced(config.algo, true, programs);
  bootstrap->setTimeoutMs(config.timeoutMs);  // a split or shrink view had its parent's until now
  std::shared_ptr<CommImpl> comm(new CommImpl(config, std::move(bootstrap)));
  comm->name_ = std::move(name);
  Bootstrap& boot = *comm->bootstrap_;
  const int me = comm->rank_;
  // The host identities, and with them the loaded programs' digests: ranks that would choose among different
  // algorithms must not run together.
  const std::string myDigest = programsDigest(programs);
  const std::string myHost = hostIdentity(config);
  const std::string mine = myHost + '\0' + myDigest;
  std::vector<std::string> digests;
  for (auto& h : boot.allGather(mine.data(), mine.size())) {
    const std::string all(h.begin(), h.end());
    const size_t cut = std::min(all.find('\0'), all.size());
    comm->hostIds_.push_back(all.substr(0, cut));
    digests.push_back(cut < all.size() ? all.substr(cut + 1) : "");
  }
  for (size_t r = 0; r < digests.size(); ++r)
    if (digests[r] != myDigest)
      throw InvalidArgument(
          strprintf("STRATA_PLANS differs between ranks: rank %d loaded {%s}, rank %zu loaded {%s} "
                    "(every rank must load the same algorithm files)",
                    me, myDigest.c_str(), r, digests[r].c_str()));
  for (auto& h : comm->hostIds_) comm->oneHost_ &= h == comm->hostIds_[0];
  {
    std::map<std::string, int> leader;
    for (size_t r = 0; r < comm->hostIds_.size(); ++r)
      comm->hostLeader_.push_back(leader.emplace(comm->hostIds_[r], static_cast<int>(r)).first->second);
  }
  // The topology (discovered, or STRATA_TOPO_FILE) decides the hierarchy plans see; host identities decide
  // transports.
  comm->topology_ = buildTopology(config, boot, comm->hostIds_);
  std::vector<int> hostOf;
  for (const RankPlace& p : comm->topology_.ranks) hostOf.push_back(p.host);
  std::vector<bool> sameHost;
  for (const std::string& h : comm->hostIds_) sameHost.push_back(h == comm->hostIds_[static_cast<size_t>(me)]);
  // Oversubscribed, a spinning rank holds the core its peer needs: waits yield at once, as Open MPI does with
  // yield_when_idle.
  const bool oversubscribed = hostOversubscribed(boot, comm->hostIds_, me);

  comm->selector_ = std::make_unique<Selector>(config.algo, tuningInputs(comm->topology_, comm->chunkBytes()), me);
  comm->selector_->setPrograms(std::move(programs));
  comm->conns_ = std::make_unique<ConnectionTable>(me, comm->config_, boot, std::move(sameHost));
  comm->waitBoard_ = std::make_unique<BootstrapWaitBoard>(comm->bootstrap_);
  comm->progress_ = std::make_unique<Progress>(config.timeoutMs, oversubscribed ? 0 : config.spinUs, *comm->conns_,
                                               comm->failure_, comm->waitBoard_.get());
  comm->commId_ = boot.commId();
  comm->recorder_ = std::make_unique<FlightRecorder>(static_cast<size_t>(config.flightRecorderEntries));
  comm->exec_ = std::make_unique<CollectiveExecutor>(me, comm->nranks_, std::move(hostOf), config.pieceBytes,
                                                     comm->chunkBytes(), *comm->selector_, comm->redOps_, *comm->conns_,
                                                     *comm->progress_, *comm->recorder_);
  if (logEnabled(LogLevel::kInfo, kLogInit) && me == 0)
    STRATA_INFO(kLogInit, "topology:\n%s", comm->topology_.toText().c_str());
  std::weak_ptr<CommImpl> weak = comm;
  boot.setFailureHandler([weak](const std::string& reason) {
    if (auto c = weak.lock()) {
      c->failure_.record(strataRemoteError, reason);
      c->autoDump(reason);
    }
  });
  flightRecorderSignals().add(comm);
  if (config.tune == "probe" && comm->nranks_ > 1) comm->probeLinks();
  if (config.tune == "sim") comm->selector_->useSimulator(config.pieceBytes, config.nslots);
  STRATA_INFO(kLogInit, "rank %d/%d initialised on host %s", me, comm->nranks_, myHost.c_str());
  return comm;
}

size_t CommImpl::chunkBytes() const {
  // A rank may run one chunk ahead of its peer; half the connection's capacity leaves room for the pieces
  // already in flight.
  return std::max<size_t>(config_.connectionCapacity() / 2, config_.pieceBytes);
}

// STRATA_TUNE=probe: measure the links the cost model prices instead of trusting the topology's figures
// (a rate-limited or shared network, a NIC that reports a wrong speed). Two ranks of the first host time
// the intra-host link and the first ranks of the first two hosts the inter-host one, each by ping-pong:
// half the median round trip of a tiny message is the latency; a large message's extra time over it gives
// the bandwidth. The first rank then broadcasts the figures, so every rank tunes identically.
void CommImpl::probeLinks() {
  const Topology& t = topology_;
  std::vector<int> host0 = t.ranksOfHost(0);
  const int root = host0[0];
  auto pingPong = [&](int a, int b, size_t bytes, int rounds) {
    std::vector<char> buf(std::max<size_t>(bytes, 1));
    std::vector<double> rtts;
    for (int i = 0; i < rounds; ++i) {
      CollCall send{CollKind::kSend, buf.data(), nullptr, bytes, strataUint8, strataSum, 0, 0};
      CollCall recv{CollKind::kRecv, nullptr, buf.data(), bytes, strataUint8, strataSum, 0, 0};
      const auto t0 = std::chrono::steady_clock::now();
      if (rank_ == a) {
        send.peer = recv.peer = b;
        run(std::span<const CollCall>(&send, 1));
        run(std::span<const CollCall>(&recv, 1));
      } else {
        send.peer = recv.peer = a;
        run(std::span<const CollCall>(&recv, 1));
        run(std::span<const CollCall>(&send, 1));
      }
      rtts.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(rtts.begin(), rtts.end());
    return rtts[rtts.size() / 2];
  };
  // A link: {latency us, bandwidth GB/s}, measured by ranks a and b (others get it by broadcast).
  auto measure = [&](int a, int b, size_t big, double* out) {
    if (rank_ != a && rank_ != b) return;
    pingPong(a, b, 8, 3);  // connect and warm up
    const double small = pingPong(a, b, 8, 21) / 2;
    const double large = pingPong(a, b, big, 3) / 2;
    out[0] = small;
    out[1] = static_cast<double>(big) / std::max(large - small, 1e-3) / 1e3;
  };
  const TuningInputs& tuning = selector_->tuning();
  double figures[4] = {tuning.intra.latencyUs, tuning.intra.bandwidthGBps, tuning.inter.latencyUs,
                       tuning.inter.bandwidthGBps};
  if (host0.size() > 1) measure(host0[0], host0[1], 4 << 20, figures);
  if (t.nhosts() > 1) {
    const int other = t.ranksOfHost(1)[0];
    measure(root, other, 2 << 20, figures + 2);  // the root times both links, so it holds every figure
  }
  const CollCall bcast{CollKind::kBroadcast, figures, figures, 4, strataFloat64, strataSum, root, -1};
  run(std::span<const CollCall>(&bcast, 1));
  selector_->setLinks(LinkFigures{figures[0], figures[1]}, LinkFigures{figures[2], figures[3]});
  STRATA_INFO(kLogTuning, "rank %d: probed links: intra-host %.2f us %.2f GB/s, inter-host %.2f us %.3f GB/s", rank_,
              figures[0], figures[1], figures[2], figures[3]);
}

CommImpl::~CommImpl() {
  try {
    destroy();
  } catch (...) {
  }
}

void CommImpl::destroy() {
  // Device work first, while the communicator still runs collectives: the engine may need a barrier before
  // its CUDA IPC buffers can be freed (DeviceSide::quiesce).
  if (!failure_.aborted() && !failure_.failed()) {
    DeviceSide* engine = nullptr;
    {
      std::lock_guard<std::mutex> lk(deviceMutex_);
      engine = device_.get();
    }
    if (engine && !queue_.closed()) {
      try {
        engine->quiesce();
      } catch (const Error& e) {
        STRATA_WARN(kLogColl, "rank %d: %s", rank_, e.what());
      }
    }
  }
  // Calls other threads have inside (a destroy does not interrupt them: they finish or time out).
  gate_.closeAndWait();
  if (!queue_.close()) return;
  // Every device call has been run (or dropped) by the worker; the engine waits for the GPU to finish with
  // its memory before freeing it.
  {
    std::lock_guard<std::mutex> lk(deviceMutex_);
    device_.reset();
  }
  // Let committed messages leave before the links close, within the deadline; after an abort or a failure, not at
  // all (every rank has heard of the failure, so nobody will take them).
  if (conns_) {
    const bool dead = failure_.aborted() || failure_.failed();
    const int64_t deadline = dead ? 0 : nowNs() + std::min<int64_t>(config_.timeoutMs, 10000) * 1000000;
    conns_->closeAll(deadline);
  }
  if (bootstrap_) bootstrap_->setFailureHandler(nullptr);
  bootstrap_.reset();
}

void CommImpl::abort() {
  failure_.markAborted();
  autoDump("strataCommAbort");
  // Wake every call of every thread: the progress loops see the failure, a wait in the bootstrap (a split, a
  // connection set-up) is cancelled, and calls queued behind others are woken by dropPending. Then wait for them
  // to leave before anything they use is freed.
  if (bootstrap_) bootstrap_->cancel(failure_.message());
  queue_.dropPending(strataInvalidUsage, "communicator aborted before this work ran");
  // A device call of this communicator may be waiting inside a sub-communicator of its own (a hierarchical call).
  {
    std::lock_guard<std::mutex> lk(deviceMutex_);
    if (device_) device_->abortSubgroups();
  }
  gate_.closeAndWait();
  destroy();
}

void CommImpl::throwGone() const {
  if (failure_.aborted()) throw InvalidUsage(strprintf("rank %d: communicator aborted", rank_));
  throw InvalidUsage(strprintf("rank %d: communicator used after destroy", rank_));
}

std::string CommImpl::dumpFlightRecorder(const std::string& dir, const std::string& reason) const {
  if (dir.empty()) throw InvalidArgument(strprintf("rank %d: flight recorder dump: no directory given", rank_));
  const std::string path =
      strprintf("%s/strata-flight-%016llx-rank%d.json", dir.c_str(), static_cast<unsigned long long>(commId_), rank_);
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  std::string out = "{\n  \"version\": 1,\n";
  out += strprintf("  \"comm\": \"0x%016llx\",\n  \"rank\": %d,\n  \"nranks\": %d,\n  \"pid\": %d,\n",
                   static_cast<unsigned long long>(commId_), rank_, nranks_, static_cast<int>(getpid()));
  out += "  \"name\": ";
  appendJsonString(out, name_);
  out += ",\n  \"host\": ";
  appendJsonString(out, host);
  out += ",\n  \"reason\": ";
  appendJsonString(out, reason);
  out += ",\n  \"failure\": ";
  appendJsonString(out, failure_.failed() ? failure_.message() : "");
  out += strprintf(",\n  \"dumped_ns\": %llu,\n  \"capacity\": %zu,\n  \"entries\": ",
                   static_cast<unsigned long long>(flightClockNs()), recorder_->capacity());
  out += recorder_->entriesJson();
  out += "\n}\n";
  // Written aside and renamed, so that a reader never sees half a dump and a later dump replaces it whole.
  const std::string tmp = path + strprintf(".tmp%d", static_cast<int>(getpid()));
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f) throw SysError("flight recorder: cannot create " + tmp, errno);
  const bool ok = std::fwrite(out.data(), 1, out.size(), f) == out.size();
  if (std::fclose(f) != 0 || !ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    throw SysError("flight recorder: cannot write " + path, err);
  }
  return path;
}

void CommImpl::autoDump(const std::string& reason) const noexcept {
  if (config_.flightRecorderDir.empty() || !recorder_) return;
  try {
    const std::string path = dumpFlightRecorder(config_.flightRecorderDir, reason);
    STRATA_INFO(kLogColl, "rank %d: flight recorder written to %s", rank_, path.c_str());
  } catch (const std::exception& e) {
    STRATA_WARN(kLogColl, "rank %d: %s", rank_, e.what());
  }
}

void CommImpl::fail(const Error& e) {
  // Tell every rank of the job, so survivors fail fast with the real cause.
  if (failure_.record(e.code(), e.what()) && e.code() != strataRemoteError && bootstrap_) {
    try {
      bootstrap_->reportFailure(e.what());
    } catch (...) {
    }
  }
  STRATA_WARN(kLogColl, "%s", e.what());
  autoDump(e.what());
}

std::shared_ptr<CommImpl> CommImpl::split(int color, int key, const Config* config, const std::string* name) {
  CallGate::Scope in(gate_);
  if (!in.ok()) throwGone();
  std::shared_ptr<CommImpl> child;
  queue_.runExclusive([&] {
    auto view = bootstrap_->split(color, key);
    if (view) child = CommImpl::create(config ? *config : config_, std::move(view), name ? *name : name_);
  });
  return child;
}

std::shared_ptr<HostSide> CommImpl::subgroup(int color, int key) {
  std::shared_ptr<CommImpl> child = split(color, key);
  if (!child) return nullptr;
  // The child's failure (a peer's death seen by its links, a deadline) fails the call the user made on this
  // communicator: make it this communicator's, naming where it happened.
  std::weak_ptr<CommImpl> parent = weak_from_this();
  const int childRanks = child->nranks_;
  child->failure_.setListener([parent, childRanks](strataResult_t code, const std::string& why) {
    if (auto p = parent.lock())
      p->fail(Error(code,
                    strprintf("rank %d: in a sub-communicator of %d ranks (a phase of a hierarchical device call): %s",
                              p->rank_, childRanks, why.c_str())));
  });
  return child;
}

void setDeviceSideFactory(DeviceSideFactory factory) { gDeviceSideFactory.store(factory); }

int CommImpl::hostLeader(int rank) const { return hostLeader_.at(static_cast<size_t>(rank)); }

int CommImpl::gpuChannelCap() const {
  if (config_.gpuChannels != 0) return static_cast<int>(config_.gpuChannels);
  return deviceChannelCap(topology_, DeviceFigures{});
}

bool CommImpl::gpuLL128() const {
  if (config_.gpuLL128 != "auto") return config_.gpuLL128 == "on";
  return allGpusOnNvlink(topology_);
}

std::shared_ptr<CommImpl> CommImpl::shrink(const std::vector<int>& excluded, bool revokeFirst, const Config* config,
                                           const std::string* name) {
  CallGate::Scope in(gate_);
  if (!in.ok()) throwGone();
  if (revokeFirst) revoke();
  std::shared_ptr<CommImpl> child;
  // This communicator's own bootstrap exchanges are not used (they may have failed): the new view agrees on its
  // members among themselves.
  queue_.runQuiesced([&] {
    child = CommImpl::create(config ? *config : config_, bootstrap_->shrink(excluded), name ? *name : name_);
  });
  return child;
}

void CommImpl::revoke() {
  CallGate::Scope in(gate_);
  if (!in.ok()) throwGone();
  const std::string why = strprintf("rank %d: communicator revoked (strataCommRevoke)", rank_);
  if (failure_.record(strataInvalidUsage, why)) {
    // The other ranks' calls in this communicator would otherwise wait for this one until their deadline.
    if (bootstrap_) bootstrap_->reportRevoke(why);
    STRATA_INFO(kLogColl, "%s", why.c_str());
    autoDump(why);
  }
  // As abort, without freeing: progress loops see the failure, bootstrap waits are cancelled, queued work is
  // dropped; then wait for what was running to end.
  if (bootstrap_) bootstrap_->cancel(failure_.message());
  queue_.dropPending(strataInvalidUsage, "communicator revoked before this work ran");
  {
    std::lock_guard<std::mutex> lk(deviceMutex_);
    if (device_) device_->abortSubgroups();
  }
  queue_.waitQuiet();
}

// ---- calls --------------------------------------------------------------------------------------------

void CommImpl::run(std::span<const CollCall> calls) {
  CallGate::Scope in(gate_);
  if (!in.ok()) throwGone();
  bool ran = false;
  try {
    queue_.runInline([&] {
      ran = true;
      execute(calls);
    });
  } catch (const Error&) {
    if (!ran && failure_.failed()) noteRefused(calls);
    throw;
  }
}

std::shared_ptr<Task> CommImpl::submit(std::vector<CollCall> calls, std::function<void()> before,
                                       std::function<void(strataResult_t)> after) {
  CallGate::Scope in(gate_);
  if (!in.ok()) throwGone();
  if (failure_.failed()) noteRefused(calls);
  return queue_.submit(std::move(calls), std::move(before), std::move(after));
}

void CommImpl::noteRefused(std::span<const CollCall> calls) {
  if (!recorder_ || !exec_) return;
  bool first = false;
  size_t p2pCalls = 0;
  int firstPeer = -1;
  for (const CollCall& c : calls) {
    if (isP2P(c.kind)) {
      if (p2pCalls++ == 0) firstPeer = c.peer;
      continue;
    }
    const uint64_t seq = exec_->collectivesStarted() + refusedColls_.fetch_add(1) + 1;
    first |= recorder_->refuse(seq, c.kind, c.dtype, c.op, c.count, isRooted(c.kind) ? c.root : -1, -1);
  }
  if (p2pCalls) {
    const uint64_t seq = exec_->groupsStarted() + refusedGroups_.fetch_add(1) + 1;
    first |= recorder_->refuse(seq, CollKind::kSend, strataUint8, strataSum, p2pCalls, -1, firstPeer);
  }
  if (first) autoDump("a call was refused after the communicator failed");
}

void CommImpl::runDevice(std::span<const CollCall> calls) {
  CallGate::Scope in(gate_);
  if (!in.ok()) throwGone();
  failure_.throwIfFailed();
  DeviceSide* engine;
  {
    std::lock_guard<std::mutex> lk(deviceMutex_);
    if (queue_.closed()) throw InvalidUsage(strprintf("rank %d: communicator used after destroy", rank_));
    if (!device_) {
      const DeviceSideFactory make = gDeviceSideFactory.load();
      if (!make)
        throw InternalError(
            strprintf("rank %d: no device engine installed (setDeviceSideFactory): a communicator "
                      "made outside the C API",
                      rank_));
      device_ = make(*this);
    }
    engine = device_.get();
  }
  engine->enqueue(calls, calls.empty() ? nullptr : calls.front().stream);
}

void CommImpl::barrier() {
  const CollCall c{CollKind::kBarrier, nullptr, nullptr, 0, strataInt8, strataSum, 0, -1};
  run(std::span<const CollCall>(&c, 1));
}

void CommImpl::allGather(const void* mine, void* all, size_t bytes) {
  const CollCall c{CollKind::kAllGather, mine, all, bytes, strataUint8, strataSum, 0, -1};
  run(std::span<const CollCall>(&c, 1));
}

void CommImpl::execute(std::span<const CollCall> calls) {
  try {
    exec_->execute(calls);
  } catch (const InvalidArgument&) {
    throw;  // caught before any communication: the communicator stays usable
  } catch (const Error& e) {
    fail(e);
    throw;
  } catch (const std::exception& e) {
    InternalError ie(strprintf("rank %d: %s", rank_, e.what()));
    fail(ie);
    throw ie;
  }
}

}  // namespace strata
