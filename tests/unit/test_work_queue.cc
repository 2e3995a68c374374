// The work queue's claim: blocking calls run inline, claimed without the mutex when nothing else is going on, and
// never overlap each other or queued work, which runs in issue order. Run under ThreadSanitizer in CI: the plain
// counter below is touched by every executor, so a claim or release without the right ordering is a reported race.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "core/failure.h"
#include "core/work_queue.h"

namespace strata {
namespace {

struct Executors {
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};
  long plain = 0;  // written by whoever holds the queue, never atomically
  void enter() {
    if (inside.fetch_add(1, std::memory_order_relaxed) != 0) overlaps.fetch_add(1, std::memory_order_relaxed);
    ++plain;
    inside.fetch_sub(1, std::memory_order_relaxed);
  }
};

TEST(WorkQueue, InlineCallsAndQueuedWorkNeverOverlapAndQueuedWorkKeepsItsOrder) {
  FailureState failure(0);
  Executors ex;
  std::vector<size_t> order;  // ids of queued items as they ran; written by the executor only
  WorkQueue q(0, failure, [&](std::span<const CollCall> calls) {
    ex.enter();
    order.push_back(calls[0].count);
  });
  constexpr int kThreads = 3, kInline = 3000, kQueued = 400;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < kInline; ++i) q.runInline([&] { ex.enter(); });
    });
  std::vector<std::shared_ptr<Task>> tasks;
  for (int i = 0; i < kQueued; ++i) {
    CollCall c;
    c.count = static_cast<size_t>(i);
    tasks.push_back(q.submit({c}));
    if (i % 8 == 0) q.runInline([&] { ex.enter(); });  // the submitting thread's own blocking calls
  }
  for (auto& t : threads) t.join();
  for (auto& t : tasks) ASSERT_TRUE(t->wait(60000));
  q.runInline([&] { ex.enter(); });  // after everything: the executor's writes are visible here
  EXPECT_EQ(ex.overlaps.load(), 0);
  EXPECT_EQ(ex.plain, long{kThreads} * kInline + kQueued + kQueued / 8 + 1);
  ASSERT_EQ(order.size(), static_cast<size_t>(kQueued));
  for (size_t i = 0; i < order.size(); ++i) ASSERT_EQ(order[i], i) << "queued work ran out of order";
  EXPECT_TRUE(q.close());
}

TEST(WorkQueue, ABlockingCallWaitsForQueuedWorkAndAClosedQueueRefusesCalls) {
  FailureState failure(0);
  std::atomic<bool> release{false}, ran{false};
  WorkQueue q(0, failure, [&](std::span<const CollCall>) {
    while (!release.load()) std::this_thread::yield();
    ran = true;
  });
  auto task = q.submit({CollCall{}});
  std::atomic<bool> inlineDone{false};
  std::thread caller([&] {
    q.runInline([&] { EXPECT_TRUE(ran.load()) << "the blocking call overtook queued work"; });
    inlineDone = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(inlineDone.load());
  release = true;
  caller.join();
  EXPECT_TRUE(task->wait(10000));
  EXPECT_TRUE(q.close());
  EXPECT_THROW(q.runInline([] {}), InvalidUsage);  // the fast claim must not take a closed queue
  EXPECT_THROW(q.submit({CollCall{}}), InvalidUsage);
}

TEST(WorkQueue, AFailedCommunicatorRefusesInlineCalls) {
  FailureState failure(0);
  WorkQueue q(0, failure, [](std::span<const CollCall>) {});
  q.runInline([] {});
  failure.record(strataRemoteError, "rank 1 died");
  EXPECT_ANY_THROW(q.runInline([] { ADD_FAILURE() << "ran after the failure"; }));
  // The queue itself is free again: shrink-like work still runs.
  bool quiesced = false;
  q.runQuiesced([&] { quiesced = true; });
  EXPECT_TRUE(quiesced);
  EXPECT_TRUE(q.close());
}

}  // namespace
}  // namespace strata
