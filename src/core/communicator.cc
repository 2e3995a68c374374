#include "core/communicator.h"

#include <poll.h>
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/gpu_runtime.h"
#include "topology/host.h"
#include "topology/topology.h"
#include "util/error.h"
#include "util/log.h"

namespace strata {
namespace {


constexpr uint32_t kConnSetupTag = 0x53540001;  // "ST" + 1: transport connection setup

int64_t nowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Waits until every connection has handed its committed messages to the transport.
class FlushRunner : public Waitable {
 public:
  explicit FlushRunner(std::vector<std::unique_ptr<Connection>>& conns) : conns_(conns) {}
  bool progress() override {
    bool moved = false;
    for (auto& c : conns_)
      if (c) moved |= c->progress();
    return moved;
  }
  bool done() const override {
    for (auto& c : conns_)
      if (c && !c->flushed()) return false;
    return true;
  }
  std::string describeStall() const override {
    std::string out;
    for (int p : stalledPeers()) out += strprintf("%ssends to rank %d not yet delivered", out.empty() ? "" : "; ", p);
    return out;
  }
  std::vector<int> stalledPeers() const override {
    std::vector<int> peers;
    for (auto& c : conns_)
      if (c && !c->flushed()) peers.push_back(c->peer());
    return peers;
  }

