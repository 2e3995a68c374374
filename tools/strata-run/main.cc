// strata-run: launches N local ranks of a program with the environment torchrun sets (RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT) plus STRATA_SECRET, and supervises
// them: the first rank that fails takes the whole job down, so a dead rank never leaves the others
// waiting for a deadline.
//
// One thread, one poll loop: SIGCHLD and the forwarded signals arrive through a signalfd, rank output (with
// --prefix) through pipes, and the timeout and the SIGKILL grace period are poll timeouts. Nothing spins.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kExitUsage = 2;
constexpr int kExitExecFailed = 127;
constexpr int kExitTimeout = 124;
constexpr auto kKillGrace = std::chrono::seconds(3);
// A partial line longer than this is flushed as if it ended (progress bars, binary output).
constexpr size_t kMaxPendingLine = 64 * 1024;

const char* const kUsage =
    "usage: strata-run -n N [options] [--] program [args...]\n"
    "\n"
    "Launches N local ranks of program with the environment torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK,\n"
    "LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT: a free port in [20000, 32767]) plus\n"
    "STRATA_SECRET, so that strataCommInitFromEnv (and torch.distributed) find each other. When a rank\n"
    "fails, the others are terminated (SIGTERM, then SIGKILL after 3 s) and strata-run exits with the\n"
    "failed rank's status (128 + signal for a rank killed by a signal).\n"
    "\n"
    "options:\n"
    "  -n, --np N         number of ranks (required, >= 1)\n"
    "  -p, --prefix       prefix every output line of a rank with \"[rank] \" (stdout and stderr kept apart)\n"
    "      --timeout SEC  terminate all ranks after SEC seconds and exit with status 124\n"
    "      --env K=V      add K=V to the ranks' environment (repeatable; overrides the variables above)\n"
    "  -h, --help         show this help\n"
    "\n"
    "SIGINT, SIGTERM and SIGHUP are forwarded to every rank. Each rank runs in its own process group, so\n"
    "processes it starts are terminated with it. Exit status: 0 when every rank exits 0; the first failing\n"
    "rank's status; 124 on timeout; 127 when program cannot be executed; 2 on bad usage.\n";

struct Options {
  int nranks = 0;
  bool prefix = false;
  std::optional<double> timeoutSec;
  std::vector<std::string> extraEnv;
  std::vector<std::string> argv;  // program and its arguments
};

[[noreturn]] void usageError(const std::string& message) {
  std::fprintf(stderr, "strata-run: %s\n\n%s", message.c_str(), kUsage);
  std::exit(kExitUsage);
}

bool parseInt(const std::string& s, int* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || v < -1000000000L || v > 1000000000L) return false;
  *out = static_cast<int>(v);
  return true;
}

bool parseSeconds(const std::string& s, double* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(s.c_str(), &end);
  if (errno != 0 || *end != '\0' || !(v > 0) || v > 1e9) return false;
  *out = v;
  return true;
}

Options parseOptions(int argc, char** argv) {
  Options opt;
  bool haveN = false;
  int i = 1;
  // Returns the value of an option given as "--opt VALUE", "--opt=VALUE" or (short options) "-nVALUE".
  auto value = [&](const std::string& arg, const std::string& name, size_t attachedAt) -> std::string {
    if (attachedAt < arg.size()) {
      return arg.substr(arg[attachedAt] == '=' ? attachedAt + 1 : attachedAt);
    }
    if (i + 1 >= argc) usageError("option " + name + " needs a value");
    return argv[++i];
  };
  for (; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.empty() || arg[0] != '-' || arg == "-") break;  // the program
    if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (arg == "-p" || arg == "--prefix") {
      opt.prefix = true;
    } else if (arg.rfind("-n", 0) == 0 && arg.rfind("--", 0) != 0) {
      std::string v = value(arg, "-n", 2);
      if (!parseInt(v, &opt.nranks)) usageError("-n needs an integer, got '" + v + "'");
      haveN = true;
    } else if (arg == "--np" || arg.rfind("--np=", 0) == 0) {
      std::string v = value(arg, "--np", 4);
      if (!parseInt(v, &opt.nranks)) usageError("--np needs an integer, got '" + v + "'");
      haveN = true;
    } else if (arg == "--timeout" || arg.rfind("--timeout=", 0) == 0) {
      std::string v = value(arg, "--timeout", 9);
      double sec = 0;
      if (!parseSeconds(v, &sec)) usageError("--timeout needs a positive number of seconds, got '" + v + "'");
      opt.timeoutSec = sec;
    } else if (arg == "--env" || arg.rfind("--env=", 0) == 0) {
      std::string v = value(arg, "--env", 5);
      size_t eq = v.find('=');
      if (eq == std::string::npos || eq == 0) usageError("--env needs K=V, got '" + v + "'");
      opt.extraEnv.push_back(v);
    } else {
      usageError("unknown option '" + arg + "'");
    }
  }
  if (!haveN) usageError("missing -n N (the number of ranks)");
  if (opt.nranks < 1) usageError("-n must be at least 1, got " + std::to_string(opt.nranks));
  if (i >= argc) usageError("no program to run");
  for (; i < argc; ++i) opt.argv.emplace_back(argv[i]);
  return opt;
}

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "strata-run: %s: %s\n", what, std::strerror(errno));
  std::exit(1);
}

