// util/sys.h: random bytes, boot and pid-namespace ids, and watching a child process exit.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <thread>

#include "util/sys.h"

namespace strata {
namespace {

TEST(Sys, FillRandomFillsEveryByte) {
  // 64 zero bytes staying all zero after a fill happens with probability 2^-512.
  std::array<uint8_t, 64> a{}, b{};
  fillRandom(a.data(), a.size());
  fillRandomOrUrandom(b.data(), b.size(), "test: ");
  EXPECT_NE(a, (std::array<uint8_t, 64>{}));
  EXPECT_NE(b, (std::array<uint8_t, 64>{}));
  EXPECT_NE(a, b);
  fillRandom(nullptr, 0);  // nothing to fill: no call, no error
}

TEST(Sys, BootIdAndPidNamespaceAreStable) {
  const auto boot = bootId();
  if (boot) {
    EXPECT_FALSE(boot->empty());
    EXPECT_EQ(bootId(), boot);
  }
  EXPECT_EQ(pidNamespaceId(), pidNamespaceId());
}

TEST(Sys, ProcessExitWatchSeesAChildExit) {
  EXPECT_FALSE(ProcessExitWatch().exited());
  int gate[2];
  ASSERT_EQ(pipe(gate), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(gate[1]);
    char c;
    (void)!read(gate[0], &c, 1);  // until the parent closes its end
    _exit(0);
  }
  ::close(gate[0]);
  ProcessExitWatch watch(child);
  EXPECT_FALSE(watch.exited());
  ProcessExitWatch moved = std::move(watch);
  EXPECT_FALSE(watch.exited());  // NOLINT(bugprone-use-after-move): a moved-from watch watches nothing
  ::close(gate[1]);
  // With a pidfd the exit shows at once (zombies included); with kill(pid, 0) only once reaped.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  bool reaped = false;
  while (!moved.exited() && std::chrono::steady_clock::now() < deadline) {
    if (!reaped && waitpid(child, nullptr, WNOHANG) == child) reaped = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(moved.exited());
  if (!reaped) waitpid(child, nullptr, 0);
  moved.reset();
  EXPECT_FALSE(moved.exited());
}

}  // namespace
}  // namespace strata
