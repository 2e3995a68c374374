// strata._strata.Comm: a communicator and its calls, each validated, then run blocking (GIL released), recorded into
// the caller's open group, or run as its own asynchronous group that returns a Work.
#pragma once

#include <nanobind/nanobind.h>

namespace strata::python_ext {

/// Adds the Comm class to module `m`.
void bindComm(nanobind::module_& m);

}  // namespace strata::python_ext
