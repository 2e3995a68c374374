// strata._strata.Comm (comm.h): the communicator's life (init, split, shrink, revoke, destroy, abort), explain,
// and the collectives and point-to-point calls with the checks of their element counts.
#include "comm.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "buffer.h"
#include "errors.h"
#include "strata/strata.h"
#include "work.h"

namespace strata::python_ext {

namespace nb = nanobind;
using namespace nb::literals;

namespace {

class Comm {
 public:
  explicit Comm(strataComm_t c) : comm_(c) {}
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;
  ~Comm() {
    if (comm_) {
      nb::gil_scoped_release release;
      strataCommDestroy(comm_);
    }
  }

  static Comm* initRank(int nranks, nb::bytes uid, int rank) {
    if (uid.size() != STRATA_UNIQUE_ID_BYTES)
      raiseValue("strata.init: unique_id must be the " + str(STRATA_UNIQUE_ID_BYTES) +
                 " bytes strata.get_unique_id() returns, got " + str(uid.size()) + " bytes");
    strataUniqueId id;
    std::memcpy(id.internal, uid.c_str(), STRATA_UNIQUE_ID_BYTES);
    strataComm_t c = nullptr;
    strataResult_t r;
    {
      nb::gil_scoped_release release;
      r = strataCommInitRank(&c, nranks, id, rank);
    }
    if (r != strataSuccess) raiseResult(r, "strata.init", strataGetLastError(nullptr));
    return new Comm(c);
  }

  static Comm* fromEnv() {
    strataComm_t c = nullptr;
    strataResult_t r;
    {
      nb::gil_scoped_release release;
      r = strataCommInitFromEnv(&c);
    }
    if (r != strataSuccess) raiseResult(r, "strata.init", strataGetLastError(nullptr));
    return new Comm(c);
  }

  int rank() const {
    int v = 0;
    strataCommUserRank(live("rank"), &v);
    return v;
  }
  int size() const {
    int v = 0;
    strataCommCount(live("size"), &v);
    return v;
  }
  bool valid() const { return comm_ != nullptr; }

  Comm* split(int color, int key) {
    strataComm_t child = nullptr;
    strataComm_t c = live("split");
    strataResult_t r;
    {
      nb::gil_scoped_release release;
      r = strataCommSplit(c, color < 0 ? STRATA_SPLIT_NOCOLOR : color, key, &child, nullptr);
    }
    check(r, "strata.split");
    return child ? new Comm(child) : nullptr;
  }

  Comm* shrink(const std::vector<int>& exclude, bool abortFirst) {
    strataComm_t child = nullptr;
    strataComm_t c = live("shrink");
    strataResult_t r;
    {
      nb::gil_scoped_release release;
      r = strataCommShrink(c, exclude.data(), static_cast<int>(exclude.size()), &child, nullptr,
                           abortFirst ? STRATA_SHRINK_ABORT : STRATA_SHRINK_DEFAULT);
    }
    check(r, "strata.shrink");
    return new Comm(child);
  }

  void revoke() {
    strataComm_t c = live("revoke");
    strataResult_t r;
    {
      nb::gil_scoped_release release;
      r = strataCommRevoke(c, STRATA_REVOKE_DEFAULT);
    }
    check(r, "strata.revoke");
  }

  void destroy() {
    if (!comm_) return;
    strataComm_t c = std::exchange(comm_, nullptr);
    strataResult_t r;
    {
      nb::gil_scoped_release release;
      r = strataCommDestroy(c);
    }
    sweepOrphans();
    if (r != strataSuccess) raiseResult(r, "strata.destroy", strataGetLastError(nullptr));
  }

  void abort() {
    if (!comm_) return;
    strataComm_t c = std::exchange(comm_, nullptr);
    {
      nb::gil_scoped_release release;
      strataCommAbort(c);
    }
    sweepOrphans();
  }

  std::string explain(int collective, size_t count, nb::handle like) {
    Buffer b = view(like, "strata.explain", "tensor", false);
    char algo[64] = {0};
    double us = 0;
    check(strataCommExplain(live("explain"), static_cast<strataCollective_t>(collective), count, b.dtype, algo,
                            sizeof(algo), &us),
          "strata.explain");
    return algo;
  }

