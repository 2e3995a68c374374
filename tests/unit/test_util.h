// Helpers shared by the unit tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "collectives/algorithms.h"
#include "strata/strata.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

namespace strata::test {

/// Allocations made while one is alive are not reported as leaks (scripts/sanitize.sh asan): for a test whose
/// subject leaks on purpose (memory a stuck device or a pending UCX request may still use).
struct LeakExpected {
#if defined(__SANITIZE_ADDRESS__)
  LeakExpected() { __lsan_disable(); }
  ~LeakExpected() { __lsan_enable(); }
#else
  LeakExpected() {}  // not trivial, so an instance is never an unused variable
  ~LeakExpected() {}
#endif
  LeakExpected(const LeakExpected&) = delete;
  LeakExpected& operator=(const LeakExpected&) = delete;
};

/// The plans of every rank of a call (the generators' output, as the executor gets it).
inline std::vector<Plan> plansOf(CollKind kind, const std::string& algorithm, int n, size_t count, size_t chunkElems,
                                 const std::vector<int>& hostOf) {
  std::vector<Plan> plans;
  for (int r = 0; r < n; ++r) {
    CollArgs args;
    args.kind = kind;
    args.nranks = n;
    args.rank = r;
    args.count = count;
    args.chunkElems = chunkElems;
    args.hostOf = hostOf;
    plans.push_back(makePlan(args, algorithm));
  }
  return plans;
}

/// A 1-rank communicator through the C API (its own unique id, so tests never share a root).
inline strataComm_t oneRankComm() {
  strataUniqueId id;
  EXPECT_EQ(strataGetUniqueId(&id), strataSuccess);
  strataComm_t comm = nullptr;
  EXPECT_EQ(strataCommInitRank(&comm, 1, id, 0), strataSuccess) << strataGetLastError(nullptr);
  return comm;
}

/// `n` communicators of one job, ranks as threads of this process (creation is collective, so each on its own
/// thread); every handle is returned to the caller's thread.
inline std::vector<strataComm_t> threadRanks(int n) {
  strataUniqueId id;
  EXPECT_EQ(strataGetUniqueId(&id), strataSuccess);
  std::vector<strataComm_t> comms(static_cast<size_t>(n), nullptr);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back(
        [&, r] { EXPECT_EQ(strataCommInitRank(&comms[static_cast<size_t>(r)], n, id, r), strataSuccess); });
  for (auto& t : threads) t.join();
  return comms;
}

/// Sets (or, with nullptr, unsets) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace strata::test
