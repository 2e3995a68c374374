// _strata: the nanobind extension under the `strata` Python package. It is a thin layer over the C ABI
// (strata.h) that turns numpy arrays and DLPack tensors into (pointer, count, dtype), checks them with
// messages that name the argument and what is wrong, releases the GIL while a call blocks, and keeps the
// buffers of asynchronous work alive until the work completes. Argument parsing, op names, allocation of
// outputs and torch specifics live in Python (strata/_comm.py).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "strata/strata.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

// ---- exceptions ----------------------------------------------------------------------------------------

// strata.StrataError and its subclasses, one per result code a caller may want to catch on its own.
// Created here (not in Python) so that the extension can raise them with the code attached.
struct ErrorTypes {
  PyObject* base = nullptr;
  PyObject* invalidArgument = nullptr;
  PyObject* invalidUsage = nullptr;
  PyObject* remote = nullptr;
  PyObject* timeout = nullptr;
  PyObject* cuda = nullptr;
};
ErrorTypes gErrors;

const char* resultName(strataResult_t r) {
  switch (r) {
    case strataSuccess: return "strataSuccess";
    case strataUnhandledCudaError: return "strataUnhandledCudaError";
    case strataSystemError: return "strataSystemError";
    case strataInternalError: return "strataInternalError";
    case strataInvalidArgument: return "strataInvalidArgument";
    case strataInvalidUsage: return "strataInvalidUsage";
    case strataRemoteError: return "strataRemoteError";
    case strataInProgress: return "strataInProgress";
    case strataTimeout: return "strataTimeout";
    default: return "strataUnknownResult";
  }
}

PyObject* errorTypeFor(strataResult_t r) {
  switch (r) {
    case strataInvalidArgument: return gErrors.invalidArgument;
    case strataInvalidUsage: return gErrors.invalidUsage;
    case strataRemoteError: return gErrors.remote;
    case strataTimeout: return gErrors.timeout;
    case strataUnhandledCudaError: return gErrors.cuda;
    default: return gErrors.base;
  }
}

// Raises the StrataError subclass of `r` as "<what>: <strata's message> (<code name>)", with .code set.
[[noreturn]] void raiseResult(strataResult_t r, const std::string& what, const std::string& detail) {
  std::string msg = what + ": " + (detail.empty() ? strataGetErrorString(r) : detail) + " (" + resultName(r) + ")";
  PyObject* type = errorTypeFor(r);
  nb::object exc = nb::steal(PyObject_CallFunction(type, "s", msg.c_str()));
  if (!exc.is_valid()) throw nb::python_error();
  nb::setattr(exc, "code", nb::int_(static_cast<int>(r)));
  nb::setattr(exc, "code_name", nb::str(resultName(r)));
  PyErr_SetObject(type, exc.ptr());
  throw nb::python_error();
}

[[noreturn]] void raiseType(const std::string& msg) { throw nb::type_error(msg.c_str()); }
[[noreturn]] void raiseValue(const std::string& msg) { throw nb::value_error(msg.c_str()); }

// ---- buffers -------------------------------------------------------------------------------------------

constexpr int kDLCPU = 1;
constexpr int kDLCUDA = 2;
constexpr int kDLCUDAHost = 3;
constexpr int kDLCUDAManaged = 13;

struct DtypeInfo {
  uint8_t code;
  uint8_t bits;
  strataDataType_t dtype;
  const char* name;
};
using Code = nb::dlpack::dtype_code;
constexpr DtypeInfo kDtypes[] = {
    {(uint8_t)Code::Int, 8, strataInt8, "int8"},
    {(uint8_t)Code::UInt, 8, strataUint8, "uint8"},
    {(uint8_t)Code::Int, 32, strataInt32, "int32"},
    {(uint8_t)Code::UInt, 32, strataUint32, "uint32"},
    {(uint8_t)Code::Int, 64, strataInt64, "int64"},
    {(uint8_t)Code::UInt, 64, strataUint64, "uint64"},
    {(uint8_t)Code::Float, 16, strataFloat16, "float16"},
    {(uint8_t)Code::Float, 32, strataFloat32, "float32"},
    {(uint8_t)Code::Float, 64, strataFloat64, "float64"},
    {(uint8_t)Code::Bfloat, 16, strataBfloat16, "bfloat16"},
    {(uint8_t)Code::Float8_E4M3FN, 8, strataFloat8e4m3, "float8_e4m3fn"},
    {(uint8_t)Code::Float8_E5M2, 8, strataFloat8e5m2, "float8_e5m2"},
};
constexpr const char* kSupported =
    "int8, uint8, int32, uint32, int64, uint64, float16, float32, float64, bfloat16, float8_e4m3fn, float8_e5m2";

