// strata_soak's dtypes: all twelve of Strata's, each with its size, kind and the ranks whose inputs a sum may take;
// and an element of any of them loaded and stored as a double.
#pragma once

#include <cstddef>

#include "strata/strata.h"

namespace soak {

struct DtypeInfo {
  strataDataType_t type;
  const char* name;
  size_t size;
  bool isFloat;
  bool isUnsigned;
  // Sums take inputs from this many ranks at most (the others give 0), so that every partial sum, also doubled by
  // the PreMulSum scalar 2, stays exact: fp8 e5m2 holds the integers up to 8 and the even ones up to 16.
  int sumRanks;
};
inline constexpr DtypeInfo kDtypes[] = {
    {strataInt8, "int8", 1, false, false, 16},           {strataUint8, "uint8", 1, false, true, 16},
    {strataInt32, "int32", 4, false, false, 1 << 20},    {strataUint32, "uint32", 4, false, true, 1 << 20},
    {strataInt64, "int64", 8, false, false, 1 << 20},    {strataUint64, "uint64", 8, false, true, 1 << 20},
    {strataFloat16, "float16", 2, true, false, 256},     {strataFloat32, "float32", 4, true, false, 1 << 20},
    {strataFloat64, "float64", 8, true, false, 1 << 20}, {strataBfloat16, "bfloat16", 2, true, false, 64},
    {strataFloat8e4m3, "float8e4m3", 1, true, false, 8}, {strataFloat8e5m2, "float8e5m2", 1, true, false, 8},
};
constexpr int kNumDtypes = sizeof(kDtypes) / sizeof(kDtypes[0]);
constexpr size_t kMaxDtypeSize = 8;
inline const DtypeInfo& info(strataDataType_t t) { return kDtypes[static_cast<int>(t)]; }

/// Element i of `base`, of dtype t.
double load(const unsigned char* base, size_t i, strataDataType_t t);

/// Stores v (exact in dtype t: small integers) as element i of `base`.
void store(unsigned char* base, size_t i, strataDataType_t t, double v);

}  // namespace soak
