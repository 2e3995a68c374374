#include "core/progress.h"

#include <sched.h>
#include <time.h>

#include <algorithm>

namespace strata {
namespace {

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

}  // namespace

Progress::Progress(int64_t timeoutMs, int spinUs, ConnectionTable& conns, const FailureState& failure, WaitBoard* board)
    : timeoutMs_(timeoutMs), spinNs_(int64_t(spinUs) * 1000), conns_(conns), failure_(failure), board_(board) {}

std::string Progress::explainRemote(const std::string& what, const Error& e) const {
  if (e.code() != strataRemoteError) return what + ": " + e.what();
  // A broken link often only says which neighbour went away: that neighbour may itself have stopped because a
  // third rank died. The bootstrap root sees every process exit and tells everyone, so wait a moment for its
  // verdict and report the rank that actually failed.
  const int64_t until = nowNs() + kVerdictWaitNs;
  while (!failure_.failed() && nowNs() < until) {
    timespec ts{0, 10000000};
    nanosleep(&ts, nullptr);
  }
  if (failure_.failed()) return what + " aborted: " + failure_.message() + " (seen here as: " + e.what() + ")";
  return what + ": " + e.what();
}

bool Progress::pollStalled(Waitable& w) {
  std::vector<pollfd>& fds = pollFds_;
  fds.clear();
  if (!conns_.addPollFds(w.stalledPeers(), fds) || fds.empty()) return false;
  ::poll(fds.data(), fds.size(), kPollTimeoutMs);
  return true;
}

void Progress::drive(Waitable& w, const OpLabel& label, const char* phase) {
  auto whatStr = [&] { return label.str() + (phase ? phase : ""); };
  // A published wait is withdrawn however the drive ends.
  struct Published {
    WaitBoard* board = nullptr;
    ~Published() {
      if (board) board->publishWait({}, "");
    }
  } published;
  int64_t deadline = 0;  // set at the first stall: the clock is not read while work moves
  int64_t idleSince = 0;
  int64_t nextCheck = 0;
  int64_t sleepNs = kFirstSleepNs;
  int idleSpins = 0;
  while (!w.done()) {
    bool moved;
    try {
      moved = w.progress();
      if (!moved) {
        // While stalled, keep every link moving, not only this wait's: bytes an earlier plan committed may
        // still sit in a TCP staging buffer that a peer is waiting for.
        moved = conns_.progressAll();
        if (moved) continue;
      }
    } catch (const StampMismatch&) {
      throw;  // the caller names both calls (CollectiveExecutor::runPlan)
    } catch (const Error& e) {
      throw Error(e.code(), explainRemote(whatStr(), e));
    }
    if (moved) {
      idleSince = 0;
      idleSpins = 0;
      continue;
    }
    // The first idle rounds spin without reading the clock (a clock read costs as much as a round).
    if (spinNs_ > 0 && ++idleSpins < kSpinRoundsBeforeClock) {
      cpuRelax();
      continue;
    }
    const int64_t now = nowNs();
    if (deadline == 0) deadline = now + timeoutMs_ * 1000000;
    if (idleSince == 0) {
      idleSince = now;
      nextCheck = now + 1000000;
      sleepNs = kFirstSleepNs;
    }
    if (failure_.failed()) throw RemoteError(whatStr() + " aborted: " + failure_.message());
    if (now >= nextCheck) {
      nextCheck = now + kLivenessCheckNs;
      for (int p : w.stalledPeers()) {
        for (int ch = 0; ch < conns_.channels(); ++ch) {
          Connection* c = conns_.get(p, ch);
          if (!c) continue;
          try {
            c->checkPeer();
          } catch (const Error& e) {
            throw RemoteError(explainRemote(whatStr(), e));
          }
          break;  // one live connection of the pair says the peer lives
        }
      }
      if (board_ && !published.board && now - idleSince >= kPublishWaitNs) {
        board_->publishWait(w.stalledPeers(), whatStr());
        published.board = board_;
      }
      if (now > deadline) {
        const std::string chain = board_ ? board_->explainWait(w.stalledPeers()) : "";
        throw TimeoutError(strprintf("%s timed out after %lld ms (STRATA_TIMEOUT_MS) waiting on: %s%s%s",
                                     whatStr().c_str(), static_cast<long long>(timeoutMs_), w.describeStall().c_str(),
                                     chain.empty() ? "" : "; ", chain.c_str()));
      }
    }
    // Spin briefly, then block on the sockets when every link we wait on has them, else yield, then sleep:
    // ranks often outnumber cores, and on a network wait the kernel needs the CPU to move the bytes.
    const int64_t idle = now - idleSince;
    if (idle < spinNs_) {
      cpuRelax();  // one pause: on Zen a pause is ~65 cycles, 16 of them add a third of a microsecond
    } else if (pollStalled(w)) {
      continue;
    } else if (idle < spinNs_ + kYieldNs) {
      sched_yield();
    } else {
      timespec ts{0, static_cast<long>(sleepNs)};
      nanosleep(&ts, nullptr);
      sleepNs = std::min<int64_t>(sleepNs * 2, kMaxSleepNs);
    }
  }
}

}  // namespace strata