std::string dtypeName(nb::dlpack::dtype dt) {
  for (const auto& d : kDtypes)
    if (d.code == dt.code && d.bits == dt.bits && dt.lanes == 1) return d.name;
  const char* prefix = "unknown";
  switch (static_cast<Code>(dt.code)) {
    case Code::Int: prefix = "int"; break;
    case Code::UInt: prefix = "uint"; break;
    case Code::Float: prefix = "float"; break;
    case Code::Bfloat: prefix = "bfloat"; break;
    case Code::Complex: prefix = "complex"; break;
    case Code::Bool: return "bool";
    default: return "dlpack type code " + std::to_string(dt.code) + " with " + std::to_string(dt.bits) + " bits";
  }
  std::string s = prefix + std::to_string(dt.bits);
  if (dt.lanes != 1) s += "x" + std::to_string(dt.lanes);
  return s;
}

std::string shapeString(const nb::ndarray<nb::ro>& a, bool strides) {
  std::string s = "(";
  for (size_t i = 0; i < a.ndim(); ++i) {
    if (i) s += ", ";
    s += std::to_string(strides ? a.stride(i) : static_cast<int64_t>(a.shape(i)));
  }
  if (a.ndim() == 1) s += ",";
  return s + ")";
}

// A validated view of one array argument. Holding `array` keeps the producer's memory alive.
struct Buffer {
  nb::ndarray<nb::ro> array;
  void* data = nullptr;
  size_t count = 0;
  strataDataType_t dtype = strataFloat32;
  std::string dtypeName;
  bool onDevice = false;
  int deviceId = 0;
};

// `what` is "strata.all_reduce", `name` the argument ("tensor", "output").
Buffer view(nb::handle obj, const std::string& what, const char* name, bool writable) {
  Buffer b;
  nb::ndarray<> rw;
  if (nb::try_cast(obj, rw, /*convert=*/false)) {
    b.array = nb::ndarray<nb::ro>(rw);
  } else if (!nb::try_cast(obj, b.array, /*convert=*/false)) {
    raiseType(what + ": " + name + " must be a numpy array or a DLPack tensor (e.g. torch.Tensor), got " +
              nb::type_name(obj.type()).c_str());
  } else if (writable) {
    raiseValue(what + ": " + name + " is read-only, but the result is written into it");
  }
  const nb::ndarray<nb::ro>& a = b.array;
  const nb::dlpack::dtype dt = a.dtype();
  bool known = false;
  for (const auto& d : kDtypes) {
    if (d.code == dt.code && d.bits == dt.bits && dt.lanes == 1) {
      b.dtype = d.dtype;
      b.dtypeName = d.name;
      known = true;
    }
  }
  if (!known)
    raiseType(what + ": " + name + " has dtype " + dtypeName(dt) +
              ", which Strata does not support (supported: " + kSupported + ")");
  b.count = a.size();
  // Strides are in elements; dimensions of extent 1 may have any stride.
  if (b.count > 1) {
    int64_t expected = 1;
    for (size_t i = a.ndim(); i-- > 0;) {
      if (a.shape(i) != 1 && a.stride(i) != expected)
        raiseValue(what + ": " + name + " is not contiguous (shape " + shapeString(a, false) + ", strides " +
                   shapeString(a, true) + " in elements); pass a C-contiguous copy " +
                   "(numpy.ascontiguousarray(x) or tensor.contiguous())");
      expected *= static_cast<int64_t>(a.shape(i));
    }
  }
  switch (a.device_type()) {
    case kDLCPU:
    case kDLCUDAHost:  // pinned host memory
      break;
    case kDLCUDA:
    case kDLCUDAManaged:
      b.onDevice = true;
      b.deviceId = a.device_id();
      break;
    default:
      raiseValue(what + ": " + name + " is on DLPack device type " + std::to_string(a.device_type()) +
                 "; Strata takes host memory and (in CUDA builds) CUDA memory");
  }
  b.data = const_cast<void*>(a.data());
  return b;
}

