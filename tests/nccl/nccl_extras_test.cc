// The NCCL drop-in's less common features, through nccl.h alone: each mode checks one claim of README.md ("Using
// Strata in place of NCCL") so that the test fails if the claim is false. Buffers are host memory with stream 0,
// which the drop-in runs on the host; every all-reduce is checked element by element against the sum of every
// rank's inputs (small integers: exact in int64 and float32).
//
//   grow               3 ranks: ranks 0-1 make a 2-rank communicator, grow it with ncclCommGetUniqueId/ncclCommGrow
//                      to the new rank 2 (the id travels through a file); a second id before the first is used is
//                      refused
//   scalable           2+ ranks: ncclCommInitRankScalable with 2 ids (made by ranks 0 and n/2); nId = 0 refused
//   params             1 process, run with STRATA_TIMEOUT_MS=45000 NCCL_DEBUG=WARN: the ncclParam* API
//   env                1 process: runs itself again under several environments (NCCL_ALGO, STRATA_ALGO,
//                      NCCL_DEBUG=VERSION, NCCL_TOPO_FILE, NCCL_DEBUG_SUBSYS), which the drop-in maps to STRATA_*
//                      when it is loaded, and checks each child's exit status and stderr
//   commid             2+ ranks, NCCL_COMM_ID=host:port set for every rank: each rank's ncclGetUniqueId, no exchange
//   groupinit          1 process, 1 thread: 3 communicators of one clique created in one group, then a grouped
//                      all-reduce on all three; ncclCommInitAll refused without CUDA
//   revoke             2 ranks, run with STRATA_TIMEOUT_MS=60000: rank 0 revokes; rank 1's all-reduce fails
//                      naming rank 0 long before the timeout; both shrink and go on
//   suspend            1+ ranks: ncclCommSuspend / ncclCommResume / ncclCommMemStats
//   nonblocking_group  2+ ranks: a group of an all-reduce and a send/recv ring on a non-blocking communicator
//   simulate           1 process: ncclGroupSimulateEnd under STRATA_TUNE=model and STRATA_TUNE=sim
//
// Ranks come from RANK / WORLD_SIZE (strata-run, torchrun); rank 0 hands ids to the others through files in the
// temp directory named from MASTER_PORT and a hash of STRATA_SECRET, as nccl_api_test does.
//
// usage: nccl_extras_test MODE
// Prints one line per group of checks and "nccl_extras_test MODE: N checks passed on rank r of n"; exits 1 on any
// failure, naming the check.
#include <dlfcn.h>
#include <fcntl.h>
#include <nccl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <source_location>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "nccl_test_support.h"

extern char** environ;

namespace {

using namespace nccl_test;

std::string gMode = "?";

// The end of a group of checks: one line per rank (the ranks of these modes differ in what they check).
void groupDone(const char* name) {
  std::printf("  rank %d: %-58s %4ld checks\n", gRank, name, gGroupChecks);
  std::fflush(stdout);
  gGroupChecks = 0;
}

// `r` is NCCL's code `want`, and the last error (of `comm`, and of the thread) says something with `mention` in it.
void expectError(ncclResult_t r, ncclResult_t want, ncclComm_t comm, const std::string& mention,
                 const std::string& what) {
  const std::string e = lastError(comm);
  check(r == want, what + ": returned " + codeName(r) + ", expected " + codeName(want) + "; last error: " + e);
  check(e.find(mention) != std::string::npos,
        what + ": ncclGetLastError says \"" + e + "\", which does not mention \"" + mention + "\"");
}

// ---- ids through files -----------------------------------------------------------------------------------------

std::string idFile(const std::string& what) { return launchFile("nccl_extras_test", what); }

// The id of a first communicator of ranks 0..n-1: rank 0 makes it, the others read its file. Rank 0 removes the
// file once the communicator exists (every rank has read it by then): call removeIdFile.
ncclUniqueId shareId(const std::string& what, int rank) {
  ncclUniqueId id{};
  if (rank == 0) {
    ok(ncclGetUniqueId(&id), "ncclGetUniqueId");
    writeId(idFile(what), id);
    return id;
  }
  return readId(idFile(what));
}

void removeIdFile(const std::string& what) { std::filesystem::remove(idFile(what)); }

ncclComm_t initWorld(const std::string& what, int n, int rank) {
  const ncclUniqueId id = shareId(what, rank);
  ncclComm_t comm = nullptr;
  ok(ncclCommInitRank(&comm, n, id, rank), "ncclCommInitRank");
  if (rank == 0) removeIdFile(what);
  return comm;
}

// ---- exact all-reduces -----------------------------------------------------------------------------------------

// Rank `rank`'s input `i` of the call salted `salt`: an integer in [-1000, 1000], so that sums over a few ranks are
// exact in int64 and in float32.
int64_t inputOf(uint64_t salt, int rank, size_t i) {
  uint64_t h = salt * 0x9E3779B97F4A7C15ull ^ (static_cast<uint64_t>(rank) << 40) ^ i;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return static_cast<int64_t>(h % 2001) - 1000;
}

// The same number on every rank for the same text.
uint64_t saltOf(const std::string& what) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : what) h = (h ^ c) * 1099511628211ull;
  return h;
}

constexpr size_t kCounts[] = {1, 1000, 70001};

struct Buffers {
  std::vector<int64_t> sendI, recvI;
  std::vector<float> sendF, recvF;
};

// Inputs of `rank` for call `salt`, outputs poisoned.
Buffers makeBuffers(uint64_t salt, int rank, size_t count) {
  Buffers b;
  b.sendI.resize(count);
  b.sendF.resize(count);
  for (size_t i = 0; i < count; ++i) {
    b.sendI[i] = inputOf(salt, rank, i);
    b.sendF[i] = static_cast<float>(inputOf(salt + 1, rank, i));
  }
  b.recvI.assign(count, INT64_MIN);
  b.recvF.assign(count, -1e30f);
  return b;
}