  // Every collective: validate, then either run it (GIL released), add it to the caller's open group, or
  // run it as its own asynchronous group and return the Work.
  nb::object allReduce(nb::handle send, nb::handle recv, int op, uintptr_t stream, bool async) {
    const std::string what = "strata.all_reduce";
    Buffer s = view(send, what, "tensor", false), d = view(recv, what, "output", true);
    sameDtype(s, d, what);
    if (s.count != d.count)
      raiseValue(what + ": output has " + str(d.count) + " elements but tensor has " + str(s.count));
    stream = streamFor(s, stream);
    strataComm_t c = live(what);
    return launch(what, {s, d}, async, [=] {
      return strataAllReduce(s.data, d.data, s.count, s.dtype, static_cast<strataRedOp_t>(op), c, toStream(stream));
    });
  }

  nb::object reduceScatter(nb::handle send, nb::handle recv, int op, uintptr_t stream, bool async) {
    const std::string what = "strata.reduce_scatter";
    Buffer s = view(send, what, "tensor", false), d = view(recv, what, "output", true);
    sameDtype(s, d, what);
    const size_t n = static_cast<size_t>(size());
    if (s.count != d.count * n)
      raiseValue(what + ": tensor has " + str(s.count) + " elements; it must have size x output elements = " + str(n) +
                 " x " + str(d.count) + " = " + str(n * d.count));
    stream = streamFor(s, stream);
    strataComm_t c = live(what);
    return launch(what, {s, d}, async, [=] {
      return strataReduceScatter(s.data, d.data, d.count, s.dtype, static_cast<strataRedOp_t>(op), c, toStream(stream));
    });
  }

  nb::object allGather(nb::handle send, nb::handle recv, uintptr_t stream, bool async) {
    const std::string what = "strata.all_gather";
    Buffer s = view(send, what, "tensor", false), d = view(recv, what, "output", true);
    sameDtype(s, d, what);
    const size_t n = static_cast<size_t>(size());
    if (d.count != s.count * n)
      raiseValue(what + ": output has " + str(d.count) + " elements; it must have size x tensor elements = " + str(n) +
                 " x " + str(s.count) + " = " + str(n * s.count));
    stream = streamFor(s, stream);
    strataComm_t c = live(what);
    return launch(what, {s, d}, async,
                  [=] { return strataAllGather(s.data, d.data, s.count, s.dtype, c, toStream(stream)); });
  }

  nb::object broadcast(nb::handle send, nb::handle recv, int root, uintptr_t stream, bool async) {
    const std::string what = "strata.broadcast";
    Buffer s = view(send, what, "tensor", false), d = view(recv, what, "output", true);
    sameDtype(s, d, what);
    if (s.count != d.count)
      raiseValue(what + ": output has " + str(d.count) + " elements but tensor has " + str(s.count));
    stream = streamFor(s, stream);
    strataComm_t c = live(what);
    return launch(what, {s, d}, async,
                  [=] { return strataBroadcast(s.data, d.data, s.count, s.dtype, root, c, toStream(stream)); });
  }

  nb::object reduce(nb::handle send, nb::handle recv, int op, int root, uintptr_t stream, bool async) {
    const std::string what = "strata.reduce";
    Buffer s = view(send, what, "tensor", false), d = view(recv, what, "output", true);
    sameDtype(s, d, what);
    if (s.count != d.count)
      raiseValue(what + ": output has " + str(d.count) + " elements but tensor has " + str(s.count));
    stream = streamFor(s, stream);
    strataComm_t c = live(what);
    return launch(what, {s, d}, async, [=] {
      return strataReduce(s.data, d.data, s.count, s.dtype, static_cast<strataRedOp_t>(op), root, c, toStream(stream));
    });
  }

  nb::object allToAll(nb::handle send, nb::handle recv, uintptr_t stream, bool async) {
    const std::string what = "strata.all_to_all";
    Buffer s = view(send, what, "tensor", false), d = view(recv, what, "output", true);
    sameDtype(s, d, what);
    const size_t n = static_cast<size_t>(size());
    if (s.count != d.count)
      raiseValue(what + ": output has " + str(d.count) + " elements but tensor has " + str(s.count));
    if (s.count % n != 0)
      raiseValue(what + ": tensor has " + str(s.count) + " elements, which is not a multiple of size " + str(n));
    stream = streamFor(s, stream);
    strataComm_t c = live(what);
    return launch(what, {s, d}, async,
                  [=] { return strataAllToAll(s.data, d.data, s.count / n, s.dtype, c, toStream(stream)); });
  }

  nb::object send(nb::handle buf, int peer, uintptr_t stream, bool async) {
    const std::string what = "strata.send";
    Buffer s = view(buf, what, "tensor", false);
    stream = streamFor(s, stream);
    strataComm_t c = live(what);
    return launch(what, {s}, async, [=] { return strataSend(s.data, s.count, s.dtype, peer, c, toStream(stream)); });
  }