void sameDtype(const Buffer& a, const Buffer& b, const std::string& what) {
  if (a.dtype != b.dtype)
    raiseType(what + ": tensor has dtype " + a.dtypeName + " but output has dtype " + b.dtypeName +
              "; they must match");
  if (a.onDevice != b.onDevice)
    raiseValue(what + ": tensor and output must both be in host memory or both on a CUDA device");
}

std::string str(size_t v) { return std::to_string(v); }

// cudaStreamLegacy: device memory must never go with a NULL stream, which the C API reads as host buffers.
constexpr uintptr_t kCudaStreamLegacy = 1;
uintptr_t streamFor(const Buffer& b, uintptr_t stream) {
  if (!b.onDevice) return 0;
  return stream ? stream : kCudaStreamLegacy;
}

// ---- groups and asynchronous work ----------------------------------------------------------------------

// Per-thread mirror of the C group depth plus the arrays of every call issued inside the open group: they
// must outlive the group's operations, which run only at group end (and later still when it is async).
using Array = nb::ndarray<nb::ro>;

struct PyGroup {
  int depth = 0;
  std::vector<Array> keep;
};
thread_local PyGroup tGroup;

// Asynchronous work whose Python handle was dropped before it completed: the arrays stay referenced here
// until the work is done, so a forgotten handle never frees memory that a collective still writes.
struct Orphan {
  strataWork_t work;
  std::vector<Array> keep;
};
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

// ---- communicator --------------------------------------------------------------------------------------

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

// ---- groups --------------------------------------------------------------------------------------------

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

nb::bytes getUniqueId() {
  strataUniqueId id;
  strataResult_t r = strataGetUniqueId(&id);
  if (r != strataSuccess) raiseResult(r, "strata.get_unique_id", strataGetLastError(nullptr));
  return nb::bytes(id.internal, STRATA_UNIQUE_ID_BYTES);
}

PyObject* newError(nb::module_& m, const char* name, PyObject* bases, const char* doc) {
  std::string full = std::string("strata.") + name;
  PyObject* t = PyErr_NewExceptionWithDoc(full.c_str(), doc, bases, nullptr);
  if (!t) throw nb::python_error();
  m.attr(name) = nb::handle(t);
  return t;
}

}  // namespace

NB_MODULE(_strata, m) {
  m.doc() = "Strata's native layer; use the `strata` package.";
  // Communicators kept by the package until exit are destroyed by its atexit hook; nanobind's leak
  // report would only list Work handles a program chose not to wait on.
  nb::set_leak_warnings(false);

  gErrors.base = newError(m, "StrataError", PyExc_RuntimeError,
                          "A Strata call failed. .code is the strataResult_t, .code_name its name.");
  auto bases = [](PyObject* a, PyObject* b) {
    PyObject* t = PyTuple_Pack(2, a, b);
    if (!t) throw nb::python_error();
    return t;
  };
  gErrors.invalidArgument = newError(m, "InvalidArgumentError", bases(gErrors.base, PyExc_ValueError),
                                     "strataInvalidArgument: an argument was rejected.");
  gErrors.invalidUsage =
      newError(m, "InvalidUsageError", gErrors.base, "strataInvalidUsage: the call is not valid in this state.");
  gErrors.remote =
      newError(m, "RemoteError", gErrors.base, "strataRemoteError: a peer process died or the network failed.");
  gErrors.timeout = newError(m, "StrataTimeoutError", bases(gErrors.base, PyExc_TimeoutError),
                             "strataTimeout: a wait passed STRATA_TIMEOUT_MS.");
  gErrors.cuda = newError(m, "CudaError", gErrors.base,
                          "strataUnhandledCudaError: device memory this build cannot serve, or a CUDA failure.");

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
