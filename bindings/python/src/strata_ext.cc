// _strata: the nanobind extension under the `strata` Python package. It is a thin layer over the C ABI
// (strata.h) that turns numpy arrays and DLPack tensors into (pointer, count, dtype), checks them with
// messages that name the argument and what is wrong, releases the GIL while a call blocks, and keeps the
// buffers of asynchronous work alive until the work completes. Argument parsing, op names, allocation of
// outputs and torch specifics live in Python (strata/_comm.py).
//
// The module's parts: errors.cc (the exceptions), buffer.cc (array arguments), work.cc (groups and asynchronous
// work), comm.cc (the communicator and its calls).
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include "buffer.h"
#include "comm.h"
#include "errors.h"
#include "strata/strata.h"
#include "work.h"

namespace nb = nanobind;
using namespace nb::literals;
using namespace strata::python_ext;

namespace {

nb::bytes getUniqueId() {
  strataUniqueId id;
  strataResult_t r = strataGetUniqueId(&id);
  if (r != strataSuccess) raiseResult(r, "strata.get_unique_id", strataGetLastError(nullptr));
  return nb::bytes(id.internal, STRATA_UNIQUE_ID_BYTES);
}

}  // namespace

NB_MODULE(_strata, m) {
  m.doc() = "Strata's native layer; use the `strata` package.";
  // Communicators kept by the package until exit are destroyed by its atexit hook; nanobind's leak
  // report would only list Work handles a program chose not to wait on.
  nb::set_leak_warnings(false);
  addErrorTypes(m);

  m.attr("UNIQUE_ID_BYTES") = STRATA_UNIQUE_ID_BYTES;
  int version = 0;
  strataGetVersion(&version);
  m.attr("version_code") = version;
  m.def("get_unique_id", &getUniqueId);
  m.def("group_start", &groupStart);
  m.def("group_end", &groupEnd, "async_op"_a = false);
  m.def("group_depth", [] { return tGroup.depth; });
  m.def("pending_orphans", [] {
    sweepOrphans();
    return gOrphans.size();
  });
  m.def("dtype_of", [](nb::handle obj) { return view(obj, "strata.dtype_of", "tensor", false).dtypeName; });

  nb::class_<Work>(m, "Work")
      .def("wait", &Work::wait, "timeout"_a = nb::none())
      .def("is_completed", &Work::isCompleted)
      .def("error", &Work::error);

  bindComm(m);
}