// Both outputs hold the sums over ranks 0..n-1, element by element.
void expectSums(const Buffers& b, uint64_t salt, int n, const std::string& what) {
  size_t wrongI = 0, wrongF = 0, firstI = 0, firstF = 0;
  for (size_t i = 0; i < b.recvI.size(); ++i) {
    int64_t wantI = 0;
    float wantF = 0;
    for (int r = 0; r < n; ++r) {
      wantI += inputOf(salt, r, i);
      wantF += static_cast<float>(inputOf(salt + 1, r, i));
    }
    if (b.recvI[i] != wantI && wrongI++ == 0) firstI = i;
    if (b.recvF[i] != wantF && wrongF++ == 0) firstF = i;
  }
  const std::string count = " count " + std::to_string(b.recvI.size());
  check(wrongI == 0, what + ": int64 sum" + count + ": " + std::to_string(wrongI) + " wrong, the first at " +
                         std::to_string(firstI));
  check(wrongF == 0, what + ": float32 sum" + count + ": " + std::to_string(wrongF) + " wrong, the first at " +
                         std::to_string(firstF));
}

// Sum all-reduces of int64 and float32 on `comm` (every rank calls it with the same `what`), in place and out of
// place, checked exactly. A non-blocking communicator's calls are polled to completion.
void expectAllReduce(ncclComm_t comm, const std::string& what, bool blocking = true) {
  int n = 0, rank = -1;
  ok(ncclCommCount(comm, &n), "ncclCommCount");
  ok(ncclCommUserRank(comm, &rank), "ncclCommUserRank");
  auto done = [&](ncclResult_t r, const char* call) {
    if (blocking) ok(r, call);
    else okAsync(r, comm, call);
  };
  for (size_t count : kCounts) {
    const uint64_t salt = saltOf(what) + count;
    Buffers b = makeBuffers(salt, rank, count);
    done(ncclAllReduce(b.sendI.data(), b.recvI.data(), count, ncclInt64, ncclSum, comm, nullptr), "ncclAllReduce");
    done(ncclAllReduce(b.sendF.data(), b.recvF.data(), count, ncclFloat32, ncclSum, comm, nullptr), "ncclAllReduce");
    expectSums(b, salt, n, what);
    // In place: the output is the input.
    b.recvI = b.sendI;
    b.recvF = b.sendF;
    done(ncclAllReduce(b.recvI.data(), b.recvI.data(), count, ncclInt64, ncclSum, comm, nullptr), "ncclAllReduce");
    done(ncclAllReduce(b.recvF.data(), b.recvF.data(), count, ncclFloat32, ncclSum, comm, nullptr), "ncclAllReduce");
    expectSums(b, salt, n, what + " (in place)");
  }
}

// The communicator's size and this rank's number in it.
void expectShape(ncclComm_t comm, int n, int rank, const std::string& what) {
  int count = 0, me = -1;
  ok(ncclCommCount(comm, &count), "ncclCommCount");
  ok(ncclCommUserRank(comm, &me), "ncclCommUserRank");
  check(count == n && me == rank, what + ": rank " + std::to_string(me) + " of " + std::to_string(count) +
                                      ", expected rank " + std::to_string(rank) + " of " + std::to_string(n));
}

void needRanks(bool okay, const char* want) {
  if (!okay) die(std::string("mode ") + gMode + " runs on " + want + " (WORLD_SIZE " + std::to_string(gNranks) + ")");
}

// ---- grow ------------------------------------------------------------------------------------------------------

// Ranks 0 and 1 have a 2-rank communicator; rank 2 joins it by ncclCommGrow (NCCL 2.28's pattern: the existing
// root makes the id with ncclCommGetUniqueId and hands it to the new ranks out of band; the other existing ranks
// pass NULL).
void testGrow() {
  needRanks(gNranks == 3, "3 ranks (2 existing, 1 new)");
  const int kOld = 2, kNew = 3;
  ncclComm_t comm = nullptr;
  if (gRank < kOld) {
    comm = initWorld("grow-first", kOld, gRank);
    expectShape(comm, kOld, gRank, "the communicator before the grow");
    expectAllReduce(comm, "the 2-rank communicator before the grow");
    groupDone("the 2-rank communicator before the grow");
  }
  ncclUniqueId growId{};
  if (gRank == 0) {
    ok(ncclCommGetUniqueId(comm, &growId), "ncclCommGetUniqueId");
    ncclUniqueId second{};
    expectError(ncclCommGetUniqueId(comm, &second), ncclInvalidUsage, comm, "ncclCommGetUniqueId",
                "a second ncclCommGetUniqueId before the first id was used by ncclCommGrow");
    writeId(idFile("grow-new"), growId);
  }
  if (gRank == 0) groupDone("ncclCommGetUniqueId (a second one refused)");
  if (gRank == kOld) growId = readId(idFile("grow-new"));

  ncclComm_t grown = nullptr;
  if (gRank < kOld) {
    ok(ncclCommGrow(comm, kNew, gRank == 0 ? &growId : nullptr, -1, &grown, nullptr), "ncclCommGrow (existing rank)");
  } else {
    ok(ncclCommGrow(nullptr, kNew, &growId, gRank, &grown, nullptr), "ncclCommGrow (new rank)");
  }
  if (!grown) die("ncclCommGrow gave no communicator");
  if (gRank == 0) std::filesystem::remove(idFile("grow-new"));
  expectShape(grown, kNew, gRank, "the grown communicator (ranks keep their numbers, the new one is 2)");
  expectAllReduce(grown, "the grown 3-rank communicator");
  groupDone("ncclCommGrow 2 -> 3 ranks, all-reduce");

  if (gRank < kOld) {
    // The old communicator is still its 2 ranks', and once its id is used the root may make another.
    expectAllReduce(comm, "the 2-rank communicator after the grow");
    if (gRank == 0) {
      ncclUniqueId again{};
      const ncclResult_t r = ncclCommGetUniqueId(comm, &again);
      check(r == ncclSuccess,
            "ncclCommGetUniqueId after the grow used the first id: " + codeName(r) + ": " + lastError(comm));
    }
    groupDone("the old communicator after the grow");
    ok(ncclCommDestroy(comm), "ncclCommDestroy");
  }
  ok(ncclCommDestroy(grown), "ncclCommDestroy");
}

