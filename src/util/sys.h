// Small wrappers of Linux system facilities that more than one layer needs: random bytes, host and pid
// namespace identity, and watching another process of this host for its exit. Nothing here knows about
// ranks or connections; callers add those to their messages.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace strata {

/// Fills `n` bytes at `out` from the kernel's CSPRNG: getrandom(2), repeated after EINTR and short reads.
/// Throws SysError("<what>: <strerror> (errno N)") if getrandom fails (ENOSYS on kernels before 3.17, EPERM
/// under some seccomp filters).
void fillRandom(void* out, size_t n, const char* what = "getrandom");

/// As fillRandom, but where getrandom fails, reads the rest from /dev/urandom instead. Throws
/// SysError("<prefix>open /dev/urandom") or SysError("<prefix>read /dev/urandom") if that fails too.
void fillRandomOrUrandom(void* out, size_t n, const std::string& prefix);

/// The kernel's boot id (first line of /proc/sys/kernel/random/boot_id): equal for two processes only when
/// they run under one kernel, so it tells apart containers or VMs that share a hostname but not memory.
/// nullopt when the file cannot be read (no /proc); never throws.
std::optional<std::string> bootId();

/// An id of this process's pid namespace (inode and device of /proc/self/ns/pid): pids are comparable only
/// between processes of one pid namespace (containers sharing /dev/shm may not be). 0 when /proc cannot be
/// read: treat 0 as unknown, equal to nothing. Never throws.
uint64_t pidNamespaceId();

/// Watches whether a process of this pid namespace has exited: through a pidfd (immune to pid reuse, and it
/// sees zombies) where the kernel has pidfd_open, else with kill(pid, 0). Never throws; when the pidfd cannot
/// be opened it falls back to kill(pid, 0) silently.
class ProcessExitWatch {
 public:
  /// Watches nothing: exited() is false.
  ProcessExitWatch() = default;
  /// Watches `pid`, which must be a pid of this pid namespace (see pidNamespaceId()).
  explicit ProcessExitWatch(pid_t pid);
  ProcessExitWatch(ProcessExitWatch&& other) noexcept;
  ProcessExitWatch& operator=(ProcessExitWatch&& other) noexcept;
  ProcessExitWatch(const ProcessExitWatch&) = delete;
  ProcessExitWatch& operator=(const ProcessExitWatch&) = delete;
  ~ProcessExitWatch() { reset(); }

  /// True once the process has exited (with kill(pid, 0): once its pid is gone). Does not block.
  bool exited() const;
  /// Stops watching (closes the pidfd); exited() is false from then on.
  void reset();

 private:
  pid_t pid_ = 0;
  int pidfd_ = -1;
  bool watching_ = false;
};

}  // namespace strata
