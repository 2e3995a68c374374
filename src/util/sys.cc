#include "util/sys.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <utility>

#include "util/error.h"

namespace strata {
namespace {

// getrandom(2) until `n` bytes are filled or it fails with something other than EINTR (errno then says
// what); returns how many bytes it filled.
size_t getrandomUpTo(uint8_t* p, size_t n) {
  size_t done = 0;
  while (done < n) {
    ssize_t r = getrandom(p + done, n - done, 0);
    if (r > 0) {
      done += static_cast<size_t>(r);
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    break;
  }
  return done;
}

}  // namespace

void fillRandom(void* out, size_t n, const char* what) {
  if (getrandomUpTo(static_cast<uint8_t*>(out), n) < n) STRATA_THROW_SYS(what);
}

void fillRandomOrUrandom(void* out, size_t n, const std::string& prefix) {
  auto* p = static_cast<uint8_t*>(out);
  size_t done = getrandomUpTo(p, n);
  if (done == n) return;
  // ENOSYS on very old kernels: fall back to the device.
  const int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) STRATA_THROW_SYS(prefix + "open /dev/urandom");
  while (done < n) {
    ssize_t r = ::read(fd, p + done, n - done);
    if (r > 0) {
      done += static_cast<size_t>(r);
    } else if (r < 0 && errno == EINTR) {
      continue;
    } else {
      const int err = errno;
      ::close(fd);
      throw SysError(prefix + "read /dev/urandom", err);
    }
  }
  ::close(fd);
}

std::optional<std::string> bootId() {
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string id;
  if (f && std::getline(f, id)) return id;
  return std::nullopt;
}

uint64_t pidNamespaceId() {
  struct stat st;
  if (stat("/proc/self/ns/pid", &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_ino) ^ (static_cast<uint64_t>(st.st_dev) << 32);
}

ProcessExitWatch::ProcessExitWatch(pid_t pid) : pid_(pid), watching_(true) {
#ifdef SYS_pidfd_open
  pidfd_ = static_cast<int>(syscall(SYS_pidfd_open, pid_, 0));
#endif
}

ProcessExitWatch::ProcessExitWatch(ProcessExitWatch&& other) noexcept { *this = std::move(other); }

ProcessExitWatch& ProcessExitWatch::operator=(ProcessExitWatch&& other) noexcept {
  if (this != &other) {
    reset();
    pid_ = std::exchange(other.pid_, 0);
    pidfd_ = std::exchange(other.pidfd_, -1);
    watching_ = std::exchange(other.watching_, false);
  }
  return *this;
}

bool ProcessExitWatch::exited() const {
  if (pidfd_ >= 0) {
    struct pollfd p = {pidfd_, POLLIN, 0};
    return ::poll(&p, 1, 0) > 0;
  }
  return watching_ && ::kill(pid_, 0) == -1 && errno == ESRCH;
}

void ProcessExitWatch::reset() {
  if (pidfd_ >= 0) ::close(pidfd_);
  pidfd_ = -1;
  watching_ = false;
}

}  // namespace strata
