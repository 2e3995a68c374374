// The NCCL drop-in's environment (nccl_env.h).
#include "nccl/nccl_env.h"

#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <string>

#include "api/c_api_internal.h"
#include "bootstrap/bootstrap.h"
#include "bootstrap/unique_id.h"
#include "collectives/algorithms.h"
#include "util/config.h"
#include "util/error.h"
#include "util/log.h"

namespace strata::nccl {
namespace {

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string upper(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::vector<std::string> splitList(const std::string& s, const char* seps) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (std::strchr(seps, c)) {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else if (!std::isspace(static_cast<unsigned char>(c))) {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

// Warnings about NCCL variables are printed whatever STRATA_DEBUG says: the user set something that does not do
// what they meant.
void warn(const std::string& text) { logWrite(LogLevel::kWarn, kLogInit, __FILE__, __LINE__, "%s", text.c_str()); }

// NCCL_DEBUG: VERSION, WARN, INFO, TRACE (and ABORT, which NCCL uses to abort on errors).
std::string translateDebug(const std::string& v) {
  const std::string u = upper(v);
  if (u == "WARN" || u == "INFO" || u == "TRACE") return u;
  if (u == "VERSION" || u == "ABORT") return "WARN";
  warn("NCCL_DEBUG=" + v + " is not one of VERSION, WARN, INFO, TRACE: ignored");
  return "";
}

// NCCL_DEBUG_SUBSYS: a list of subsystems, or "^list" for all but those. Strata's subsystems carry NCCL's names
// (INIT, NET, COLL, TUNING, BOOTSTRAP, SHM); NCCL's others (P2P, GRAPH, ENV, ALLOC, CALL, PROXY, NVLS, ...) have no
// Strata counterpart.
std::string translateSubsys(const std::string& v) {
  static const std::set<std::string> kStrata = {"INIT", "NET", "COLL", "TUNING", "BOOTSTRAP", "SHM"};
  std::string list = upper(v);
  const bool except = !list.empty() && list[0] == '^';
  if (except) list = list.substr(1);
  std::set<std::string> named;
  for (const auto& item : splitList(list, ",")) {
    if (item == "ALL") {
      named = kStrata;
      continue;
    }
    if (item == "P2P") named.insert("COLL");
    if (item == "GRAPH") named.insert("TUNING");
    if (kStrata.count(item)) named.insert(item);
  }
  std::string out;
  for (const auto& s : kStrata) {
    if (named.count(s) == static_cast<size_t>(except)) continue;
    out += (out.empty() ? "" : ",") + s;
  }
  return out.empty() ? "INIT" : out;
}

// NCCL_SOCKET_IFNAME: an interface name ("=eth0" exact, "eth" prefix, "^docker" exclusion). Strata binds one
// named interface: exact names and prefixes that name one interface work; exclusions do not.
std::string translateIfname(const std::string& v) {
  std::string s = v;
  if (!s.empty() && s[0] == '^') {
    warn("NCCL_SOCKET_IFNAME=" + v +
         ": Strata cannot exclude interfaces; set STRATA_SOCKET_IFNAME to the interface to use. Ignored");
    return "";
  }
  if (!s.empty() && s[0] == '=') s = s.substr(1);
  const auto items = splitList(s, ",");
  if (items.size() > 1) warn("NCCL_SOCKET_IFNAME=" + v + ": Strata uses one interface, the first: " + items[0]);
  return items.empty() ? "" : items[0];
}

// The NCCL algorithms some Strata algorithm stands for, as a list for messages: "Ring and Tree".
std::string ncclTwins() {
  std::vector<std::string> names;
  for (const AlgorithmRecord* r : allAlgorithms())
    if (r->ncclName && std::find(names.begin(), names.end(), r->ncclName) == names.end())
      names.emplace_back(r->ncclName);
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) out += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
  return out;
}

// NCCL_ALGO: "Ring", "Tree" (allowed algorithms), "allreduce:tree;allgather:ring" (per collective), "^NVLS" (all
// but). Strata's STRATA_ALGO forces one algorithm per collective: an NCCL name maps to the algorithms whose record
// gives it as their ncclName (algorithm_record.h).
std::string translateAlgo(const std::string& v) {
  std::string out;
  auto add = [&](const AlgorithmRecord& r) {
    out += (out.empty() ? "" : ",") + std::string(collName(r.kind)) + ":" + r.name;
  };
  auto twin = [](const AlgorithmRecord& r, const std::string& nccl) { return r.ncclName && lower(r.ncclName) == nccl; };
  auto forAll = [&](const std::string& algo) {
    const std::string a = lower(algo);
    bool any = false;
    for (const AlgorithmRecord* r : allAlgorithms())
      if (twin(*r, a)) {
        add(*r);
        any = true;
      }
    return any;
  };
  if (!v.empty() && v[0] == '^') {
    warn("NCCL_ALGO=" + v +
         ": exclusions have no Strata meaning (its selector chooses among its own algorithms). "
         "Ignored");
    return "";
  }
  if (v.find(':') == std::string::npos) {
    const auto items = splitList(v, ",");
    if (items.size() == 1 && forAll(items[0])) return out;
    warn("NCCL_ALGO=" + v + ": only " + ncclTwins() + " have Strata twins, and only alone. Ignored");
    return "";
  }
  for (const auto& item : splitList(v, ";")) {
    const size_t colon = item.find(':');
    if (colon == std::string::npos) continue;
    const std::string coll = lower(item.substr(0, colon));
    const auto algos = splitList(item.substr(colon + 1), ",");
    const std::string algo = algos.empty() ? "" : lower(algos[0]);
    const AlgorithmRecord* found = nullptr;
    for (const AlgorithmRecord* r : allAlgorithms())
      if (coll == collName(r->kind) && twin(*r, algo)) found = r;
    if (found) {
      add(*found);
    } else {
      warn("NCCL_ALGO: '" + item + "' has no Strata twin; that part is ignored");
    }
  }
  return out;
}

// NCCL_TOPO_FILE: NCCL's is XML; Strata reads its own JSON (strata-topo writes one). A JSON file is used.
std::string translateTopoFile(const std::string& v) {
  std::ifstream f(v);
  char c = 0;
  while (f.get(c) && std::isspace(static_cast<unsigned char>(c))) {
  }
  if (f && c == '{') return v;
  warn("NCCL_TOPO_FILE=" + v +
       " is not Strata's JSON topology (NCCL's files are XML): ignored; `strata-topo` writes Strata's format, which "
       "STRATA_TOPO_FILE reads");
  return "";
}

// NCCL_NET: Socket or IB; NCCL_IB_DISABLE=1 means sockets.
std::string translateNet(const std::string& v) {
  const std::string l = lower(v);
  if (l == "socket") return "tcp";
  if (l == "ib") return "ucx";
  warn("NCCL_NET=" + v + ": Strata's networks are tcp and ucx (NCCL's Socket and IB). Ignored");
  return "";
}

std::string translateIbDisable(const std::string& v) { return v == "1" ? "tcp" : ""; }

struct Twin {
  const char* nccl;
  const char* strata;
  std::string (*translate)(const std::string&);
};
const Twin kTwins[] = {
    {"NCCL_DEBUG", "STRATA_DEBUG", translateDebug},
    {"NCCL_DEBUG_SUBSYS", "STRATA_DEBUG_SUBSYS", translateSubsys},
    {"NCCL_SOCKET_IFNAME", "STRATA_SOCKET_IFNAME", translateIfname},
    {"NCCL_ALGO", "STRATA_ALGO", translateAlgo},
    {"NCCL_TOPO_FILE", "STRATA_TOPO_FILE", translateTopoFile},
    {"NCCL_NET", "STRATA_NET", translateNet},
    {"NCCL_IB_DISABLE", "STRATA_NET", translateIbDisable},
};

std::once_flag gEnvOnce;

// The parts of NCCL_COMM_ID=host:port ("[v6]:port" for IPv6).
bool parseCommId(const std::string& v, std::string* host, uint16_t* port) {
  const size_t colon = v.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  std::string h = v.substr(0, colon);
  if (h.size() > 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  char* end = nullptr;
  const long p = std::strtol(v.c_str() + colon + 1, &end, 10);
  if (!end || *end || p < 1 || p > 65535) return false;
  *host = h;
  *port = static_cast<uint16_t>(p);
  return true;
}

std::mutex gRootsMutex;
std::set<std::string>& startedRoots() {
  static auto* s = new std::set<std::string>();
  return *s;
}

}  // namespace

void ensureEnvironment() {
  std::call_once(gEnvOnce, [] {
    for (const Twin& t : kTwins) {
      const char* v = std::getenv(t.nccl);
      if (!v || !*v || std::getenv(t.strata)) continue;  // a STRATA_* variable set by the user wins
      const std::string translated = t.translate(v);
      if (!translated.empty()) setenv(t.strata, translated.c_str(), 0);
    }
    // Written whatever NCCL_DEBUG asks below INFO when it asks for VERSION, as NCCL does.
    const char* debug = std::getenv("NCCL_DEBUG");
    const bool version = debug && upper(debug) == "VERSION";
    if (version || logEnabled(LogLevel::kInfo, kLogInit)) {
      logWrite(version ? LogLevel::kWarn : LogLevel::kInfo, kLogInit, __FILE__, __LINE__,
               "Strata %d.%d.%d implementing the NCCL %d.%d.%d API (libnccl.so.2 drop-in)", STRATA_MAJOR, STRATA_MINOR,
               STRATA_PATCH, NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
    }
  });
}

namespace {
// At load: the variables are in place before any thread of the application reads them through Strata.
__attribute__((constructor)) void applyAtLoad() { ensureEnvironment(); }
}  // namespace

bool commIdFromEnvironment(ncclUniqueId* id) {
  const char* v = std::getenv("NCCL_COMM_ID");
  if (!v || !*v) return false;
  std::string host;
  uint16_t port = 0;
  if (!parseCommId(v, &host, &port)) {
    warn(std::string("NCCL_COMM_ID=") + v + " is not host:port; ignored (a fresh unique id is made instead)");
    return false;
  }
  try {
    EnvLaunch e;
    e.rootAddr = host;
    e.rootPort = port;
    e.source = "NCCL_COMM_ID";
    e.secret = jobSecret(std::string("NCCL_COMM_ID|") + v);
    const strataUniqueId s = encodeUniqueId(uniqueIdForEnv(e));
    std::memcpy(id, &s, sizeof(s));
    return true;
  } catch (const Error& e) {
    warn(std::string("NCCL_COMM_ID=") + v + ": " + e.what() + "; ignored (a fresh unique id is made instead)");
    return false;
  }
}

bool prepareRoot(const ncclUniqueId& id, int rank) {
  if (rank != 0) return true;
  ncclUniqueId fromEnv;
  if (!commIdFromEnvironment(&fromEnv) || std::memcmp(&fromEnv, &id, sizeof(id)) != 0) return true;
  try {
    strataUniqueId s;
    std::memcpy(&s, &id, sizeof(s));
    const UniqueIdInfo info = decodeUniqueId(s);
    const std::string key = std::getenv("NCCL_COMM_ID");
    std::lock_guard<std::mutex> lk(gRootsMutex);
    if (startedRoots().count(key)) return true;
    startRootService(Config::fromEnv(), info.family == AF_INET6 ? "::" : "0.0.0.0", info.port, info.secret, 0);
    startedRoots().insert(key);
    return true;
  } catch (const Error& e) {
    recordApiError(nullptr, e.code(), std::string("NCCL_COMM_ID: rank 0 cannot start the root: ") + e.what());
    return false;
  }
}

void logComm(const CommState& st, const char* what) {
  if (!logEnabled(LogLevel::kInfo, kLogInit)) return;
  int rank = -1, size = 0;
  strataCommUserRank(st.comm, &rank);
  strataCommCount(st.comm, &size);
  STRATA_INFO(kLogInit, "%s: comm %p%s%s rank %d nranks %d cudaDev %d%s", what, static_cast<void*>(st.comm),
              st.name.empty() ? "" : " name ", st.name.c_str(), rank, size, st.cudaDev,
              st.blocking ? "" : " (non-blocking)");
}

}  // namespace strata::nccl

// NCCL re-reads its logging variables here (nccl.h declares it only with NCCL_OS_LINUX, and makes it a macro
// otherwise; libnccl.so.2 exports it either way). Strata reads them once per process (its log settings are fixed
// after the first message), so this only applies NCCL_* twins not applied yet; it is kept for the programs and
// profilers that call it.
#undef ncclResetDebugInit
#undef pncclResetDebugInit
STRATA_NCCL_API(void, ncclResetDebugInit, void) { strata::nccl::ensureEnvironment(); }
STRATA_NCCL_API(void, ncclResetDebugInitInternal, void) { strata::nccl::ensureEnvironment(); }