// ---- scalable --------------------------------------------------------------------------------------------------

// NCCL's pattern: with nId ids, id k is made by rank k * n / nId; every rank gets all of them, in the same order.
void testScalable() {
  needRanks(gNranks >= 2, "2 or more ranks");
  const int kIds = 2;
  ncclUniqueId ids[kIds];
  for (int k = 0; k < kIds; ++k) {
    const int maker = k * gNranks / kIds;
    const std::string name = "scalable-" + std::to_string(k);
    if (gRank == maker) {
      ok(ncclGetUniqueId(&ids[k]), "ncclGetUniqueId");
      writeId(idFile(name), ids[k]);
    }
  }
  for (int k = 0; k < kIds; ++k)
    if (gRank != k * gNranks / kIds) ids[k] = readId(idFile("scalable-" + std::to_string(k)));

  ncclComm_t none = nullptr;
  expectError(ncclCommInitRankScalable(&none, gNranks, gRank, 0, ids, nullptr), ncclInvalidArgument, nullptr, "nId",
              "ncclCommInitRankScalable with nId 0");
  check(none == nullptr, "ncclCommInitRankScalable with nId 0 gives no communicator");
  groupDone("ncclCommInitRankScalable nId 0 refused");

  ncclComm_t comm = nullptr;
  ok(ncclCommInitRankScalable(&comm, gNranks, gRank, kIds, ids, nullptr), "ncclCommInitRankScalable");
  for (int k = 0; k < kIds; ++k)
    if (gRank == k * gNranks / kIds) std::filesystem::remove(idFile("scalable-" + std::to_string(k)));
  expectShape(comm, gNranks, gRank, "ncclCommInitRankScalable");
  expectAllReduce(comm, "the communicator of ncclCommInitRankScalable (2 ids)");
  groupDone("ncclCommInitRankScalable nId 2, all-reduce");
  ok(ncclCommDestroy(comm), "ncclCommDestroy");
}

// ---- params ----------------------------------------------------------------------------------------------------

// The ctest sets STRATA_TIMEOUT_MS=45000 and NCCL_DEBUG=WARN.
void testParams() {
  needRanks(gNranks == 1, "1 process");
  const std::string timeout = envOr("STRATA_TIMEOUT_MS", ""), debug = envOr("NCCL_DEBUG", "");
  if (timeout != "45000" || debug != "WARN") die("mode params runs with STRATA_TIMEOUT_MS=45000 NCCL_DEBUG=WARN");

  ncclParamHandle_t h = nullptr;
  ok(ncclParamBind(&h, "STRATA_TIMEOUT_MS"), "ncclParamBind");
  check(h != nullptr, "ncclParamBind gives a handle");
  ncclParamHandle_t again = nullptr;
  ok(ncclParamBind(&again, "STRATA_TIMEOUT_MS"), "ncclParamBind");
  check(again == h, "ncclParamBind twice gives the same handle");
  int64_t i64 = 0;
  ok(ncclParamGetI64(h, &i64), "ncclParamGetI64");
  check(i64 == 45000, "ncclParamGetI64(STRATA_TIMEOUT_MS) is " + std::to_string(i64) + ", the environment says 45000");
  int32_t i32 = 0;
  ok(ncclParamGetI32(h, &i32), "ncclParamGetI32");
  check(i32 == 45000, "ncclParamGetI32(STRATA_TIMEOUT_MS) is " + std::to_string(i32));
  uint16_t u16 = 0;
  ok(ncclParamGetU16(h, &u16), "ncclParamGetU16");
  check(u16 == 45000, "ncclParamGetU16(STRATA_TIMEOUT_MS) is " + std::to_string(u16));
  int8_t i8 = 7;
  expectError(ncclParamGetI8(h, &i8), ncclInvalidArgument, nullptr, "STRATA_TIMEOUT_MS",
              "ncclParamGetI8 of 45000 (out of int8 range)");
  check(i8 == 7, "a refused ncclParamGetI8 leaves its output alone");
  int16_t i16 = 7;
  expectError(ncclParamGetI16(h, &i16), ncclInvalidArgument, nullptr, "STRATA_TIMEOUT_MS",
              "ncclParamGetI16 of 45000 (out of int16 range)");
  groupDone("ncclParamBind, ncclParamGet{I64,I32,U16,I8,I16}");

  const char* text = nullptr;
  ok(ncclParamGetStr(h, &text), "ncclParamGetStr");
  check(text && std::string(text) == "45000", std::string("ncclParamGetStr is \"") + (text ? text : "(null)") + "\"");
  // Strata's parameters are text: ncclParamGet copies its bytes (no terminator), and needs room for all of them.
  char bytes[16];
  std::memset(bytes, '#', sizeof bytes);
  int len = -1;
  ok(ncclParamGet(h, bytes, static_cast<int>(sizeof bytes), &len), "ncclParamGet");
  check(len == 5 && std::memcmp(bytes, "45000", 5) == 0 && bytes[5] == '#',
        "ncclParamGet copies the 5 bytes \"45000\" (len " + std::to_string(len) + ")");
  len = -1;
  std::memset(bytes, '#', sizeof bytes);
  ok(ncclParamGet(h, bytes, 5, &len), "ncclParamGet with maxLen 5");
  check(len == 5 && std::memcmp(bytes, "45000", 5) == 0, "ncclParamGet with maxLen exactly the value's length");
  std::memset(bytes, '#', sizeof bytes);
  expectError(ncclParamGet(h, bytes, 4, &len), ncclInvalidArgument, nullptr, "maxLen",
              "ncclParamGet with maxLen 4 < 5 bytes");
  check(bytes[0] == '#', "a refused ncclParamGet writes nothing");
  groupDone("ncclParamGetStr, ncclParamGet");

  const char* value = nullptr;
  int valueLen = -1;
  ok(ncclParamGetParameter("NCCL_DEBUG", &value, &valueLen), "ncclParamGetParameter");
  check(value && std::string(value) == "WARN" && valueLen == 4,
        std::string("ncclParamGetParameter(NCCL_DEBUG) is \"") + (value ? value : "(null)") + "\" (" +
            std::to_string(valueLen) + "), the environment says WARN");
  ok(ncclParamGetParameter("STRATA_TIMEOUT_MS", &value, &valueLen), "ncclParamGetParameter");
  check(value && std::string(value) == "45000" && valueLen == 5, "ncclParamGetParameter(STRATA_TIMEOUT_MS)");

  const char** keys = nullptr;
  int nkeys = 0;
  ok(ncclParamGetAllParameterKeys(&keys, &nkeys), "ncclParamGetAllParameterKeys");
  std::set<std::string> all;
  for (int i = 0; keys && i < nkeys; ++i) all.insert(keys[i] ? keys[i] : "(null)");
  check(nkeys > 2 && static_cast<int>(all.size()) == nkeys,
        "ncclParamGetAllParameterKeys gives " + std::to_string(nkeys) + " keys, each once");
  for (const char* key : {"STRATA_TIMEOUT_MS", "STRATA_ALGO", "NCCL_ALGO", "NCCL_DEBUG", "NCCL_COMM_ID"})
    check(all.count(key) == 1, std::string("ncclParamGetAllParameterKeys lists ") + key);
  // Every key listed can be bound and read as text.
  for (const std::string& key : all) {
    ncclParamHandle_t k = nullptr;
    const char* s = nullptr;
    const ncclResult_t b = ncclParamBind(&k, key.c_str());
    const ncclResult_t g = b == ncclSuccess ? ncclParamGetStr(k, &s) : b;
    check(g == ncclSuccess && s, "key " + key + " binds and reads: " + codeName(g) + ": " + lastError(nullptr));
  }
  groupDone("ncclParamGetParameter, ncclParamGetAllParameterKeys");

  ncclParamHandle_t unknown = nullptr;
  expectError(ncclParamBind(&unknown, "NCCL_NO_SUCH_PARAMETER"), ncclInvalidArgument, nullptr, "NCCL_NO_SUCH_PARAMETER",
              "ncclParamBind of an unknown key");
  check(unknown == nullptr, "ncclParamBind of an unknown key gives no handle");
  expectError(ncclParamGetParameter("STRATA_NO_SUCH_PARAMETER", &value, &valueLen), ncclInvalidArgument, nullptr,
              "STRATA_NO_SUCH_PARAMETER", "ncclParamGetParameter of an unknown key");
  expectError(ncclParamGetI64(nullptr, &i64), ncclInvalidArgument, nullptr, "NULL", "ncclParamGetI64(NULL handle)");
  ncclParamDumpAll();
  check(true, "ncclParamDumpAll returns");
  groupDone("unknown keys refused, ncclParamDumpAll");
}

