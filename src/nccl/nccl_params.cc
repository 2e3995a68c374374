// The NCCL drop-in's parameter API (ncclParam*): the parameters are Strata's configuration variables (STRATA_*,
// with the values the library would use now) and the NCCL_* variables it honours (their values as set). Keys are
// the variables' names.
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "nccl/nccl_env.h"
#include "nccl/nccl_state.h"
#include "util/config.h"
#include "util/config_table.h"
#include "util/error.h"
#include "util/log.h"

struct ncclParamHandle {
  std::string key;
};

using namespace strata;
using namespace strata::nccl;

namespace {

// The NCCL variables with a Strata meaning (nccl_env.cc applies them).
const char* const kNcclKeys[] = {"NCCL_DEBUG",     "NCCL_DEBUG_SUBSYS", "NCCL_SOCKET_IFNAME", "NCCL_ALGO",
                                 "NCCL_TOPO_FILE", "NCCL_NET",          "NCCL_IB_DISABLE",    "NCCL_COMM_ID"};

std::vector<std::string> allKeys() {
  std::vector<std::string> keys;
  for (const ConfigVar& v : configVariables()) keys.emplace_back(v.name);
  for (const char* k : kNcclKeys) keys.emplace_back(k);
  return keys;
}

bool known(const std::string& key) {
  for (const auto& k : allKeys())
    if (k == key) return true;
  return false;
}

// The value of a parameter as text: a STRATA_* variable's effective value (what Config would use now, defaults
// included), an NCCL_* variable's as set ("" when unset).
ncclResult_t valueOf(const std::string& key, std::string* out) {
  if (key.rfind("NCCL_", 0) == 0) {
    const char* v = std::getenv(key.c_str());
    *out = v ? v : "";
    return ncclSuccess;
  }
  try {
    for (const auto& e : Config::fromEnv().describe()) {
      if (e.name != key) continue;
      *out = e.value;
      if (out->empty()) {
        const char* v = std::getenv(key.c_str());  // read by another module: as set
        *out = v ? v : "";
      }
      return ncclSuccess;
    }
  } catch (const Error& e) {
    return fail(nullptr, static_cast<ncclResult_t>(e.code()), e.what());
  }
  return fail(nullptr, ncclInvalidArgument, "ncclParam: unknown parameter '" + key + "'");
}

template <typename T>
ncclResult_t getInt(ncclParamHandle_t h, T* out, const char* what) {
  if (!h || !out) return fail(nullptr, ncclInvalidArgument, std::string(what) + ": handle or out is NULL");
  std::string text;
  if (ncclResult_t r = valueOf(h->key, &text); r != ncclSuccess) return r;
  errno = 0;
  char* end = nullptr;
  const bool isSigned = std::numeric_limits<T>::is_signed;
  const long long s = isSigned ? std::strtoll(text.c_str(), &end, 0) : 0;
  const unsigned long long u = isSigned ? 0 : std::strtoull(text.c_str(), &end, 0);
  const bool inRange = isSigned ? s >= static_cast<long long>(std::numeric_limits<T>::min()) &&
                                      s <= static_cast<long long>(std::numeric_limits<T>::max())
                                : u <= static_cast<unsigned long long>(std::numeric_limits<T>::max()) &&
                                      text.find('-') == std::string::npos;
  if (text.empty() || !end || *end || errno || !inRange)
    return fail(nullptr, ncclInvalidArgument,
                strprintf("%s: parameter %s is '%s', not an integer of this type", what, h->key.c_str(), text.c_str()));
  *out = isSigned ? static_cast<T>(s) : static_cast<T>(u);
  return ncclSuccess;
}

std::mutex gHandlesMutex;
std::map<std::string, ncclParamHandle*>& handles() {
  static auto* m = new std::map<std::string, ncclParamHandle*>();
  return *m;
}

}  // namespace

STRATA_NCCL_API(ncclResult_t, ncclParamBind, ncclParamHandle_t* out, const char* key) {
  if (!out || !key) return fail(nullptr, ncclInvalidArgument, "ncclParamBind: out or key is NULL");
  if (!known(key))
    return fail(nullptr, ncclInvalidArgument,
                std::string("ncclParamBind: unknown parameter '") + key +
                    "' (the parameters are Strata's STRATA_* variables and the NCCL_* variables it honours; "
                    "ncclParamGetAllParameterKeys lists them)");
  std::lock_guard<std::mutex> lk(gHandlesMutex);
  ncclParamHandle*& h = handles()[key];
  if (!h) h = new ncclParamHandle{key};  // owned by the parameter system, as NCCL's
  *out = h;
  return ncclSuccess;
}