// Whether port is free to listen on at 0.0.0.0, where rank 0's root binds.
bool canListenOn(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) die("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(port);
  bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

// A port for rank 0's root, chosen at random in [20000, 32767] and free a moment ago: below Linux's default
// ephemeral range (32768-60999), from which any process's outgoing connection (or a bind to port 0) may take the
// port before the root listens on it. Only another explicit bind can take it, which a random choice makes rare.
int pickFreePort() {
  unsigned seed = 0;
  if (::getrandom(&seed, sizeof(seed), 0) != static_cast<ssize_t>(sizeof(seed)))
    seed = static_cast<unsigned>(::getpid());
  for (int attempt = 0; attempt < 200; ++attempt) {
    seed = seed * 1103515245u + 12345u;
    auto port = static_cast<uint16_t>(20000 + (seed >> 8) % 12768);
    if (canListenOn(port)) return port;
  }
  std::fprintf(stderr,
               "strata-run: no free TCP port in [20000, 32767] after 200 tries; pass one with --env MASTER_PORT=P\n");
  std::exit(1);
}

std::string randomSecretHex() {
  unsigned char bytes[16];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    ssize_t n = ::getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      die("getrandom");
    }
    got += static_cast<size_t>(n);
  }
  static const char kHex[] = "0123456789abcdef";
  std::string s;
  for (unsigned char b : bytes) {
    s += kHex[b >> 4];
    s += kHex[b & 15];
  }
  return s;
}

// Writes all of buf to fd; gives up silently if the reader is gone (EPIPE is not our problem to report).
void writeAll(int fd, const char* buf, size_t len) {
  while (len > 0) {
    ssize_t n = ::write(fd, buf, len);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        pollfd p{fd, POLLOUT, 0};
        ::poll(&p, 1, -1);
        continue;
      }
      return;
    }
    buf += n;
    len -= static_cast<size_t>(n);
  }
}

// One output stream (stdout or stderr) of one rank, captured through a pipe and re-emitted line by line.
struct PrefixedStream {
  int fd = -1;    // read end; -1 once closed
  int outFd = 1;  // where prefixed lines go
  std::string pending;

