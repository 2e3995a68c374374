// libFuzzer target: the bootstrap root's wire decoder, through a real root service on loopback. For each input a
// fresh root (one rank expected) is started and the harness connects to it. An even first byte sends the rest
// of the input before authenticating (a stranger: the challenge's reply decoder, the admission rules); an odd
// one answers the challenge with the right MAC first, so the input's frames reach the decoder of an active
// rank's messages (relays, failure reports, wait states and queries, goodbyes). The root must refuse or
// survive every input; the harness half-closes and reads to EOF, so every byte was handled before the next.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "bootstrap/bootstrap.h"
#include "bootstrap/siphash.h"
#include "bootstrap/wire.h"
#include "util/config.h"

using namespace strata;
using namespace strata::bootstrap_wire;

namespace {

bool writeAll(int fd, const uint8_t* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// Reads until `want` bytes, EOF or `silenceMs` of silence; returns what came. libFuzzer's timeout timer signals the
// process every second or so: an interrupted poll or recv is retried, not taken for silence or EOF.
std::vector<uint8_t> readSome(int fd, size_t want, int silenceMs = 2000) {
  std::vector<uint8_t> out;
  uint8_t buf[4096];
  while (out.size() < want) {
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, silenceMs);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) break;
    ssize_t r = ::recv(fd, buf, sizeof(buf), 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    out.insert(out.end(), buf, buf + r);
  }
  return out;
}

uint32_t le32(const uint8_t* p) { return p[0] | p[1] << 8 | p[2] << 16 | static_cast<uint32_t>(p[3]) << 24; }

// A harness failure (not the root's) says what failed before it aborts.
[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "fuzz_root_wire harness: %s (errno %d: %s)\n", what, errno, std::strerror(errno));
  std::abort();
}

const std::array<uint8_t, 16> kSecret{7, 1, 8, 2, 8, 1, 8, 2, 8, 4, 5, 9, 0, 4, 5, 2};

int connectTo(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0) die("socket");
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    if (errno != EINTR) die("connect to the root");
    // interrupted by libFuzzer's timer: the connection goes on; wait for it and read its outcome
    pollfd p{fd, POLLOUT, 0};
    while (::poll(&p, 1, 15000) < 0 && errno == EINTR) {
    }
    int err = 0;
    socklen_t len = sizeof(err);
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (!(p.revents & POLLOUT) || err != 0) {
      errno = err;
      die("connect to the root (after an interrupt)");
    }
  }
  return fd;
}

// Answers the root's challenge as rank 0 of 1; the rendezvous then completes at once.
void authenticate(int fd) {
  // A root's thread may wait seconds for a core on a loaded machine (2 s was seen with 4 busy ranks on 2 cores):
  // a missing challenge is a failure only well beyond that, and below libFuzzer's -timeout=20.
  std::vector<uint8_t> ch = readSome(fd, kFrameHeaderBytes + 4 + kChallengeBytes, 15000);
  if (ch.size() < kFrameHeaderBytes + 4 + kChallengeBytes || le32(ch.data()) != uint32_t(MsgType::kChallenge))
    die("no challenge from the root within 15 s");  // a root must always challenge a new connection
  WireWriter mac;
  mac.bytes(ch.data() + kFrameHeaderBytes + 4, kChallengeBytes).u32(0).u32(1);
  WireWriter hello;
  hello.u32(0).u32(1).u64(sipHash24(kSecret, mac.data().data(), mac.data().size()));
  hello.u32(static_cast<uint32_t>(getpid())).str("fuzzhost").str("127.0.0.1");
  const std::vector<uint8_t> frame = makeFrame(MsgType::kHello, hello.data());
  writeAll(fd, frame.data(), frame.size());
}

// Half-closes and reads to EOF: the root has handled (or refused) everything sent. The close then resets rather
// than lingering in TIME_WAIT: thousands of inputs a second would otherwise fill the kernel's TIME_WAIT table and
// the ephemeral ports within seconds, and a later connect or root bind fails for reasons not the root's.
void finish(int fd) {
  ::shutdown(fd, SHUT_WR);
  readSome(fd, SIZE_MAX);
  const linger abortive{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &abortive, sizeof(abortive));
  ::close(fd);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const Config config = [] {
    setenv("STRATA_TIMEOUT_MS", "3000", 0);
    return Config::fromEnv();
  }();
  const UniqueIdInfo id = startRootService(config, "127.0.0.1", 0, kSecret, 1);
  int fd = connectTo(id.port);
  const bool authenticated = data[0] & 1;
  if (authenticated) authenticate(fd);
  writeAll(fd, data + 1, size - 1);
  finish(fd);
  if (!authenticated) {
    // The stranger is gone; the real rank arrives and leaves, so the root ends before the next input.
    fd = connectTo(id.port);
    authenticate(fd);
    const std::vector<uint8_t> bye = makeFrame(MsgType::kGoodbye, {});
    writeAll(fd, bye.data(), bye.size());
    finish(fd);
  }
  return 0;
}
