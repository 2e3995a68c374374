// The table behind dtypeName and dtypeIsFloat, checked against dtypeSize at compile time.
#include "util/dtype.h"

namespace strata {
namespace {

struct DtypeInfo {
  const char* name;
  size_t size;
  bool isFloat;
};

// Indexed by strataDataType_t.
constexpr DtypeInfo kDtypes[strataNumTypes] = {
    {"int8", 1, false},   {"uint8", 1, false},   {"int32", 4, false},     {"uint32", 4, false},
    {"int64", 8, false},  {"uint64", 8, false},  {"float16", 2, true},    {"float32", 4, true},
    {"float64", 8, true}, {"bfloat16", 2, true}, {"float8e4m3", 1, true}, {"float8e5m2", 1, true},
};

}  // namespace

bool dtypeValid(int dt) { return dt >= 0 && dt < strataNumTypes; }
static_assert(
    [] {
      for (int t = 0; t < strataNumTypes; ++t)
        if (kDtypes[t].size != dtypeSize(static_cast<strataDataType_t>(t))) return false;
      return true;
    }(),
    "dtypeSize (util/dtype.h) and kDtypes disagree");
const char* dtypeName(strataDataType_t dt) { return dtypeValid(dt) ? kDtypes[dt].name : "invalid"; }
bool dtypeIsFloat(strataDataType_t dt) { return dtypeValid(dt) && kDtypes[dt].isFloat; }

}  // namespace strata