 private:
  std::vector<std::unique_ptr<Connection>>& conns_;
};

}  // namespace

// ---- Task ---------------------------------------------------------------------------------------------

void Task::complete(strataResult_t result, std::string error) {
  {
    std::lock_guard<std::mutex> lk(mutex_);
    result_ = result;
    error_ = std::move(error);
    done_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
}

bool Task::wait(int64_t timeoutMs) {
  std::unique_lock<std::mutex> lk(mutex_);
  if (timeoutMs < 0) {
    cv_.wait(lk, [&] { return done_.load(); });
    return true;
  }
  return cv_.wait_for(lk, std::chrono::milliseconds(timeoutMs), [&] { return done_.load(); });
}

// ---- lifecycle ----------------------------------------------------------------------------------------

CommImpl::CommImpl(const Config& config, std::shared_ptr<Bootstrap> bootstrap)
    : config_(config), bootstrap_(std::move(bootstrap)) {
  rank_ = bootstrap_->rank();
  nranks_ = bootstrap_->size();
  conns_.resize(static_cast<size_t>(nranks_));
}

std::shared_ptr<CommImpl> CommImpl::create(const Config& config, std::shared_ptr<Bootstrap> bootstrap) {
  Selector::checkForced(config.algo);  // before any communication, so a misspelt name fails at once
  std::shared_ptr<CommImpl> comm(new CommImpl(config, std::move(bootstrap)));
  std::string me = hostIdentity(config);
  auto all = comm->bootstrap_->allGather(me.data(), me.size());
  for (auto& h : all) comm->hostIds_.emplace_back(h.begin(), h.end());
  for (auto& h : comm->hostIds_) comm->oneHost_ &= h == comm->hostIds_[0];
  // The topology (discovered, or STRATA_TOPO_FILE) decides the hierarchy plans see; host identities
  // decide transports.
  comm->topology_ = buildTopology(config, *comm->bootstrap_, comm->hostIds_);
  for (const RankPlace& p : comm->topology_.ranks) comm->hostIndex_.push_back(p.host);
  const int localRanks = static_cast<int>(
      std::count(comm->hostIds_.begin(), comm->hostIds_.end(), comm->hostIds_[static_cast<size_t>(comm->rank_)]));
  // Oversubscribed when this host's ranks outnumber the CPUs they may run on together: the union of
  // their affinity masks (a launcher that binds each rank to its own core, as mpirun does, gives each a
  // one-CPU mask, yet the ranks do not share cores).
  cpu_set_t cpus;
  if (sched_getaffinity(0, sizeof(cpus), &cpus) != 0) {
    CPU_ZERO(&cpus);
    CPU_SET(0, &cpus);
  }
  const auto masks = comm->bootstrap_->allGather(&cpus, sizeof(cpus));
  cpu_set_t hostCpus;
  CPU_ZERO(&hostCpus);
  for (size_t r = 0; r < masks.size(); ++r) {
    if (comm->hostIds_[r] != comm->hostIds_[static_cast<size_t>(comm->rank_)] || masks[r].size() != sizeof(cpu_set_t))
      continue;
    cpu_set_t m;
    std::memcpy(&m, masks[r].data(), sizeof(m));
    CPU_OR(&hostCpus, &hostCpus, &m);
  }
  const int ncpu = std::max(1, CPU_COUNT(&hostCpus));
  comm->oversubscribed_ = localRanks > ncpu;
  STRATA_INFO(kLogInit, "rank %d: %d rank(s) on this host share %d CPU(s)%s", comm->rank_, localRanks, ncpu,
              comm->oversubscribed_ ? ": oversubscribed, waits yield at once" : "");
  comm->selector_ = std::make_unique<Selector>(config.algo, tuningInputs(comm->topology_, comm->chunkBytes()),
                                               comm->rank_);
  if (logEnabled(LogLevel::kInfo, kLogInit) && comm->rank_ == 0)
    STRATA_INFO(kLogInit, "topology:\n%s", comm->topology_.toText().c_str());
  std::weak_ptr<CommImpl> weak = comm;
  comm->bootstrap_->setFailureHandler([weak](const std::string& reason) {
    if (auto c = weak.lock()) {
      std::lock_guard<std::mutex> lk(c->failMutex_);
      if (!c->failed_.load()) {
        c->failCode_ = strataRemoteError;
        c->failMessage_ = reason;
        c->failed_.store(true, std::memory_order_release);
      }
    }
  });
  if (config.tune == "probe" && comm->nranks_ > 1) comm->probeLinks();
  STRATA_INFO(kLogInit, "rank %d/%d initialised on host %s", comm->rank_, comm->nranks_, me.c_str());
  return comm;
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
  // its CUDA IPC buffers can be freed (DeviceEngine::quiesce).
  if (!aborted_.load() && !failed_.load()) {
    DeviceEngine* engine = nullptr;
    {
      std::lock_guard<std::mutex> lk(deviceMutex_);
      engine = device_.get();
    }
    bool live = false;
    {
      std::lock_guard<std::mutex> lk(queueMutex_);
      live = !destroyed_;
    }
    if (engine && live) {
      try {
        engine->quiesce();
      } catch (const Error& e) {
        STRATA_WARN(kLogColl, "rank %d: %s", rank_, e.what());
      }
    }
  }
  {
    std::unique_lock<std::mutex> lk(queueMutex_);
    if (destroyed_) return;
    waitQueue(lk, [&] { return (queue_.empty() && !busy_) || aborted_.load(); });
    destroyed_ = true;
    stopWorker_ = true;
  }
  queueCv_.notify_all();
  if (worker_.joinable()) worker_.join();
  // Every device call has been run (or dropped) by the worker; the engine waits for the GPU to finish with
  // its memory before freeing it.
  {
    std::lock_guard<std::mutex> lk(deviceMutex_);
    device_.reset();
  }
  // Let committed messages leave before the links close, within the deadline.
  if (!aborted_.load()) {
    const int64_t deadline = nowNs() + std::min<int64_t>(config_.timeoutMs, 10000) * 1000000;
    for (auto& c : conns_) {
      if (!c) continue;
      try {
        while (!c->flushed() && nowNs() < deadline) {
          if (!c->progress()) sched_yield();
        }
      } catch (const Error&) {
        // The peer is gone; nothing left to deliver.
      }
    }
  }
  conns_.clear();
  if (bootstrap_) bootstrap_->setFailureHandler(nullptr);
  bootstrap_.reset();
}

void CommImpl::abort() {
  aborted_.store(true);
  {
    std::lock_guard<std::mutex> lk(failMutex_);
    if (!failed_.load()) {
      failCode_ = strataInvalidUsage;
      failMessage_ = strprintf("rank %d: communicator aborted", rank_);
      failed_.store(true);
    }
  }
  {
    std::lock_guard<std::mutex> lk(queueMutex_);
    for (auto& item : queue_) {
      item.task->complete(strataInvalidUsage, "communicator aborted before this work ran");
      if (item.after) item.after(strataInvalidUsage);
    }
    queue_.clear();
  }
  queueCv_.notify_all();
  destroy();
}

strataResult_t CommImpl::asyncError() const {
  std::lock_guard<std::mutex> lk(failMutex_);
  return failCode_;
}

std::string CommImpl::asyncErrorMessage() const {
  std::lock_guard<std::mutex> lk(failMutex_);
  return failMessage_;
}

void CommImpl::checkUsable() const {
  if (failed_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lk(failMutex_);
    throw Error(failCode_ == strataSuccess ? strataInvalidUsage : failCode_,
                strprintf("rank %d: communicator is unusable after an earlier error: %s", rank_, failMessage_.c_str()));
  }
}

void CommImpl::fail(const Error& e) {
  bool first = false;
  {
    std::lock_guard<std::mutex> lk(failMutex_);
    if (!failed_.load()) {
      failCode_ = e.code();
      failMessage_ = e.what();
      failed_.store(true, std::memory_order_release);
      first = true;
    }
  }
  // Tell every rank of the job, so survivors fail fast with the real cause.
  if (first && e.code() != strataRemoteError && bootstrap_) {
    try {
      bootstrap_->reportFailure(e.what());
    } catch (...) {
    }
  }
  STRATA_WARN(kLogColl, "%s", e.what());
}

std::shared_ptr<CommImpl> CommImpl::split(int color, int key) {
  checkUsable();
  std::unique_lock<std::mutex> lk(queueMutex_);
  waitQueue(lk, [&] { return queue_.empty() && !busy_; });
  busy_ = true;
  lk.unlock();
  std::shared_ptr<CommImpl> child;
  try {
    auto view = bootstrap_->split(color, key);
    if (view) child = CommImpl::create(config_, std::move(view));
  } catch (...) {
    lk.lock();
    busy_ = false;
    lk.unlock();
    queueCv_.notify_all();
    throw;
  }
  lk.lock();
  busy_ = false;
  lk.unlock();
  queueCv_.notify_all();
  return child;
}

strataRedOp_t CommImpl::createPreMulSum(double scalar, strataDataType_t) {
  std::lock_guard<std::mutex> lk(redOpMutex_);
  for (size_t i = 0; i < preMulSums_.size(); ++i) {
    if (!preMulSums_[i].live) {
      preMulSums_[i] = {scalar, true};
      return static_cast<strataRedOp_t>(strataNumOps + static_cast<int>(i));
    }
  }
  preMulSums_.push_back({scalar, true});
  return static_cast<strataRedOp_t>(strataNumOps + static_cast<int>(preMulSums_.size() - 1));
}

void CommImpl::destroyRedOp(strataRedOp_t op) {
  std::lock_guard<std::mutex> lk(redOpMutex_);
  const int i = static_cast<int>(op) - strataNumOps;
  if (i < 0 || static_cast<size_t>(i) >= preMulSums_.size() || !preMulSums_[static_cast<size_t>(i)].live)
    throw InvalidArgument(strprintf("rank %d: reduction op %d was not created by strataRedOpCreatePreMulSum", rank_,
                                    static_cast<int>(op)));
  preMulSums_[static_cast<size_t>(i)].live = false;
}

// ---- submission ---------------------------------------------------------------------------------------

void CommImpl::run(std::span<const CollCall> calls) {
  checkUsable();
  {
    std::unique_lock<std::mutex> lk(queueMutex_);
    if (destroyed_) throw InvalidUsage(strprintf("rank %d: communicator used after destroy", rank_));
    waitQueue(lk, [&] { return (queue_.empty() && !busy_) || failed_.load(); });
    checkUsable();
    busy_ = true;
  }
  struct Release {
    CommImpl* c;
    ~Release() {
      bool wake;
      {
        std::lock_guard<std::mutex> lk(c->queueMutex_);
        c->busy_ = false;
        wake = c->queueWaiters_ > 0;  // a blocking caller alone (no worker, no other thread) wakes nobody
      }
      if (wake) c->queueCv_.notify_all();
    }
  } release{this};
  runLocked(calls);
}

std::shared_ptr<Task> CommImpl::submit(std::vector<CollCall> calls, std::function<void()> before,
                                           std::function<void(strataResult_t)> after) {
  checkUsable();
  auto task = std::make_shared<Task>();
  {
    std::lock_guard<std::mutex> lk(queueMutex_);
    if (destroyed_) throw InvalidUsage(strprintf("rank %d: communicator used after destroy", rank_));
    queue_.push_back(QueueItem{std::move(calls), task, std::move(before), std::move(after)});
    if (!worker_.joinable()) worker_ = std::thread([this] { workerLoop(); });
  }
  queueCv_.notify_all();
  return task;
}

void CommImpl::workerLoop() {
  std::unique_lock<std::mutex> lk(queueMutex_);
  for (;;) {
    waitQueue(lk, [&] { return stopWorker_ || (!queue_.empty() && !busy_); });
    if (queue_.empty()) {
      if (stopWorker_) return;
      continue;
    }
    QueueItem item = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lk.unlock();
    strataResult_t result = strataSuccess;
    std::string message;
    try {
      checkUsable();
      if (item.before) item.before();
      runLocked(item.calls);
    } catch (const Error& e) {
      result = e.code();
      message = e.what();
    } catch (const std::exception& e) {
      result = strataInternalError;
      message = e.what();
    }
    if (item.after) item.after(result);
    item.task->complete(result, message);
    lk.lock();
    busy_ = false;
    queueCv_.notify_all();
  }
}

void CommImpl::runLocked(std::span<const CollCall> calls) {
  try {
    std::vector<CollCall> p2p;
    for (const CollCall& c : calls) {
      if (c.kind == CollKind::kSend || c.kind == CollKind::kRecv) {
        p2p.push_back(c);
      } else {
        executeCollective(c);
      }
    }
    if (!p2p.empty()) executeP2P(p2p);
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

void CommImpl::runDevice(std::span<const CollCall> calls) {
  checkUsable();
  for (const CollCall& c : calls) validate(c);
  DeviceEngine* engine;
  {
    std::lock_guard<std::mutex> lk(deviceMutex_);
    if (destroyed_) throw InvalidUsage(strprintf("rank %d: communicator used after destroy", rank_));
    if (!device_) device_ = std::make_unique<DeviceEngine>(*this, cudaApi());
    engine = device_.get();
  }
  engine->enqueue(calls, calls.empty() ? nullptr : calls.front().stream);
}

// ---- execution ----------------------------------------------------------------------------------------

size_t CommImpl::chunkBytes() const {
  // A rank may run one chunk ahead of its peer; half the connection's capacity leaves room for the
  // pieces already in flight.
  return std::max<size_t>(config_.connectionCapacity() / 2, config_.pieceBytes);
}

size_t CommImpl::chunkElems(strataDataType_t dtype) const {
  return std::max<size_t>(1, chunkBytes() / dtypeSize(dtype));
}

void CommImpl::ensureConnections(const std::vector<int>& peers) {
  // Ascending peer order on every rank is consistent with the global order of pairs (min, max), so
  // blocking pairwise set-ups cannot wait on each other in a cycle.
  for (int p : peers) {
    if (conns_[static_cast<size_t>(p)]) continue;
    const bool sameHost = hostIds_[static_cast<size_t>(p)] == hostIds_[static_cast<size_t>(rank_)];
    // STRATA_TRANSPORT=tcp|ucx forces that transport for every peer; otherwise (auto, shm) peers on this
    // host use shm and peers on other hosts STRATA_NET.
    std::string kind;
    if (config_.transport == "tcp" || config_.transport == "ucx") {
      kind = config_.transport;
    } else {
      kind = sameHost ? "shm" : config_.net;
    }
    STRATA_INFO(kLogNet, "rank %d: connecting to rank %d over %s", rank_, p, kind.c_str());
    auto& conn = conns_[static_cast<size_t>(p)];
    if (kind == "shm") {
      conn = connectShm(*bootstrap_, config_, p, kConnSetupTag);
    } else if (kind == "ucx") {
      conn = connectUcx(*bootstrap_, config_, p, kConnSetupTag);
    } else {
      conn = connectTcp(*bootstrap_, config_, p, kConnSetupTag);
    }
  }
}

std::string OpLabel::str() const {
  if (nops) return strprintf("rank %d: %s #%llu (%zu ops)", rank, name, static_cast<unsigned long long>(seq), nops);
  return strprintf("rank %d: %s #%llu (count %zu, %s, %s)", rank, name, static_cast<unsigned long long>(seq), count,
                   dtypeName(dtype), algorithm);
}

std::string CommImpl::explainRemote(const std::string& what, const Error& e) {
  if (e.code() != strataRemoteError) return what + ": " + e.what();
  // A broken link often only says which neighbour went away: that neighbour may itself have stopped
  // because a third rank died. The bootstrap root sees every process exit and tells everyone, so wait a
  // moment for its verdict and report the rank that actually failed.
  const int64_t until = nowNs() + 2000000000;
  while (!failed_.load(std::memory_order_acquire) && nowNs() < until) {
    timespec ts{0, 10000000};
    nanosleep(&ts, nullptr);
  }
  if (failed_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lk(failMutex_);
    return what + " aborted: " + failMessage_ + " (seen here as: " + e.what() + ")";
  }
  return what + ": " + e.what();
}

bool CommImpl::pollStalled(Waitable& runner) {
  std::vector<pollfd>& fds = pollFds_;
  fds.clear();
  for (int p : runner.stalledPeers()) {
    Connection* c = conns_[static_cast<size_t>(p)].get();
    if (!c || !c->addPollFds(fds)) return false;
  }
  // Bytes other links still have queued must keep moving too (see drive()).
  for (auto& c : conns_)
    if (c && !c->flushed() && !c->addPollFds(fds)) return false;
  if (fds.empty()) return false;
  ::poll(fds.data(), fds.size(), 1);  // 1 ms at most, so failures and deadlines are still noticed
  return true;
}

void CommImpl::drive(Waitable& runner, const OpLabel& label, const char* phase) {
  auto whatStr = [&] { return label.str() + (phase ? phase : ""); };
  int64_t deadline = 0;  // set at the first stall: the clock is not read while work moves
  // Oversubscribed (more ranks on this host than cores we may run on): a spinning rank holds the core its
  // peer needs, so yield at once, as Open MPI does with yield_when_idle.
  const int64_t spinNs = oversubscribed_ ? 0 : int64_t(config_.spinUs) * 1000;
  int64_t idleSince = 0;
  int64_t nextCheck = 0;
  int64_t sleepNs = 1000;
  int idleSpins = 0;
  while (!runner.done()) {
    bool moved;
    try {
      moved = runner.progress();
      if (!moved) {
        // While stalled, keep every link moving, not only this plan's: bytes an earlier plan committed
        // may still sit in a TCP staging buffer that a peer is waiting for.
        for (auto& c : conns_)
          if (c) moved |= c->progress();
        if (moved) continue;
      }
    } catch (const Error& e) {
      throw Error(e.code(), explainRemote(whatStr(), e));
    }
    if (moved) {
      idleSince = 0;
      idleSpins = 0;
      continue;
    }
    // The first idle rounds spin without reading the clock (a clock read costs as much as a round).
    if (spinNs > 0 && ++idleSpins < 32) {
      cpuRelax();
      continue;
    }
    const int64_t now = nowNs();
    if (deadline == 0) deadline = now + config_.timeoutMs * 1000000;
    if (idleSince == 0) {
      idleSince = now;
      nextCheck = now + 1000000;
      sleepNs = 1000;
    }
    if (failed_.load(std::memory_order_acquire)) {
      std::lock_guard<std::mutex> lk(failMutex_);
      throw RemoteError(whatStr() + " aborted: " + failMessage_);
    }
    if (now >= nextCheck) {
      nextCheck = now + 50000000;  // every 50 ms while stalled
      for (int p : runner.stalledPeers()) {
        if (conns_[static_cast<size_t>(p)]) {
          try {
            conns_[static_cast<size_t>(p)]->checkPeer();
          } catch (const Error& e) {
            throw RemoteError(explainRemote(whatStr(), e));
          }
        }
      }
      if (now > deadline)
        throw TimeoutError(strprintf("%s timed out after %lld ms (STRATA_TIMEOUT_MS) waiting on: %s", whatStr().c_str(),
                                     static_cast<long long>(config_.timeoutMs), runner.describeStall().c_str()));
    }
    // Spin briefly, then block on the sockets when every link we wait on has them, else yield, then
    // sleep: ranks often outnumber cores, and on a network wait the kernel needs the CPU to move the bytes.
    const int64_t idle = now - idleSince;
    if (idle < spinNs) {
      cpuRelax();  // one pause: on Zen a pause is ~65 cycles, 16 of them add a third of a microsecond
    } else if (pollStalled(runner)) {
      continue;
    } else if (idle < spinNs + 50000000) {
      sched_yield();
    } else {
      timespec ts{0, static_cast<long>(sleepNs)};
      nanosleep(&ts, nullptr);
      sleepNs = std::min<int64_t>(sleepNs * 2, 100000);
    }
  }
}

void CommImpl::executePlan(const Plan& plan, const std::vector<int>& peers, std::span<void*> buffers,
                               strataDataType_t dtype, ReduceKind op, const OpLabel& what) {
  ensureConnections(peers);
  if (plan.scratchElems) {
    if (buffers.size() <= static_cast<size_t>(kBufScratch))
      throw InternalError(strprintf("rank %d: %s: the plan needs scratch but has no scratch buffer slot", rank_,
                                    what.str().c_str()));
    const size_t bytes = plan.scratchElems * dtypeSize(dtype);
    if (scratch_.size() < bytes) scratch_.resize(bytes);
    buffers[kBufScratch] = scratch_.data();
  }
  PlanRunner runner(plan, buffers, dtype, op, config_.pieceBytes,
                    [this](int peer) { return conns_[static_cast<size_t>(peer)].get(); });
  drive(runner, what);
  // A blocking call returns only once its messages have left this process: a peer must never wait on
  // bytes parked in our staging buffers while we compute. Every receiver of this plan is in this plan,
  // so this cannot wait in a cycle.
  FlushRunner flush(conns_);
  if (!flush.done()) drive(flush, what, " (flushing sends)");
}

}  // namespace strata