// ---- env -------------------------------------------------------------------------------------------------------

// One environment the drop-in is loaded under: the variables set (every other NCCL_* and STRATA_* is removed), and
// what the child's stderr must and must not say.
struct EnvCase {
  const char* name;
  std::vector<std::string> vars;
  std::vector<std::string> stderrHas;
  bool stderrEmpty = false;
};

// "STRATA_X" as the parameter API reports it ("" when unset).
std::string param(const char* key) {
  const char* value = nullptr;
  int len = -1;
  const ncclResult_t r = ncclParamGetParameter(key, &value, &len);
  check(r == ncclSuccess && value, std::string("ncclParamGetParameter(") + key + "): " + codeName(r));
  return value ? std::string(value, static_cast<size_t>(std::max(len, 0))) : "";
}

std::set<std::string> splitCommas(const std::string& s) {
  std::set<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) out.insert(item);
  return out;
}

// The child: checks what the drop-in made of its environment at load.
void envChild(const std::string& name) {
  const char* algo = std::getenv("STRATA_ALGO");
  if (name == "none") {
    check(!algo && param("STRATA_ALGO").empty(), "no NCCL_ALGO: STRATA_ALGO stays unset");
  } else if (name == "algo") {
    const std::string want = "allreduce:ring,reducescatter:ring,allgather:ring";
    // The parameter is the value Strata's configuration holds, which lists the collectives in its own order.
    const std::string got = param("STRATA_ALGO");
    check(splitCommas(got) == splitCommas(want),
          "NCCL_ALGO=Ring: STRATA_ALGO is \"" + got + "\", expected \"" + want + "\" (in any order)");
    check(algo && want == algo, "NCCL_ALGO=Ring: the environment's STRATA_ALGO is set for the rest of the process");
    check(param("NCCL_ALGO") == "Ring", "ncclParamGetParameter(NCCL_ALGO) is the value as set");
  } else if (name == "algo_strata_wins") {
    const std::string got = param("STRATA_ALGO");
    check(got == "allreduce:tree", "NCCL_ALGO=Ring and STRATA_ALGO=allreduce:tree: STRATA_ALGO is \"" + got + "\"");
  } else if (name == "version") {
    int version = 0;
    ok(ncclGetVersion(&version), "ncclGetVersion");
    check(version == NCCL_VERSION_CODE, "ncclGetVersion is " + std::to_string(version));
  } else if (name == "topo_xml") {
    check(!std::getenv("STRATA_TOPO_FILE") && param("STRATA_TOPO_FILE").empty(),
          "NCCL_TOPO_FILE of NCCL's XML: STRATA_TOPO_FILE stays unset");
  } else if (name == "topo_json") {
    const std::string want = envOr("NCCL_TOPO_FILE", "(unset)");
    check(envOr("STRATA_TOPO_FILE", "") == want, "NCCL_TOPO_FILE of Strata's JSON becomes STRATA_TOPO_FILE");
  } else if (name == "subsys") {
    const std::string got = param("STRATA_DEBUG_SUBSYS");
    // "^" means all but those: the others (INIT, COLL, ...) stay.
    const std::set<std::string> items = splitCommas(got);
    check(!items.count("NET") && !items.count("SHM") && items.count("INIT") && items.count("COLL") &&
              items.count("BOOTSTRAP") && items.count("TUNING"),
          "NCCL_DEBUG_SUBSYS=^NET,SHM: STRATA_DEBUG_SUBSYS is \"" + got + "\", expected all but NET and SHM");
  } else {
    die("unknown env case " + name);
  }
  groupDone(("env " + name + " (child)").c_str());
}

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs this program as `env-child NAME` under `vars` (on top of this environment without its NCCL_* and STRATA_*
// variables); returns its exit status (-1 if it did not exit) and its stderr.
int runEnvChild(const EnvCase& c, std::string* stderrText) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    if (kv.rfind("NCCL_", 0) != 0 && kv.rfind("STRATA_", 0) != 0) env.push_back(kv);
  }
  env.insert(env.end(), c.vars.begin(), c.vars.end());
  std::vector<char*> envp;
  for (auto& kv : env) envp.push_back(kv.data());
  envp.push_back(nullptr);
  std::string self = "/proc/self/exe", mode = "env-child", name = c.name;
  char* argv[] = {self.data(), mode.data(), name.data(), nullptr};

  std::string errPath = (std::filesystem::temp_directory_path() / "nccl_extras_test.stderr.XXXXXX").string();
  const int fd = mkstemp(errPath.data());
  if (fd < 0) die("mkstemp " + errPath + ": " + std::strerror(errno));
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) die(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    dup2(fd, STDERR_FILENO);
    close(fd);
    execve(argv[0], argv, envp.data());
    _exit(127);
  }
  close(fd);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) die(std::string("waitpid: ") + std::strerror(errno));
  }
  *stderrText = readFile(errPath);
  unlink(errPath.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

void testEnv() {
  needRanks(gNranks == 1, "1 process");
  namespace fs = std::filesystem;
  const std::string key = std::to_string(getpid());
  const fs::path xml = fs::temp_directory_path() / ("nccl_extras_test." + key + ".topo.xml");
  const fs::path json = fs::temp_directory_path() / ("nccl_extras_test." + key + ".topo.json");
  {
    std::ofstream(xml) << "<system version=\"1\">\n  <cpu numaid=\"0\" affinity=\"ffffffff\" arch=\"x86_64\"/>\n"
                          "</system>\n";
    std::ofstream(json) << "{\"hosts\": []}\n";
  }
  char version[128];
  std::snprintf(version, sizeof version, " implementing the NCCL %d.%d.%d API", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
  const std::vector<EnvCase> cases = {
      {"none", {}, {}, true},
      {"algo", {"NCCL_ALGO=Ring"}, {}, true},
      {"algo_strata_wins", {"NCCL_ALGO=Ring", "STRATA_ALGO=allreduce:tree"}, {}, true},
      {"version", {"NCCL_DEBUG=VERSION"}, {version}},
      {"topo_xml", {"NCCL_TOPO_FILE=" + xml.string()}, {"NCCL_TOPO_FILE=" + xml.string(), "XML", "STRATA_TOPO_FILE"}},
      {"topo_json", {"NCCL_TOPO_FILE=" + json.string()}, {}, true},
      {"subsys", {"NCCL_DEBUG_SUBSYS=^NET,SHM"}, {}, true},
  };
  for (const EnvCase& c : cases) {
    std::string err;
    const int status = runEnvChild(c, &err);
    std::string vars;
    for (const auto& v : c.vars) vars += v + " ";
    const std::string what = "env " + std::string(c.name) + " (" + vars + "): ";
    check(status == 0, what + "the child exited with " + std::to_string(status) + "; its stderr:\n" + err);
    for (const auto& s : c.stderrHas)
      check(err.find(s) != std::string::npos, what + "stderr does not say \"" + s + "\"; it is:\n" + err);
    if (c.stderrEmpty) check(err.empty(), what + "the drop-in is silent by default; its stderr is:\n" + err);
    if (std::string(c.name) == "version") {
      check(occurrences(err, version) == 1, what + "the version line is written once; stderr:\n" + err);
      // "Strata X.Y.Z implementing ...": the line names Strata's own version first.
      const size_t at = err.find(version);
      const size_t strata = at == std::string::npos ? at : err.rfind("Strata ", at);
      const std::string number = strata == std::string::npos ? "" : err.substr(strata + 7, at - strata - 7);
      check(!number.empty() && number.find_first_not_of("0123456789.") == std::string::npos &&
                occurrences(number, ".") == 2,
            what + "the version line says \"Strata X.Y.Z" + version + "\"; stderr:\n" + err);
    }
  }
  fs::remove(xml);
  fs::remove(json);
  groupDone("NCCL_* variables mapped to STRATA_* at load");
}

// ---- commid ----------------------------------------------------------------------------------------------------

// NCCL_COMM_ID=host:port on every rank: each rank's ncclGetUniqueId gives the same id, with no exchange.
void testCommId() {
  needRanks(gNranks >= 2, "2 or more ranks");
  const std::string commId = envOr("NCCL_COMM_ID", "");
  if (commId.empty()) die("mode commid runs with NCCL_COMM_ID=host:port set for every rank");
  ncclUniqueId id{}, again{};
  ok(ncclGetUniqueId(&id), "ncclGetUniqueId");
  ok(ncclGetUniqueId(&again), "ncclGetUniqueId");
  check(std::memcmp(&id, &again, sizeof id) == 0, "ncclGetUniqueId under NCCL_COMM_ID gives one id every time");
  ncclComm_t comm = nullptr;
  ok(ncclCommInitRank(&comm, gNranks, id, gRank), "ncclCommInitRank under NCCL_COMM_ID");
  expectShape(comm, gNranks, gRank, "the communicator of NCCL_COMM_ID");
  // Every rank made the same id on its own.
  std::vector<ncclUniqueId> all(static_cast<size_t>(gNranks));
  ok(ncclAllGather(&id, all.data(), sizeof id, ncclUint8, comm, nullptr), "ncclAllGather");
  for (int r = 0; r < gNranks; ++r)
    check(std::memcmp(&all[static_cast<size_t>(r)], &id, sizeof id) == 0,
          "rank " + std::to_string(r) + "'s ncclGetUniqueId is this rank's");
  expectAllReduce(comm, "the communicator of NCCL_COMM_ID");
  groupDone("NCCL_COMM_ID: ids without exchange, init, all-reduce");
  ok(ncclCommDestroy(comm), "ncclCommDestroy");
}

// ---- groupinit -------------------------------------------------------------------------------------------------

// Whether this process could use CUDA at all (a driver to load).
bool cudaDriverPresent() {
  void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (h) dlclose(h);
  return h != nullptr;
}

// Every rank of an n-rank clique, made by this one thread inside one group.
std::vector<ncclComm_t> cliqueInGroup(int n) {
  ncclUniqueId id{};
  ok(ncclGetUniqueId(&id), "ncclGetUniqueId");
  std::vector<ncclComm_t> comms(static_cast<size_t>(n), nullptr);
  ok(ncclGroupStart(), "ncclGroupStart");
  for (int r = 0; r < n; ++r)
    ok(ncclCommInitRank(&comms[static_cast<size_t>(r)], n, id, r), "ncclCommInitRank in a group");
  ok(ncclGroupEnd(), "ncclGroupEnd");
  return comms;
}

// NCCL's single-thread pattern: one thread makes every rank of a clique inside one group, then drives them all with
// grouped calls.
void testGroupInit() {
  needRanks(gNranks == 1, "1 process");
  constexpr int kRanks = 3;
  const std::vector<ncclComm_t> comms = cliqueInGroup(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    if (!comms[r]) die("ncclCommInitRank in a group gave no communicator");
    expectShape(comms[r], kRanks, r, "communicator " + std::to_string(r) + " made in the group");
  }
  groupDone("3 ranks created in one group by one thread");

  for (size_t count : kCounts) {
    const uint64_t salt = saltOf("groupinit") + count;
    std::vector<Buffers> b;
    for (int r = 0; r < kRanks; ++r) b.push_back(makeBuffers(salt, r, count));
    ok(ncclGroupStart(), "ncclGroupStart");
    for (int r = 0; r < kRanks; ++r) {
      Buffers& x = b[static_cast<size_t>(r)];
      ok(ncclAllReduce(x.sendI.data(), x.recvI.data(), count, ncclInt64, ncclSum, comms[r], nullptr),
         "ncclAllReduce in a group");
      ok(ncclAllReduce(x.sendF.data(), x.recvF.data(), count, ncclFloat32, ncclSum, comms[r], nullptr),
         "ncclAllReduce in a group");
    }
    ok(ncclGroupEnd(), "ncclGroupEnd");
    for (int r = 0; r < kRanks; ++r)
      expectSums(b[static_cast<size_t>(r)], salt, kRanks, "grouped all-reduce, communicator " + std::to_string(r));
  }
  groupDone("grouped all-reduce on the 3 communicators, one thread");
  for (ncclComm_t c : comms) ok(ncclCommDestroy(c), "ncclCommDestroy");

  ncclComm_t all[2] = {};
  const ncclResult_t r = ncclCommInitAll(all, 2, nullptr);
  if (!cudaDriverPresent()) {
    expectError(r, ncclUnhandledCudaError, nullptr, "CUDA", "ncclCommInitAll(2 devices) without CUDA");
    check(lastError(nullptr).find("ncclCommInitRank") != std::string::npos,
          "ncclCommInitAll without CUDA says to use ncclCommInitRank: " + lastError(nullptr));
  } else {
    // With a driver: 2 communicators if 2 devices are visible, else refused with a message.
    check(r == ncclSuccess || std::string(lastError(nullptr)).find("ncclCommInitAll") != std::string::npos,
          "ncclCommInitAll with a CUDA driver: " + codeName(r) + ": " + lastError(nullptr));
    if (r == ncclSuccess)
      for (ncclComm_t c : all) ok(ncclCommDestroy(c), "ncclCommDestroy");
  }
  groupDone("ncclCommInitAll");
}

// ---- revoke ----------------------------------------------------------------------------------------------------

// Rank 0 revokes the communicator while rank 1 waits in an all-reduce: rank 1 hears of it at once (the ctest sets
// STRATA_TIMEOUT_MS=60000, so an answer after the timeout would be far too late), and both shrink to a new one.
void testRevoke() {
  needRanks(gNranks == 2, "2 ranks");
  const int64_t timeoutMs = std::atoll(envOr("STRATA_TIMEOUT_MS", "600000").c_str());
  if (timeoutMs < 60000) die("mode revoke runs with STRATA_TIMEOUT_MS of 60000 or more");
  ncclComm_t comm = initWorld("revoke", gNranks, gRank);
  expectAllReduce(comm, "before the revoke");
  int64_t one = 1, sum = 0;
  if (gRank == 0) {
    // Long enough for rank 1 to be waiting in its all-reduce (if it is not yet, it is refused when it comes).
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    ok(ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT), "ncclCommRevoke");
    const ncclResult_t r = ncclAllReduce(&one, &sum, 1, ncclInt64, ncclSum, comm, nullptr);
    const std::string e = lastError(comm);
    check(r != ncclSuccess && r != ncclInProgress,
          "an all-reduce after ncclCommRevoke on the revoking rank fails: " + codeName(r) + ": " + e);
    check(e.find("revoke") != std::string::npos, "the revoking rank's refused all-reduce names the revoke: " + e);
    // nccl.h: the revoked communicator's state becomes ncclSuccess once quiescent, and finalize is then invalid.
    ncclResult_t state = ncclInternalError;
    ok(ncclCommGetAsyncError(comm, &state), "ncclCommGetAsyncError after ncclCommRevoke");
    check(state == ncclSuccess, "a revoked communicator's state is ncclSuccess once quiescent: " + codeName(state));
    expectError(ncclCommFinalize(comm), ncclInvalidUsage, comm, "ncclCommRevoke",
                "ncclCommFinalize after ncclCommRevoke");
    groupDone("ncclCommRevoke: the revoking rank's calls fail, its state is ncclSuccess, finalize refused");
  } else {
    const auto start = Clock::now();
    const ncclResult_t r = ncclAllReduce(&one, &sum, 1, ncclInt64, ncclSum, comm, nullptr);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    const std::string e = lastError(comm);
    check(r != ncclSuccess && r != ncclInProgress,
          "rank 1's all-reduce on a communicator rank 0 revoked fails: " + codeName(r) + ": " + e);
    check(e.find("rank 0") != std::string::npos, "rank 1's failed all-reduce names rank 0: " + e);
    // Not a timing benchmark: the bound only tells hearing of the revoke from running into the 60 s deadline.
    check(seconds < 15, "rank 1 hears of the revoke at once, not at STRATA_TIMEOUT_MS (" + std::to_string(timeoutMs) +
                            " ms): it took " + std::to_string(seconds) + " s");
    groupDone("ncclCommRevoke: the peer's all-reduce fails naming rank 0");
  }
  ncclComm_t shrunk = nullptr;
  ok(ncclCommShrink(comm, nullptr, 0, &shrunk, nullptr, NCCL_SHRINK_DEFAULT), "ncclCommShrink of a revoked comm");
  if (!shrunk) die("ncclCommShrink gave no communicator");
  expectShape(shrunk, gNranks, gRank, "the communicator shrunk from the revoked one");
  expectAllReduce(shrunk, "the communicator shrunk from the revoked one");
  groupDone("ncclCommShrink of the revoked communicator, all-reduce");
  ok(ncclCommDestroy(shrunk), "ncclCommDestroy");
  ok(ncclCommDestroy(comm), "ncclCommDestroy of the revoked communicator");
}

// ---- simulate --------------------------------------------------------------------------------------------------

// ncclGroupSimulateEnd's estimate for one 64 MiB all-reduce on rank 0 of a 4-rank clique made with STRATA_TUNE set
// to `tune`. Nothing runs: only rank 0 calls.
float simulatedEstimate(const char* tune) {
  setenv("STRATA_TUNE", tune, 1);
  const std::vector<ncclComm_t> comms = cliqueInGroup(4);
  const size_t count = size_t{16} << 20;
  std::vector<float> send(count, 1.0f), recv(count, -1.0f);
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  ok(ncclGroupStart(), "ncclGroupStart");
  ok(ncclAllReduce(send.data(), recv.data(), count, ncclFloat32, ncclSum, comms[0], nullptr), "ncclAllReduce");
  ok(ncclGroupSimulateEnd(&sim), "ncclGroupSimulateEnd");
  check(recv[0] == -1.0f && recv[count - 1] == -1.0f, std::string("STRATA_TUNE=") + tune + ": nothing ran");
  for (ncclComm_t c : comms) ok(ncclCommDestroy(c), "ncclCommDestroy");
  unsetenv("STRATA_TUNE");
  return sim.estimatedTime;
}

// STRATA_TUNE=sim: ncclGroupSimulateEnd reports the simulator's time (strata-sim's engine on the communicator's
// cluster), not the cost model's.
void testSimulate() {
  needRanks(gNranks == 1, "1 process");
  const float model = simulatedEstimate("model");
  const float simulated = simulatedEstimate("sim");
  check(std::isfinite(model) && model > 0, "STRATA_TUNE=model: an estimate > 0 (" + std::to_string(model) + " us)");
  check(std::isfinite(simulated) && simulated > 0,
        "STRATA_TUNE=sim: an estimate > 0 (" + std::to_string(simulated) + " us)");
  check(simulated != model,
        "STRATA_TUNE=sim estimates by simulation, not by the model (both " + std::to_string(model) + " us)");
  std::printf("ncclGroupSimulateEnd, 64 MiB all-reduce on 4 ranks: model %.1f us, simulated %.1f us\n", model,
              simulated);
  groupDone("ncclGroupSimulateEnd under STRATA_TUNE=model and =sim");
}

// ---- suspend ---------------------------------------------------------------------------------------------------

uint64_t suspendedStat(ncclComm_t comm) {
  uint64_t v = 99;
  ok(ncclCommMemStats(comm, ncclStatGpuMemSuspended, &v), "ncclCommMemStats(ncclStatGpuMemSuspended)");
  return v;
}

void testSuspend() {
  ncclComm_t comm = initWorld("suspend", gNranks, gRank);
  check(suspendedStat(comm) == 0, "ncclStatGpuMemSuspended is 0 before ncclCommSuspend");
  expectError(ncclCommResume(comm), ncclInvalidUsage, comm, "not suspended", "ncclCommResume of a live communicator");
  ok(ncclCommSuspend(comm, NCCL_SUSPEND_MEM), "ncclCommSuspend");
  check(suspendedStat(comm) == 1, "ncclStatGpuMemSuspended is 1 after ncclCommSuspend");
  int64_t one = 1, sum = 0;
  expectError(ncclAllReduce(&one, &sum, 1, ncclInt64, ncclSum, comm, nullptr), ncclInvalidUsage, comm, "suspend",
              "an all-reduce on a suspended communicator");
  check(sum == 0, "the refused all-reduce wrote nothing");
  ncclComm_t part = nullptr;
  expectError(ncclCommSplit(comm, 0, gRank, &part, nullptr), ncclInvalidUsage, comm, "suspend",
              "ncclCommSplit of a suspended communicator");
  check(part == nullptr, "the refused split made no communicator");
  expectError(ncclCommSuspend(comm, NCCL_SUSPEND_MEM), ncclInvalidUsage, comm, "suspend", "a second ncclCommSuspend");
  groupDone("ncclCommSuspend: calls (all-reduce, split, suspend) refused, MemStats 1");
  ok(ncclCommResume(comm), "ncclCommResume");
  check(suspendedStat(comm) == 0, "ncclStatGpuMemSuspended is 0 after ncclCommResume");
  expectAllReduce(comm, "after ncclCommResume");
  expectError(ncclCommResume(comm), ncclInvalidUsage, comm, "not suspended", "a second ncclCommResume");
  groupDone("ncclCommResume: all-reduce works, MemStats 0, resume again refused");
  ok(ncclCommFinalize(comm), "ncclCommFinalize");
  ok(ncclCommDestroy(comm), "ncclCommDestroy");
}

// ---- nonblocking_group -----------------------------------------------------------------------------------------

void testNonBlockingGroup() {
  needRanks(gNranks >= 2, "2 or more ranks");
  const ncclUniqueId id = shareId("nonblocking", gRank);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  config.commName = "nccl_extras_test non-blocking";
  ncclComm_t comm = nullptr;
  const ncclResult_t init = ncclCommInitRankConfig(&comm, gNranks, id, gRank, &config);
  check(init == ncclSuccess || init == ncclInProgress,
        "non-blocking ncclCommInitRankConfig returns ncclSuccess or ncclInProgress: " + codeName(init));
  if (!comm) die("non-blocking ncclCommInitRankConfig gave no communicator: " + lastError(nullptr));
  check(waitAsync(comm, "non-blocking init") == ncclSuccess, "non-blocking init completes");
  if (gRank == 0) removeIdFile("nonblocking");
  expectShape(comm, gNranks, gRank, "the non-blocking communicator");

  const int next = (gRank + 1) % gNranks, prev = (gRank + gNranks - 1) % gNranks;
  for (size_t count : kCounts) {
    const uint64_t salt = saltOf("nonblocking group") + count;
    Buffers b = makeBuffers(salt, gRank, count);
    std::vector<int64_t> ringIn(count), ringOut(count, INT64_MIN);
    for (size_t i = 0; i < count; ++i) ringIn[i] = inputOf(salt + 2, gRank, i);
    ok(ncclGroupStart(), "ncclGroupStart");
    const ncclResult_t a = ncclAllReduce(b.sendI.data(), b.recvI.data(), count, ncclInt64, ncclSum, comm, nullptr);
    const ncclResult_t f = ncclAllReduce(b.sendF.data(), b.recvF.data(), count, ncclFloat32, ncclSum, comm, nullptr);
    const ncclResult_t s = ncclSend(ringIn.data(), count, ncclInt64, next, comm, nullptr);
    const ncclResult_t r = ncclRecv(ringOut.data(), count, ncclInt64, prev, comm, nullptr);
    for (ncclResult_t x : {a, f, s, r})
      check(x == ncclSuccess || x == ncclInProgress, "a call in a non-blocking group returns " + codeName(x));
    const ncclResult_t end = ncclGroupEnd();
    check(end == ncclSuccess || end == ncclInProgress,
          "ncclGroupEnd of a non-blocking group returns ncclSuccess or ncclInProgress: " + codeName(end));
    check(waitAsync(comm, "a non-blocking group") == ncclSuccess,
          "ncclCommGetAsyncError reaches ncclSuccess after the group: " + lastError(comm));
    const std::string what = "non-blocking group count " + std::to_string(count);
    expectSums(b, salt, gNranks, what + " (all-reduce)");
    size_t wrong = 0;
    for (size_t i = 0; i < count; ++i) wrong += ringOut[i] != inputOf(salt + 2, prev, i);
    check(wrong == 0, what + " (recv from rank " + std::to_string(prev) + "): " + std::to_string(wrong) + " wrong");
  }
  groupDone("non-blocking group: all-reduce + send/recv, polled");
  expectAllReduce(comm, "non-blocking all-reduce outside a group", false);
  okAsync(ncclCommFinalize(comm), comm, "ncclCommFinalize");
  ok(ncclCommDestroy(comm), "ncclCommDestroy");
  groupDone("non-blocking all-reduce, finalize, destroy");
}

}  // namespace

