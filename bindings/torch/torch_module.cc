// strata._strata_torch: the "strata" torch.distributed backend (ProcessGroupStrata) as a Python type that
// subclasses torch's c10d Backend binding, built with torch's own pybind11 so torch's types (Store, timedelta,
// Backend) pass in and out. strata/torch.py registers it with torch.distributed.
#include <pybind11/chrono.h>
#include <pybind11/stl.h>
#include <torch/python.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "process_group_strata.h"

namespace py = pybind11;
using strata::torch_backend::ProcessGroupStrata;
using strata::torch_backend::RecordingDeviceStreams;

namespace {

c10::intrusive_ptr<ProcessGroupStrata::Options> makeOptions(std::chrono::milliseconds timeout,
                                                            const std::string& groupName,
                                                            const std::vector<uint64_t>& globalRanks) {
  auto options = c10::make_intrusive<ProcessGroupStrata::Options>(timeout);
  options->group_name = groupName;
  options->global_ranks_in_group = globalRanks;
  return options;
}

// The stream-order test's backend and its log: every tensor takes the device path through the recording model.
struct StreamTestBackend {
  c10::intrusive_ptr<ProcessGroupStrata> backend;
  std::shared_ptr<RecordingDeviceStreams> streams;
};

}  // namespace

PYBIND11_MODULE(_strata_torch, m) {
  m.doc() = "The strata torch.distributed backend (a c10d::Backend over Strata); use `import strata.torch`.";
  py::module_::import("torch.distributed");  // torch's Backend and Store bindings come first

  py::class_<ProcessGroupStrata, c10d::Backend, c10::intrusive_ptr<ProcessGroupStrata>>(m, "ProcessGroupStrata")
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout, const std::string& groupName,
                       const std::vector<uint64_t>& globalRanks) {
             return c10::make_intrusive<ProcessGroupStrata>(store, rank, size,
                                                            makeOptions(timeout, groupName, globalRanks));
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"), py::arg("group_name") = "",
           py::arg("global_ranks_in_group") = std::vector<uint64_t>{}, py::call_guard<py::gil_scoped_release>())
      .def(
          "_split",
          [](ProcessGroupStrata& self, const c10::intrusive_ptr<c10d::Store>& store, const std::vector<int>& ranks,
             std::chrono::milliseconds timeout, const std::string& groupName) {
            auto options = makeOptions(timeout, groupName, std::vector<uint64_t>(ranks.begin(), ranks.end()));
            return c10::static_intrusive_pointer_cast<ProcessGroupStrata>(self.split(store, ranks, options));
          },
          py::arg("store"), py::arg("ranks"), py::arg("timeout"), py::arg("group_name") = "",
          py::call_guard<py::gil_scoped_release>(),
          "Collective over this group: a new group of `ranks` (global ranks) by strataCommSplit; None on the "
          "ranks outside it.")
      .def(
          "perform_nocolor_split", [](ProcessGroupStrata& self, const py::object&) { self.performNocolorSplit(); },
          py::arg("device") = py::none(), py::call_guard<py::gil_scoped_release>(),
          "The split call of a rank that joins no new group.")
      .def(
          "_shrink",
          [](ProcessGroupStrata& self, const std::vector<int64_t>& exclude, int flags) {
            return c10::static_intrusive_pointer_cast<ProcessGroupStrata>(self.shrink(exclude, flags, nullptr));
          },
          py::arg("ranks_to_exclude"), py::arg("flags") = 0, py::call_guard<py::gil_scoped_release>(),
          "strataCommShrink: a new group of every rank but `ranks_to_exclude` (after a failure, too).");

  py::class_<StreamTestBackend>(m, "_StreamTestBackend")
      .def_property_readonly("backend", [](const StreamTestBackend& t) { return t.backend; })
      .def("log", [](const StreamTestBackend& t) { return t.streams->log(); })
      .def("note", [](const StreamTestBackend& t, const std::string& line) { t.streams->note(line); })
      .def(
          "revoke", [](const StreamTestBackend& t) { return static_cast<int>(strataCommRevoke(t.backend->comm(), 0)); },
          "strataCommRevoke of the backend's communicator: its asynchronous error from then on.");
  m.def(
      "_stream_test_backend",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout) {
        StreamTestBackend t;
        t.backend = c10::make_intrusive<ProcessGroupStrata>(store, rank, size, makeOptions(timeout, "", {}));
        t.streams = std::make_shared<RecordingDeviceStreams>();
        t.backend->useStreamsForEveryTensor(t.streams);
        return t;
      },
      py::call_guard<py::gil_scoped_release>(),
      "Test hook: a backend whose tensors all take the device path through a recording stream model.");
}
