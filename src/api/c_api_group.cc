// The C ABI's groups (strataGroupStart .. strataGroupEnd, strataGroupEndAsync) and the work handles an asynchronous
// group end returns (strataWorkWait, strataWorkTest, strataWorkError, strataWorkFree).
#include "api/c_api_group.h"

#include <algorithm>
#include <chrono>
#include <utility>
#include <vector>

#include "api/c_api_handles.h"
#include "core/communicator.h"
#include "strata/strata.h"
#include "util/error.h"

struct strataWork {
  std::vector<std::shared_ptr<strata::Task>> tasks;
  std::atomic<bool> failureRecorded{false};  // strataWorkTest records a failure once, not on every poll
  uint32_t forkGeneration = 0;
};

namespace strata {

constinit thread_local int tApiGroupDepth = 0;

namespace {

// The calls of the calling thread's open group, held until its outermost end. The depth is a word of its own
// (tApiGroupDepth) so that a call outside a group never touches this vector, a thread-local whose destructor is
// registered on first use.
thread_local std::vector<std::pair<std::shared_ptr<CommImpl>, CollCall>> tGroupCalls;

// Runs the calls of a finished group: one batch per communicator, in first-use order.
std::vector<std::shared_ptr<Task>> launchGroup(std::vector<std::pair<std::shared_ptr<CommImpl>, CollCall>> calls,
                                               bool async) {
  std::vector<std::pair<std::shared_ptr<CommImpl>, std::vector<CollCall>>> batches;
  for (auto& [comm, call] : calls) {
    auto it = std::find_if(batches.begin(), batches.end(), [&](auto& b) { return b.first == comm; });
    if (it == batches.end()) {
      batches.emplace_back(comm, std::vector<CollCall>{});
      it = batches.end() - 1;
    }
    it->second.push_back(call);
  }
  // A receive from any source learns its peer only when a message arrives: it cannot be scheduled with other calls.
  // Refused before anything runs, so the communicator stays usable.
  for (auto& [comm, batch] : batches)
    if (batch.size() > 1 && std::any_of(batch.begin(), batch.end(), [](const CollCall& c) { return isAnySource(c); }))
      throw InvalidUsage(
          strprintf("rank %d: a receive from any source (strataRecvAny) must be alone in its group; this "
                    "group has %zu calls on its communicator",
                    comm->rank(), batch.size()));
  std::vector<std::shared_ptr<Task>> tasks;
  // Device batches are enqueued on their stream and never block the host, so they need no task.
  for (auto it = batches.begin(); it != batches.end();) {
    const bool anyDevice =
        std::any_of(it->second.begin(), it->second.end(), [](const CollCall& c) { return c.device; });
    if (!anyDevice) {
      ++it;
      continue;
    }
    if (!std::all_of(it->second.begin(), it->second.end(), [](const CollCall& c) { return c.device; }))
      throw InvalidUsage(
          strprintf("rank %d: a group mixes host buffers and device buffers on one communicator", it->first->rank()));
    it->first->runDevice(it->second);
    it = batches.erase(it);
  }
  if (batches.empty()) return tasks;
  if (!async && batches.size() == 1) {
    batches[0].first->run(batches[0].second);
    return tasks;
  }
  // Several communicators (or async): each runs on its own worker so that none waits on another.
  for (auto& [comm, batch] : batches) tasks.push_back(comm->submit(std::move(batch)));
  return tasks;
}

}  // namespace

void holdGroupCall(std::shared_ptr<CommImpl> comm, const CollCall& call) {
  tGroupCalls.emplace_back(std::move(comm), call);
}

}  // namespace strata

using namespace strata;

