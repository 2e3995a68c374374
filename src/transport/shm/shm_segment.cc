#include "transport/shm/shm_segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <vector>

#include "transport/shm/shm_fifo.h"
#include "transport/transport.h"
#include "util/error.h"
#include "util/log.h"
#include "util/sys.h"

namespace strata::shm {
namespace {

std::string randomHex(size_t bytes) {
  std::vector<uint8_t> buf(bytes);
  fillRandom(buf.data(), bytes, "getrandom for a shared memory segment name");
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (uint8_t b : buf) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

struct FdCloser {
  int fd;
  ~FdCloser() { ::close(fd); }
};

// A segment without a valid header (its creator died between shm_open and writing the header) is removed
// once it is this old; one with a header as soon as its creator is gone.
constexpr time_t kHeaderlessGraceSeconds = 60;

bool processGone(int32_t pid) { return pid > 0 && kill(pid, 0) != 0 && errno == ESRCH; }

/// Whether /dev/shm/`name` is a FIFO segment of this user that no live process will unlink.
bool isStale(const std::string& name, uint64_t myPidNs) {
  const std::string path = "/" + name;
  int fd = shm_open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC, 0);
  if (fd < 0) return false;
  FdCloser closer{fd};
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid()) return false;
  if (static_cast<size_t>(st.st_size) >= sizeof(ShmFifoHeader)) {
    void* p = mmap(nullptr, sizeof(ShmFifoHeader), PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return false;
    const auto* h = static_cast<const ShmFifoHeader*>(p);
    const bool valid = h->magic == kFifoMagic;
    const int32_t creator = h->creatorPid;
    const uint64_t creatorNs = h->creatorPidNs;
    munmap(p, sizeof(ShmFifoHeader));
    if (valid) {
      // Pids compare only within one pid namespace: a container sharing /dev/shm with another namespace
      // leaves that namespace's segments alone.
      return creatorNs == myPidNs && creator != getpid() && processGone(creator);
    }
  }
  return time(nullptr) - st.st_mtime > kHeaderlessGraceSeconds;
}

}  // namespace

std::string newFifoSegmentName(uint64_t commId, int sender, int receiver, uint32_t tag) {
  return strprintf("/strata-%016llx-%d-%d-%u-%s", static_cast<unsigned long long>(commId), sender, receiver, tag,
                   randomHex(16).c_str());
}

bool isFifoSegmentName(const std::string& name) {
  return name.rfind("/strata-", 0) == 0 && name.find('/', 1) == std::string::npos;
}

ShmSegment& ShmSegment::operator=(ShmSegment&& o) noexcept {
  if (this != &o) {
    release();
    name_ = std::move(o.name_);
    base_ = std::exchange(o.base_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    linked_ = std::exchange(o.linked_, false);
  }
  return *this;
}

ShmSegment ShmSegment::create(const std::string& name, size_t bytes, int me, int peer) {
  ShmSegment seg;
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    throw SysError(strprintf("rank %d: shm_open(%s) for the FIFO from rank %d", me, name.c_str(), peer), errno);
  }
  seg.name_ = name;
  seg.linked_ = true;
  FdCloser closer{fd};
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    throw SysError(strprintf("rank %d: ftruncate(%s, %zu)", me, name.c_str(), bytes), errno);
  }
  // Reserve the pages now: on a full /dev/shm this fails here with ENOSPC instead of a SIGBUS on first touch.
  int rc;
  do {
    rc = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  } while (rc == EINTR);
  if (rc != 0) {
    throw SysError(strprintf("rank %d: reserving %zu bytes of /dev/shm for the FIFO from rank %d (is /dev/shm "
                             "too small? containers: --shm-size; or lower STRATA_NSLOTS / STRATA_PIECE_BYTES)",
                             me, bytes, peer),
                   rc);
  }
  seg.map(fd, bytes, me);
  // Touch every page for writing so the hot loop never takes a page fault on this side.
  auto* p = static_cast<volatile char*>(seg.base_);
  for (size_t off = 0; off < bytes; off += 4096) p[off] = 0;
  return seg;
}

ShmSegment ShmSegment::open(const std::string& name, size_t bytes, int me, int peer) {
  ShmSegment seg;
  int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) {
    throw SysError(strprintf("rank %d: shm_open(%s), the FIFO of rank %d (do both ranks really share a host "
                             "and /dev/shm?)",
                             me, name.c_str(), peer),
                   errno);
  }
  FdCloser closer{fd};
  struct stat st;
  if (fstat(fd, &st) != 0) STRATA_THROW_SYS(strprintf("rank %d: fstat(%s)", me, name.c_str()));
  if (st.st_uid != geteuid() || (st.st_mode & 077) != 0) {
    throw RemoteError(
        strprintf("rank %d: shared memory segment %s of rank %d has owner %u mode %03o, expected "
                  "owner %u mode 0600",
                  me, name.c_str(), peer, static_cast<unsigned>(st.st_uid), static_cast<unsigned>(st.st_mode & 0777),
                  static_cast<unsigned>(geteuid())));
  }
  if (static_cast<size_t>(st.st_size) < bytes) {
    throw InvalidUsage(
        strprintf("rank %d: the FIFO of rank %d has %lld bytes, expected %zu: the ranks have "
                  "different STRATA_PIECE_BYTES or STRATA_NSLOTS",
                  me, peer, static_cast<long long>(st.st_size), bytes));
  }
  seg.map(fd, bytes, me);
  // Pre-fault this side's page tables too (reads map shmem pages writable on a shared mapping).
  auto* p = static_cast<const volatile char*>(seg.base_);
  for (size_t off = 0; off < bytes; off += 4096) (void)p[off];
  return seg;
}

void ShmSegment::unlink() {
  if (linked_) {
    shm_unlink(name_.c_str());
    linked_ = false;
  }
}

void ShmSegment::map(int fd, size_t bytes, int me) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) throw SysError(strprintf("rank %d: mmap(%s, %zu)", me, name_.c_str(), bytes), errno);
  base_ = p;
  bytes_ = bytes;
}

void ShmSegment::release() {
  if (base_) munmap(base_, bytes_);
  base_ = nullptr;
  unlink();
}

size_t removeStaleSegments() {
  const uint64_t myPidNs = pidNamespaceId();
  std::vector<std::string> stale;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name.rfind("strata-", 0) == 0 && isStale(name, myPidNs)) stale.push_back(name);
    }
    closedir(d);
  }
  for (const std::string& name : stale) {
    if (shm_unlink(("/" + name).c_str()) == 0)
      STRATA_INFO(kLogShm, "removed /dev/shm/%s, left by a process that died while setting up", name.c_str());
  }
  return stale.size();
}

}  // namespace strata::shm
