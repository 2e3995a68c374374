#include "transport/shm/shm_single_copy.h"

#include <sys/uio.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <vector>

#include "bootstrap/peer_exchange.h"
#include "transport/shm/shm_fifo.h"
#include "transport/transport.h"
#include "util/config.h"
#include "util/error.h"
#include "util/sys.h"

namespace strata::shm {
namespace {

std::atomic<int> probeErrorForTesting{0};

// Set-up step 4: whether the two ranks read each other's memory for large pieces. Each rank names a word of its
// own and reads the peer's with process_vm_readv; single copy is on only if both reads worked, so both ranks come
// to the same answer. The peer's pid (from its FIFO header) only means something in the same pid namespace.
struct SingleCopyOffer {
  uint8_t want;  // STRATA_SHM_SINGLE_COPY != off
  uint8_t pad[7];
  uint64_t pidNs;
  uint64_t address;  // of a word this rank keeps until set-up ends
  uint64_t value;    // its value
};

std::string probeRead(pid_t peerPid, const SingleCopyOffer& peer, int me, int peerRank) {
  int err = probeErrorForTesting.load(std::memory_order_relaxed);
  uint64_t got = 0;
  if (err == 0) {
    iovec local{&got, sizeof(got)};
    iovec remote{reinterpret_cast<void*>(peer.address), sizeof(got)};
    if (process_vm_readv(peerPid, &local, 1, &remote, 1, 0) != static_cast<ssize_t>(sizeof(got))) err = errno;
    else if (got != peer.value) return strprintf("rank %d read a wrong value from rank %d's memory", me, peerRank);
  }
  if (err == 0) return {};
  if (err == EPERM) {
    return strprintf(
        "rank %d may not read rank %d's memory (process_vm_readv: EPERM; a yama ptrace_scope above 0 "
        "or a missing CAP_SYS_PTRACE refuses it)",
        me, peerRank);
  }
  if (err == ENOSYS) return strprintf("the kernel of rank %d has no process_vm_readv (ENOSYS)", me);
  return strprintf("rank %d could not read rank %d's memory (process_vm_readv: %s)", me, peerRank, std::strerror(err));
}

}  // namespace

void setSingleCopyProbeErrorForTesting(int err) { probeErrorForTesting.store(err, std::memory_order_relaxed); }

SingleCopyMode agreeOnSingleCopy(PeerExchange& exchange, const Config& config, int peer, uint32_t tag, pid_t peerPid) {
  const int me = exchange.rank();
  SingleCopyMode mode;
  mode.timeoutMs = config.timeoutMs;
  uint64_t word = 0;
  fillRandom(&word, sizeof(word), "getrandom for the single-copy probe");
  SingleCopyOffer mine{};
  mine.want = config.shmSingleCopy != "off";
  mine.pidNs = pidNamespaceId();
  mine.address = reinterpret_cast<uint64_t>(&word);
  mine.value = word;
  exchange.send(peer, tag, &mine, sizeof(mine));
  const std::vector<uint8_t> got = exchange.recv(peer, tag);
  if (got.size() != sizeof(SingleCopyOffer))
    throw RemoteError(strprintf("rank %d: rank %d sent a malformed single-copy offer", me, peer));
  SingleCopyOffer theirs;
  std::memcpy(&theirs, got.data(), sizeof(theirs));

  std::string why;  // empty: this rank can read the peer's memory
  if (!mine.want) why = strprintf("STRATA_SHM_SINGLE_COPY=off on rank %d", me);
  else if (!theirs.want) why = strprintf("STRATA_SHM_SINGLE_COPY=off on rank %d", peer);
  else if (mine.pidNs == 0 || theirs.pidNs != mine.pidNs)
    why = strprintf("rank %d is in another pid namespace than rank %d", peer, me);
  else why = probeRead(peerPid, theirs, me, peer);
  exchange.send(peer, tag, why.data(), why.size());
  const std::vector<uint8_t> peerWhy = exchange.recv(peer, tag);  // `word` stays alive until the peer has read it
  if (why.empty()) why.assign(peerWhy.begin(), peerWhy.end());
  if (why.empty()) {
    mode.minBytes = std::max<size_t>(config.shmSingleCopyBytes, kInlineBytes + 1);
    mode.state = "on";
  } else {
    mode.state = "off: " + why;
  }
  return mode;
}

}  // namespace strata::shm
