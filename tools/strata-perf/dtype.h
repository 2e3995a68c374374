// Element types as strata-perf sees them: names, sizes, and conversion of exact values to and from the
// bytes of every type, including the 16- and 8-bit floats the host has no native type for.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include "strata/strata.h"

namespace strata::perf {

struct DtypeInfo {
  strataDataType_t type;
  const char* name;  // nccl-tests' name where it has one
  size_t size;       // bytes per element
  bool isFloat;
  bool isSigned;
  int mantissaBits;  // explicit mantissa bits of a float type; 0 for integers
};

/// Every type, in strataDataType_t order.
const std::vector<DtypeInfo>& allDtypes();
/// The type with this name or alias (e.g. "float", "fp32", "bf16", "fp8_e4m3"), or nullptr.
const DtypeInfo* findDtype(std::string_view name);

/// Writes v into element `index` of an array of type `t`: round-to-nearest-even for floats; integers take
/// v as an exact integer and wrap like a C cast.
void storeValue(const DtypeInfo& t, void* base, size_t index, double v);
/// Element `index` of an array of type `t`, as a double (exact for every type).
double loadValue(const DtypeInfo& t, const void* base, size_t index);
/// v rounded to the nearest value type `t` can hold (for floats; integers are returned as they are).
double roundToDtype(const DtypeInfo& t, double v);
/// One unit in the last place of type `t` at magnitude |v| (1 for integers).
double ulpOf(const DtypeInfo& t, double v);

}  // namespace strata::perf