STRATA_NCCL_API(ncclResult_t, ncclParamGetI8, ncclParamHandle_t h, int8_t* out) {
  return getInt(h, out, "ncclParamGetI8");
}
STRATA_NCCL_API(ncclResult_t, ncclParamGetI16, ncclParamHandle_t h, int16_t* out) {
  return getInt(h, out, "ncclParamGetI16");
}
STRATA_NCCL_API(ncclResult_t, ncclParamGetI32, ncclParamHandle_t h, int32_t* out) {
  return getInt(h, out, "ncclParamGetI32");
}
STRATA_NCCL_API(ncclResult_t, ncclParamGetI64, ncclParamHandle_t h, int64_t* out) {
  return getInt(h, out, "ncclParamGetI64");
}
STRATA_NCCL_API(ncclResult_t, ncclParamGetU8, ncclParamHandle_t h, uint8_t* out) {
  return getInt(h, out, "ncclParamGetU8");
}
STRATA_NCCL_API(ncclResult_t, ncclParamGetU16, ncclParamHandle_t h, uint16_t* out) {
  return getInt(h, out, "ncclParamGetU16");
}
STRATA_NCCL_API(ncclResult_t, ncclParamGetU32, ncclParamHandle_t h, uint32_t* out) {
  return getInt(h, out, "ncclParamGetU32");
}
STRATA_NCCL_API(ncclResult_t, ncclParamGetU64, ncclParamHandle_t h, uint64_t* out) {
  return getInt(h, out, "ncclParamGetU64");
}

STRATA_NCCL_API(ncclResult_t, ncclParamGetStr, ncclParamHandle_t h, const char** out) {
  if (!h || !out) return fail(nullptr, ncclInvalidArgument, "ncclParamGetStr: handle or out is NULL");
  thread_local std::string text;  // valid until the next call on this thread, as NCCL's
  if (ncclResult_t r = valueOf(h->key, &text); r != ncclSuccess) return r;
  *out = text.c_str();
  return ncclSuccess;
}

STRATA_NCCL_API(ncclResult_t, ncclParamGet, ncclParamHandle_t h, void* out, int maxLen, int* len) {
  if (!h || !out || !len || maxLen < 0)
    return fail(nullptr, ncclInvalidArgument, "ncclParamGet: handle, out or len is NULL, or maxLen is negative");
  std::string text;
  if (ncclResult_t r = valueOf(h->key, &text); r != ncclSuccess) return r;
  if (text.size() > static_cast<size_t>(maxLen))
    return fail(
        nullptr, ncclInvalidArgument,
        strprintf("ncclParamGet: parameter %s needs %zu bytes, maxLen is %d", h->key.c_str(), text.size(), maxLen));
  std::memcpy(out, text.data(), text.size());
  *len = static_cast<int>(text.size());
  return ncclSuccess;
}

STRATA_NCCL_API(ncclResult_t, ncclParamGetParameter, const char* key, const char** value, int* valueLen) {
  if (!key || !value || !valueLen)
    return fail(nullptr, ncclInvalidArgument, "ncclParamGetParameter: key, value or valueLen is NULL");
  if (!known(key))
    return fail(nullptr, ncclInvalidArgument, std::string("ncclParamGetParameter: unknown parameter '") + key + "'");
  thread_local std::string text;
  if (ncclResult_t r = valueOf(key, &text); r != ncclSuccess) return r;
  *value = text.c_str();
  *valueLen = static_cast<int>(text.size());
  return ncclSuccess;
}

STRATA_NCCL_API(ncclResult_t, ncclParamGetAllParameterKeys, const char*** table, int* tableLen) {
  if (!table || !tableLen)
    return fail(nullptr, ncclInvalidArgument, "ncclParamGetAllParameterKeys: table or tableLen is NULL");
  thread_local std::vector<std::string> keys;
  thread_local std::vector<const char*> pointers;
  keys = allKeys();
  pointers.clear();
  for (const auto& k : keys) pointers.push_back(k.c_str());
  *table = pointers.data();
  *tableLen = static_cast<int>(pointers.size());
  return ncclSuccess;
}

STRATA_NCCL_API(void, ncclParamDumpAll, void) {
  for (const auto& key : allKeys()) {
    std::string text;
    if (valueOf(key, &text) != ncclSuccess) text = "(invalid)";
    STRATA_INFO(kLogInit, "param %s = %s", key.c_str(), text.c_str());
  }
}
