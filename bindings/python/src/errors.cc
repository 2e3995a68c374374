// The extension's exceptions (errors.h): the StrataError classes, made when the module is, and raising them.
#include "errors.h"

#include <string>

namespace strata::python_ext {

namespace {

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

PyObject* newError(nb::module_& m, const char* name, PyObject* bases, const char* doc) {
  std::string full = std::string("strata.") + name;
  PyObject* t = PyErr_NewExceptionWithDoc(full.c_str(), doc, bases, nullptr);
  if (!t) throw nb::python_error();
  m.attr(name) = nb::handle(t);
  return t;
}

}  // namespace

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

void addErrorTypes(nb::module_& m) {
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
}

}  // namespace strata::python_ext