  void emit(const std::string& prefix, const char* data, size_t len) {
    std::string line = prefix;
    line.append(data, len);
    line += '\n';
    writeAll(outFd, line.data(), line.size());
  }
  // Reads what is available; emits complete lines. Returns false at EOF (or error).
  bool pump(const std::string& prefix) {
    char buf[65536];
    for (;;) {
      ssize_t n = ::read(fd, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) return true;
      if (n <= 0) {
        finish(prefix);
        return false;
      }
      pending.append(buf, static_cast<size_t>(n));
      size_t start = 0;
      for (;;) {
        size_t nl = pending.find('\n', start);
        if (nl == std::string::npos) break;
        emit(prefix, pending.data() + start, nl - start);
        start = nl + 1;
      }
      pending.erase(0, start);
      if (pending.size() > kMaxPendingLine) {
        emit(prefix, pending.data(), pending.size());
        pending.clear();
      }
      if (static_cast<size_t>(n) < sizeof(buf)) return true;
    }
  }
  void finish(const std::string& prefix) {
    if (!pending.empty()) emit(prefix, pending.data(), pending.size());
    pending.clear();
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

struct Rank {
  pid_t pid = -1;  // also its process group id
  bool running = false;
  int status = 0;  // waitpid status once exited
  std::string prefix;
  PrefixedStream out, err;
};

enum class RunState { kRunning, kTerminating };

class Launcher {
 public:
  explicit Launcher(Options opt) : opt_(std::move(opt)), ranks_(static_cast<size_t>(opt_.nranks)) {}

  int run() {
    setupSignals();
    buildBaseEnv();
    if (opt_.timeoutSec) {
      timeoutAt_ =
          Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(*opt_.timeoutSec));
    }
    for (int r = 0; r < opt_.nranks; ++r) {
      if (!spawn(r)) {
        // Exec failed: the program is the same for every rank, so stop the ones already started.
        state_ = RunState::kTerminating;
        terminateAll(SIGKILL);
        while (runningCount() > 0) reapBlocking();
        return kExitExecFailed;
      }
    }
    return supervise();
  }

 private:
  void setupSignals() {
    sigset_t set;
    sigemptyset(&set);
    for (int s : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&set, s);
    if (::sigprocmask(SIG_BLOCK, &set, &savedMask_) != 0) die("sigprocmask");
    sigfd_ = ::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sigfd_ < 0) die("signalfd");
    // Writing prefixed output to a closed pipe must not kill the launcher before it cleans up.
    ::signal(SIGPIPE, SIG_IGN);
  }

  void buildBaseEnv() {
    static const char* const kOwned[] = {"RANK=",       "WORLD_SIZE=",  "LOCAL_RANK=",  "LOCAL_WORLD_SIZE=",
                                         "GROUP_RANK=", "MASTER_ADDR=", "MASTER_PORT=", "STRATA_SECRET="};
    for (char** e = environ; *e; ++e) {
      bool owned = false;
      for (const char* k : kOwned) owned = owned || std::strncmp(*e, k, std::strlen(k)) == 0;
      if (!owned) baseEnv_.emplace_back(*e);
    }
    std::string n = std::to_string(opt_.nranks);
    baseEnv_.push_back("WORLD_SIZE=" + n);
    baseEnv_.push_back("LOCAL_WORLD_SIZE=" + n);
    baseEnv_.push_back("GROUP_RANK=0");
    baseEnv_.push_back("MASTER_ADDR=127.0.0.1");
    baseEnv_.push_back("MASTER_PORT=" + std::to_string(pickFreePort()));
    baseEnv_.push_back("STRATA_SECRET=" + randomSecretHex());
  }

  std::vector<std::string> rankEnv(int r) const {
    std::vector<std::string> env = baseEnv_;
    env.push_back("RANK=" + std::to_string(r));
    env.push_back("LOCAL_RANK=" + std::to_string(r));
    for (const std::string& kv : opt_.extraEnv) {
      std::string key = kv.substr(0, kv.find('=') + 1);
      std::erase_if(env, [&](const std::string& e) { return e.rfind(key, 0) == 0; });
      env.push_back(kv);
    }
    return env;
  }

