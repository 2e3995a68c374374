// One array argument of a call, validated: a numpy array or a DLPack tensor as (pointer, count, dtype), checked
// for dtype, C-contiguity, writability and device kind, with messages that name the argument and what is wrong.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "strata/strata.h"

namespace strata::python_ext {

namespace nb = nanobind;

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
Buffer view(nb::handle obj, const std::string& what, const char* name, bool writable);

/// Raises unless `a` (the tensor) and `b` (the output) have one dtype and one device kind.
void sameDtype(const Buffer& a, const Buffer& b, const std::string& what);

inline std::string str(size_t v) { return std::to_string(v); }

/// The stream a call on `b` takes: 0 for host memory; for device memory `stream`, or cudaStreamLegacy for 0.
uintptr_t streamFor(const Buffer& b, uintptr_t stream);

}  // namespace strata::python_ext
