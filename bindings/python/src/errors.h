// The extension's exceptions: strata.StrataError and one subclass per result code a caller may want to catch on
// its own, raised with the code attached; and the TypeError/ValueError of a rejected argument.
#pragma once

#include <nanobind/nanobind.h>

#include <string>

#include "strata/strata.h"

namespace strata::python_ext {

namespace nb = nanobind;

/// Raises the StrataError subclass of `r` as "<what>: <strata's message> (<code name>)", with .code set.
[[noreturn]] void raiseResult(strataResult_t r, const std::string& what, const std::string& detail);

[[noreturn]] void raiseType(const std::string& msg);
[[noreturn]] void raiseValue(const std::string& msg);

/// Creates strata.StrataError and its subclasses in module `m`; before any raiseResult.
void addErrorTypes(nb::module_& m);

}  // namespace strata::python_ext