extern "C" {

strataResult_t strataGroupStart(void) {
  ++tApiGroupDepth;
  return strataSuccess;
}

static strataResult_t groupEnd(strataWork_t* work) {
  if (tApiGroupDepth <= 0)
    return recordApiError(nullptr, strataInvalidUsage, "strataGroupEnd without strataGroupStart");
  if (--tApiGroupDepth > 0) {
    if (work) *work = nullptr;
    return strataSuccess;
  }
  auto calls = std::move(tGroupCalls);
  tGroupCalls.clear();
  std::vector<std::shared_ptr<Task>> tasks;
  strataResult_t r = guarded(nullptr, [&] { tasks = launchGroup(std::move(calls), work != nullptr); });
  if (r != strataSuccess) return r;
  if (work) {
    auto w = std::make_shared<strataWork>();
    w->tasks = std::move(tasks);
    w->forkGeneration = forkGeneration();
    *work = w.get();
    registerWork(std::move(w));
    return strataSuccess;
  }
  for (auto& t : tasks) {
    t->wait(-1);
    if (t->result() != strataSuccess) return recordApiError(nullptr, t->result(), t->error());
  }
  return strataSuccess;
}

strataResult_t strataGroupEnd(void) { return groupEnd(nullptr); }

strataResult_t strataGroupEndAsync(strataWork_t* work) {
  if (!work) return recordApiError(nullptr, strataInvalidArgument, "strataGroupEndAsync: work is NULL");
  *work = nullptr;
  if (tApiGroupDepth != 1)
    return recordApiError(nullptr, strataInvalidUsage, "strataGroupEndAsync must end the outermost group");
  return groupEnd(work);
}

// The first failed task of finished work, or null. A finished task's result and error never change, so
// several threads may read them at once.
static const Task* firstFailure(const strataWork& work) {
  for (auto& t : work.tasks)
    if (t->done() && t->result() != strataSuccess) return t.get();
  return nullptr;
}

static strataResult_t refuseWork(const char* what, strataWork_t work) {
  return recordApiError(nullptr, strataInvalidUsage,
                        strprintf("%s: invalid work handle %p (already freed by strataWorkFree, or never returned by "
                                  "strataGroupEndAsync)",
                                  what, static_cast<void*>(work)));
}

strataResult_t strataWorkWait(strataWork_t handle, int64_t timeoutMs) {
  if (!handle) return recordApiError(nullptr, strataInvalidArgument, "strataWorkWait: work is NULL");
  std::shared_ptr<strataWork> work = liveWork(handle);
  if (!work) return refuseWork("strataWorkWait", handle);
  // One deadline for the whole work, not timeoutMs per task.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(std::max<int64_t>(timeoutMs, 0));
  for (auto& t : work->tasks) {
    int64_t left = -1;
    if (timeoutMs >= 0) {
      left = std::max<int64_t>(
          0,
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count());
    }
    if (!t->wait(left)) return strataInProgress;
  }
  if (const Task* f = firstFailure(*work)) return recordApiError(nullptr, f->result(), f->error());
  return strataSuccess;
}

strataResult_t strataWorkTest(strataWork_t handle, int* done) {
  if (!handle || !done) return recordApiError(nullptr, strataInvalidArgument, "strataWorkTest: work or done is NULL");
  std::shared_ptr<strataWork> work = liveWork(handle);
  if (!work) return refuseWork("strataWorkTest", handle);
  *done = 0;
  for (auto& t : work->tasks)
    if (!t->done()) return strataSuccess;
  *done = 1;
  // A failure is returned on every poll, but recorded (strataGetLastError, the log) only on the first.
  if (const Task* f = firstFailure(*work)) {
    if (!work->failureRecorded.exchange(true)) return recordApiError(nullptr, f->result(), f->error());
    return f->result();
  }
  return strataSuccess;
}

const char* strataWorkError(strataWork_t handle) {
  std::shared_ptr<strataWork> work = liveWork(handle);
  if (!work) return "";
  const Task* f = firstFailure(*work);
  return f ? f->error().c_str() : "";  // the task outlives this call while the handle is not freed
}

strataResult_t strataWorkFree(strataWork_t handle) {
  if (!handle) return strataSuccess;  // as free(NULL)
  std::shared_ptr<strataWork> work = takeWork(handle);
  if (!work) return refuseWork("strataWorkFree", handle);
  if (work->forkGeneration != forkGeneration()) {
    new std::shared_ptr<strataWork>(std::move(work));  // its tasks run on the parent's threads: leave them be
  }
  return strataSuccess;
}

}  // extern "C"

namespace strata {

strataResult_t discardApiGroup() {
  if (tApiGroupDepth <= 0) return recordApiError(nullptr, strataInvalidUsage, "group end without a group start");
  if (--tApiGroupDepth == 0) tGroupCalls.clear();
  return strataSuccess;
}

}  // namespace strata
