// Groups and asynchronous work as the extension keeps them: the arrays of every call in an open strata.group(), and
// the Work of an asynchronous call or group, which keeps its arrays alive until the work completes (also when its
// Python handle is dropped first: then it becomes an orphan, freed by a later sweep).
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "errors.h"
#include "strata/strata.h"

namespace strata::python_ext {

namespace nb = nanobind;

// Per-thread mirror of the C group depth plus the arrays of every call issued inside the open group: they
// must outlive the group's operations, which run only at group end (and later still when it is async).
using Array = nb::ndarray<nb::ro>;

struct PyGroup {
  int depth = 0;
  std::vector<Array> keep;
};
extern thread_local PyGroup tGroup;

// Asynchronous work whose Python handle was dropped before it completed: the arrays stay referenced here
// until the work is done, so a forgotten handle never frees memory that a collective still writes.
struct Orphan {
  strataWork_t work;
  std::vector<Array> keep;
};
extern std::vector<Orphan> gOrphans;

/// Frees the orphans whose work has completed.
void sweepOrphans();

class Work {
 public:
  Work(strataWork_t w, std::vector<Array> keep, std::string what)
      : work_(w), keep_(std::move(keep)), what_(std::move(what)) {}
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;
  ~Work() {
    if (!work_) return;  // (no wait can be running: a waiting thread holds a reference to this object)
    int done = 0;
    strataWorkTest(work_, &done);
    if (done) {
      strataWorkFree(work_);
    } else {
      gOrphans.push_back({work_, std::move(keep_)});
    }
  }

  /// Waits up to timeout seconds (None: no limit): true when complete, false on timeout. Raises if the
  /// work failed, on this and every later wait(). Threads may wait on one Work at once: the handle is freed
  /// only when no wait is inside the C call any more.
  bool wait(std::optional<double> timeoutSec) {
    if (!done_) {
      if (timeoutSec && !(*timeoutSec >= 0)) raiseValue("Work.wait: timeout must be >= 0 seconds or None");
      const int64_t ms = timeoutSec ? static_cast<int64_t>(*timeoutSec * 1000.0) : -1;
      strataWork_t w = work_;
      strataResult_t r;
      ++waiters_;
      {
        nb::gil_scoped_release release;
        r = strataWorkWait(w, ms);
      }
      --waiters_;
      if (r == strataInProgress && !done_) return false;
      if (!done_) {
        done_ = true;
        result_ = r;
        if (r != strataSuccess) error_ = strataWorkError(w);
        keep_.clear();
      }
      if (waiters_ == 0 && work_) {
        strataWorkFree(work_);
        work_ = nullptr;
      }
    }
    if (result_ != strataSuccess) raiseResult(result_, what_, error_);
    return true;
  }

  /// True once the work has completed, successfully or not (wait() reports a failure).
  bool isCompleted() {
    if (done_ || !work_) return true;
    int done = 0;
    strataWorkTest(work_, &done);
    return done != 0;
  }

  /// The failure message of completed work; "" while it runs or after success.
  std::string error() {
    if (done_ || !work_) return error_;
    return isCompleted() ? strataWorkError(work_) : "";
  }

 private:
  strataWork_t work_ = nullptr;
  std::vector<Array> keep_;
  std::string what_;
  std::string error_;
  strataResult_t result_ = strataSuccess;
  bool done_ = false;  // wait() has seen the work complete and recorded its result
  int waiters_ = 0;    // threads inside strataWorkWait (changed with the GIL held)
};

/// strata.group_start: opens a group (nested ones too).
void groupStart();

/// Ends the innermost group; the outermost one runs its calls (blocking, GIL released) or returns a Work.
nb::object groupEnd(bool async);

}  // namespace strata::python_ext