int main(int argc, char** argv) {
  const std::string usage = std::string("usage: ") + argv[0] +
                            " grow|scalable|params|env|commid|groupinit|revoke|suspend|nonblocking_group|simulate\n";
  if (argc < 2) {
    std::fputs(usage.c_str(), stderr);
    return 2;
  }
  gMode = argv[1];
  gWho = "nccl_extras_test " + gMode;
  gRank = std::atoi(envOr("RANK", "0").c_str());
  gNranks = std::atoi(envOr("WORLD_SIZE", "1").c_str());
  if (gNranks < 1 || gRank < 0 || gRank >= gNranks)
    die("RANK " + std::to_string(gRank) + " and WORLD_SIZE " + std::to_string(gNranks) + " do not make sense");
  const auto start = Clock::now();

  if (gMode == "env-child" && argc == 3) envChild(argv[2]);
  else if (gMode == "grow") testGrow();
  else if (gMode == "scalable") testScalable();
  else if (gMode == "params") testParams();
  else if (gMode == "env") testEnv();
  else if (gMode == "commid") testCommId();
  else if (gMode == "groupinit") testGroupInit();
  else if (gMode == "revoke") testRevoke();
  else if (gMode == "suspend") testSuspend();
  else if (gMode == "simulate") testSimulate();
  else if (gMode == "nonblocking_group") testNonBlockingGroup();
  else {
    std::fputs(usage.c_str(), stderr);
    return 2;
  }

  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (gFailures) {
    std::fprintf(stderr, "nccl_extras_test %s: %ld of %ld checks FAILED on rank %d of %d\n", gMode.c_str(), gFailures,
                 gChecks, gRank, gNranks);
    return 1;
  }
  std::printf("nccl_extras_test %s: %ld checks passed on rank %d of %d (%.1f s)\n", gMode.c_str(), gChecks, gRank,
              gNranks, seconds);
  return 0;
}