  // Forks and execs rank r. Returns false (after reporting) if the program cannot be executed.
  bool spawn(int r) {
    Rank& rank = ranks_[static_cast<size_t>(r)];
    rank.prefix = "[" + std::to_string(r) + "] ";
    std::vector<std::string> env = rankEnv(r);
    std::vector<char*> envp, argvp;
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    for (std::string& a : opt_.argv) argvp.push_back(a.data());
    argvp.push_back(nullptr);

    int outPipe[2] = {-1, -1}, errPipe[2] = {-1, -1}, execPipe[2];
    if (opt_.prefix) {
      if (::pipe2(outPipe, O_CLOEXEC) != 0 || ::pipe2(errPipe, O_CLOEXEC) != 0) die("pipe");
    }
    // Closed by a successful exec (CLOEXEC); carries errno when exec fails.
    if (::pipe2(execPipe, O_CLOEXEC) != 0) die("pipe");
    // Only rank 0 may read the launcher's stdin, and not from a terminal: ranks live in their own
    // process groups, where reading the terminal would stop them.
    bool inheritStdin = r == 0 && !::isatty(0);
    int devNull = inheritStdin ? -1 : ::open("/dev/null", O_RDONLY | O_CLOEXEC);

    pid_t pid = ::fork();
    if (pid < 0) die("fork");
    if (pid == 0) {
      // Child: only async-signal-safe calls from here on.
      ::setpgid(0, 0);
      ::signal(SIGPIPE, SIG_DFL);
      ::sigprocmask(SIG_SETMASK, &savedMask_, nullptr);
      if (devNull >= 0) ::dup2(devNull, 0);
      if (opt_.prefix) {
        ::dup2(outPipe[1], 1);
        ::dup2(errPipe[1], 2);
      }
      ::execvpe(argvp[0], argvp.data(), envp.data());
      int e = errno;
      ssize_t ignored = ::write(execPipe[1], &e, sizeof(e));
      (void)ignored;
      ::_exit(kExitExecFailed);
    }
    // Parent. setpgid here as well so kill(-pid) works even before the child ran.
    ::setpgid(pid, pid);
    if (devNull >= 0) ::close(devNull);
    ::close(execPipe[1]);
    rank.pid = pid;
    rank.running = true;
    if (opt_.prefix) {
      ::close(outPipe[1]);
      ::close(errPipe[1]);
      rank.out.fd = outPipe[0];
      rank.out.outFd = 1;
      rank.err.fd = errPipe[0];
      rank.err.outFd = 2;
      ::fcntl(rank.out.fd, F_SETFL, O_NONBLOCK);
      ::fcntl(rank.err.fd, F_SETFL, O_NONBLOCK);
    }
    int childErrno = 0;
    ssize_t n;
    do {
      n = ::read(execPipe[0], &childErrno, sizeof(childErrno));
    } while (n < 0 && errno == EINTR);
    ::close(execPipe[0]);
    if (n == static_cast<ssize_t>(sizeof(childErrno))) {
      std::fprintf(stderr, "strata-run: cannot execute '%s': %s\n", opt_.argv[0].c_str(), std::strerror(childErrno));
      return false;
    }
    return true;
  }

  int runningCount() const {
    int c = 0;
    for (const Rank& r : ranks_) c += r.running ? 1 : 0;
    return c;
  }

  // Signals the process group of every rank still running (and so whatever the rank started).
  void terminateAll(int sig) {
    for (const Rank& r : ranks_) {
      if (r.running) ::kill(-r.pid, sig);
    }
  }

  void startTermination(int exitCode) {
    state_ = RunState::kTerminating;
    exitCode_ = exitCode;
    terminateAll(SIGTERM);
    killAt_ = Clock::now() + kKillGrace;
  }

