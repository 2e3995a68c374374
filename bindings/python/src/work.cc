// Groups and asynchronous work (work.h): the per-thread group, the orphans, group start and end.
#include "work.h"

namespace strata::python_ext {

thread_local PyGroup tGroup;
std::vector<Orphan> gOrphans;

void sweepOrphans() {
  for (size_t i = 0; i < gOrphans.size();) {
    int done = 0;
    strataWorkTest(gOrphans[i].work, &done);
    if (done) {
      strataWorkFree(gOrphans[i].work);
      gOrphans[i] = std::move(gOrphans.back());
      gOrphans.pop_back();
    } else {
      ++i;
    }
  }
}

void groupStart() {
  strataGroupStart();
  ++tGroup.depth;
}

// Ends the innermost group; the outermost one runs its calls (blocking, GIL released) or returns a Work.
nb::object groupEnd(bool async) {
  if (tGroup.depth <= 0) raiseResult(strataInvalidUsage, "strata.group", "group end without a group start");
  --tGroup.depth;
  if (tGroup.depth > 0) {
    strataGroupEnd();
    return nb::none();
  }
  std::vector<Array> keep = std::move(tGroup.keep);
  tGroup.keep.clear();
  if (async) {
    strataWork_t w = nullptr;
    strataResult_t r = strataGroupEndAsync(&w);
    if (r != strataSuccess) raiseResult(r, "strata.group", strataGetLastError(nullptr));
    return nb::cast(new Work(w, std::move(keep), "strata.group"), nb::rv_policy::take_ownership);
  }
  strataResult_t r;
  {
    nb::gil_scoped_release release;
    r = strataGroupEnd();
  }
  if (r != strataSuccess) raiseResult(r, "strata.group", strataGetLastError(nullptr));
  return nb::none();
}

}  // namespace strata::python_ext
