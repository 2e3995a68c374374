// Facts about the element types of strataDataType_t: size, name, float or integer, valid or not. The one home
// for them; kernels/reduce.h includes this header, so the kernels' includers see them too.
#pragma once

#include <cstddef>

#include "strata/strata.h"

namespace strata {

/// Size in bytes of one element; 0 for an invalid dtype.
constexpr size_t dtypeSize(strataDataType_t dt) {
  // Inline: it is asked several times per call on the small-message path.
  constexpr unsigned char kSizes[strataNumTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  return static_cast<unsigned>(dt) < static_cast<unsigned>(strataNumTypes) ? kSizes[dt] : 0;
}
/// "float32", "bfloat16", ... ; "invalid" for an invalid dtype.
const char* dtypeName(strataDataType_t dt);
bool dtypeIsFloat(strataDataType_t dt);
bool dtypeValid(int dt);

}  // namespace strata