  void onExit(size_t idx, int status) {
    Rank& rank = ranks_[idx];
    rank.running = false;
    rank.status = status;
    bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    // The rank's own process group may outlive it (a grandchild); take it down with the job.
    if (failed || state_ != RunState::kRunning) ::kill(-rank.pid, SIGTERM);
    if (!failed || state_ != RunState::kRunning) return;
    int others = runningCount();
    std::string what = WIFEXITED(status) ? "exited with status " + std::to_string(WEXITSTATUS(status))
                                         : "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
                                               strsignal(WTERMSIG(status)) + ")";
    if (forwardedSignal_ != 0) {
      // The user asked the job to stop; a rank dying of it is expected, not news.
    } else if (others > 0) {
      std::fprintf(stderr, "strata-run: rank %zu %s; terminating the other %d rank%s\n", idx, what.c_str(), others,
                   others == 1 ? "" : "s");
    } else {
      std::fprintf(stderr, "strata-run: rank %zu %s\n", idx, what.c_str());
    }
    startTermination(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  }

  void reap(int flags) {
    for (;;) {
      int status = 0;
      pid_t pid = ::waitpid(-1, &status, flags);
      if (pid < 0 && errno == EINTR) continue;
      if (pid <= 0) return;
      for (size_t i = 0; i < ranks_.size(); ++i) {
        if (ranks_[i].pid == pid && ranks_[i].running) onExit(i, status);
      }
      if (flags & WNOHANG) continue;
      return;
    }
  }
  void reapBlocking() { reap(0); }

  void handleSignals() {
    signalfd_siginfo info;
    for (;;) {
      ssize_t n = ::read(sigfd_, &info, sizeof(info));
      if (n < 0 && errno == EINTR) continue;
      if (n != static_cast<ssize_t>(sizeof(info))) return;
      int sig = static_cast<int>(info.ssi_signo);
      if (sig == SIGCHLD) {
        reap(WNOHANG);
      } else {
        // Forward; the ranks decide how to stop. A rank that dies of it ends the run as a failure.
        // A second signal means the user is out of patience: SIGKILL.
        terminateAll(forwardedSignal_ == 0 ? sig : SIGKILL);
        if (forwardedSignal_ == 0) forwardedSignal_ = sig;
      }
    }
  }

  // Milliseconds until the next deadline (timeout or SIGKILL), -1 if none.
  int pollTimeoutMs() const {
    std::optional<Clock::time_point> next;
    if (state_ == RunState::kRunning && timeoutAt_) next = timeoutAt_;
    if (state_ == RunState::kTerminating && killAt_) next = killAt_;
    if (!next) return -1;
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(*next - Clock::now()).count() + 1;
    return ms < 0 ? 0 : static_cast<int>(ms);
  }

  void checkDeadlines() {
    auto now = Clock::now();
    if (state_ == RunState::kRunning && timeoutAt_ && now >= *timeoutAt_) {
      int n = runningCount();
      std::fprintf(stderr, "strata-run: timeout after %g s; terminating %d rank%s\n", *opt_.timeoutSec, n,
                   n == 1 ? "" : "s");
      startTermination(kExitTimeout);
    } else if (state_ == RunState::kTerminating && killAt_ && now >= *killAt_) {
      int n = runningCount();
      if (n > 0) {
        std::fprintf(stderr, "strata-run: %d rank%s still running %lld s after SIGTERM; sending SIGKILL\n", n,
                     n == 1 ? "" : "s", static_cast<long long>(kKillGrace.count()));
      }
      terminateAll(SIGKILL);
      killAt_.reset();
    }
  }

  int supervise() {
    std::vector<pollfd> fds;
    std::vector<PrefixedStream*> streams;  // parallel to fds[1..]
    while (runningCount() > 0) {
      fds.clear();
      streams.clear();
      fds.push_back({sigfd_, POLLIN, 0});
      for (Rank& r : ranks_) {
        for (PrefixedStream* s : {&r.out, &r.err}) {
          if (s->fd >= 0) {
            fds.push_back({s->fd, POLLIN, 0});
            streams.push_back(s);
          }
        }
      }
      int rc = ::poll(fds.data(), fds.size(), pollTimeoutMs());
      if (rc < 0 && errno != EINTR) die("poll");
      if (rc > 0) {
        for (size_t i = 1; i < fds.size(); ++i) {
          if (fds[i].revents != 0) {
            Rank* owner = ownerOf(streams[i - 1]);
            streams[i - 1]->pump(owner->prefix);
          }
        }
        if (fds[0].revents & POLLIN) handleSignals();
      }
      checkDeadlines();
    }
    // Every rank has exited; flush what their pipes still hold. A grandchild holding a pipe open must
    // not keep the launcher alive, so read only what is there now.
    for (Rank& r : ranks_) {
      for (PrefixedStream* s : {&r.out, &r.err}) {
        if (s->fd >= 0) {
          s->pump(r.prefix);
          s->finish(r.prefix);
        }
      }
    }
    if (state_ == RunState::kTerminating) return exitCode_;
    return 0;
  }

  Rank* ownerOf(PrefixedStream* s) {
    for (Rank& r : ranks_) {
      if (s == &r.out || s == &r.err) return &r;
    }
    return nullptr;
  }

  Options opt_;
  std::vector<Rank> ranks_;
  std::vector<std::string> baseEnv_;
  sigset_t savedMask_{};
  int sigfd_ = -1;
  RunState state_ = RunState::kRunning;
  int exitCode_ = 0;
  int forwardedSignal_ = 0;
  std::optional<Clock::time_point> timeoutAt_, killAt_;
};

}  // namespace

int main(int argc, char** argv) {
  Options opt = parseOptions(argc, argv);
  return Launcher(std::move(opt)).run();
}