  nb::object recv(nb::handle buf, int peer, uintptr_t stream, bool async) {
    const std::string what = "strata.recv";
    Buffer d = view(buf, what, "tensor", true);
    stream = streamFor(d, stream);
    strataComm_t c = live(what);
    return launch(what, {d}, async, [=] { return strataRecv(d.data, d.count, d.dtype, peer, c, toStream(stream)); });
  }

  nb::object barrier(bool async) {
    const std::string what = "strata.barrier";
    strataComm_t c = live(what);
    return launch(what, {}, async, [=] { return strataBarrier(c, nullptr); });
  }

 private:
  strataComm_t live(const std::string& what) const {
    if (!comm_) raiseResult(strataInvalidUsage, what, "the communicator was destroyed or aborted");
    return comm_;
  }
  void check(strataResult_t r, const std::string& what) const {
    if (r != strataSuccess && r != strataInProgress) raiseResult(r, what, strataGetLastError(comm_));
  }
  static strataStream_t toStream(uintptr_t s) { return reinterpret_cast<strataStream_t>(s); }

  template <typename F>
  nb::object launch(const std::string& what, std::vector<Buffer> bufs, bool async, F call) {
    sweepOrphans();
    if (tGroup.depth > 0) {
      // Inside strata.group(): the C call only records; the group's end runs it.
      if (async) raiseValue(what + ": async_op=True inside strata.group(); make the group asynchronous instead");
      strataResult_t r = call();
      check(r, what);
      for (Buffer& b : bufs) tGroup.keep.push_back(b.array);
      return nb::none();
    }
    if (!async) {
      strataResult_t r;
      {
        nb::gil_scoped_release release;
        r = call();
      }
      check(r, what);
      return nb::none();
    }
    strataGroupStart();
    strataResult_t r = call();
    if (r != strataSuccess) {
      std::string msg = strataGetLastError(comm_);
      strataWork_t w = nullptr;
      strataGroupEndAsync(&w);  // closes the group; it holds no calls
      if (w) strataWorkFree(w);
      raiseResult(r, what, msg);
    }
    strataWork_t w = nullptr;
    r = strataGroupEndAsync(&w);
    if (r != strataSuccess) raiseResult(r, what, strataGetLastError(nullptr));
    std::vector<Array> keep;
    for (Buffer& b : bufs) keep.push_back(b.array);
    return nb::cast(new Work(w, std::move(keep), what), nb::rv_policy::take_ownership);
  }

  strataComm_t comm_ = nullptr;
};

}  // namespace

void bindComm(nb::module_& m) {
  nb::class_<Comm>(m, "Comm")
      .def_static("init_rank", &Comm::initRank, "nranks"_a, "unique_id"_a, "rank"_a)
      .def_static("from_env", &Comm::fromEnv)
      .def_prop_ro("rank", &Comm::rank)
      .def_prop_ro("size", &Comm::size)
      .def_prop_ro("valid", &Comm::valid)
      .def("split", &Comm::split, "color"_a, "key"_a)
      .def("shrink", &Comm::shrink, "exclude"_a, "abort"_a)
      .def("revoke", &Comm::revoke)
      .def("destroy", &Comm::destroy)
      .def("abort", &Comm::abort)
      .def("explain", &Comm::explain)
      .def("all_reduce", &Comm::allReduce, "send"_a, "recv"_a, "op"_a, "stream"_a, "async_op"_a)
      .def("reduce_scatter", &Comm::reduceScatter, "send"_a, "recv"_a, "op"_a, "stream"_a, "async_op"_a)
      .def("all_gather", &Comm::allGather, "send"_a, "recv"_a, "stream"_a, "async_op"_a)
      .def("broadcast", &Comm::broadcast, "send"_a, "recv"_a, "root"_a, "stream"_a, "async_op"_a)
      .def("reduce", &Comm::reduce, "send"_a, "recv"_a, "op"_a, "root"_a, "stream"_a, "async_op"_a)
      .def("all_to_all", &Comm::allToAll, "send"_a, "recv"_a, "stream"_a, "async_op"_a)
      .def("send", &Comm::send, "tensor"_a, "peer"_a, "stream"_a, "async_op"_a)
      .def("recv", &Comm::recv, "tensor"_a, "peer"_a, "stream"_a, "async_op"_a)
      .def("barrier", &Comm::barrier, "async_op"_a);
}

}  // namespace strata::python_ext
