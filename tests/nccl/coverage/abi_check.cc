// The NCCL drop-in's ABI, held to the nccl.h it was built against. At compile time: every enum value and flag
// that the drop-in passes through to Strata unchanged (results, datatypes with their aliases, reduction operators,
// scalar residence, split, shrink and revoke flags) equals its strata.h twin, and the unique ids have one size. At
// run time, through libnccl.so.2 on one-rank communicators: how ncclCommInitRankConfig treats a config (NCCL's
// rules): one not made with NCCL_CONFIG_INITIALIZER is refused with a message; an older, smaller one is accepted
// and nothing after its size is read (it ends at a page that cannot be read); blocking = 0 gives ncclInProgress
// or ncclSuccess and ncclCommGetAsyncError reaches ncclSuccess; commName is accepted; blocking = 2 is refused.
// Exit status 0 when every check passes; each failure is printed.
#include <nccl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "strata/strata.h"

// ---- compile time: the values the drop-in casts from NCCL's types to Strata's --------------------------------

static_assert(int(ncclSuccess) == int(strataSuccess));
static_assert(int(ncclUnhandledCudaError) == int(strataUnhandledCudaError));
static_assert(int(ncclSystemError) == int(strataSystemError));
static_assert(int(ncclInternalError) == int(strataInternalError));
static_assert(int(ncclInvalidArgument) == int(strataInvalidArgument));
static_assert(int(ncclInvalidUsage) == int(strataInvalidUsage));
static_assert(int(ncclRemoteError) == int(strataRemoteError));
static_assert(int(ncclInProgress) == int(strataInProgress));
static_assert(int(ncclTimeout) == int(strataTimeout));
static_assert(int(ncclNumResults) == int(strataNumResults));
static_assert(sizeof(ncclResult_t) == sizeof(strataResult_t));

static_assert(int(ncclInt8) == int(strataInt8) && int(ncclChar) == int(strataChar));
static_assert(int(ncclUint8) == int(strataUint8));
static_assert(int(ncclInt32) == int(strataInt32) && int(ncclInt) == int(strataInt));
static_assert(int(ncclUint32) == int(strataUint32));
static_assert(int(ncclInt64) == int(strataInt64));
static_assert(int(ncclUint64) == int(strataUint64));
static_assert(int(ncclFloat16) == int(strataFloat16) && int(ncclHalf) == int(strataHalf));
static_assert(int(ncclFloat32) == int(strataFloat32) && int(ncclFloat) == int(strataFloat));
static_assert(int(ncclFloat64) == int(strataFloat64) && int(ncclDouble) == int(strataDouble));
static_assert(int(ncclBfloat16) == int(strataBfloat16));
static_assert(int(ncclFloat8e4m3) == int(strataFloat8e4m3));
static_assert(int(ncclFloat8e5m2) == int(strataFloat8e5m2));
static_assert(int(ncclNumTypes) == int(strataNumTypes));
static_assert(sizeof(ncclDataType_t) == sizeof(strataDataType_t));

static_assert(int(ncclSum) == int(strataSum));
static_assert(int(ncclProd) == int(strataProd));
static_assert(int(ncclMax) == int(strataMax));
static_assert(int(ncclMin) == int(strataMin));
static_assert(int(ncclAvg) == int(strataAvg));
// ncclNumOps is also the first value of an operator made by ncclRedOpCreatePreMulSum, ncclMaxRedOp the last.
static_assert(int(ncclNumOps) == int(strataNumOps));
static_assert(int(ncclMaxRedOp) == int(strataMaxRedOp));
static_assert(sizeof(ncclRedOp_t) == sizeof(strataRedOp_t));

static_assert(int(ncclScalarDevice) == int(strataScalarDevice));
static_assert(int(ncclScalarHostImmediate) == int(strataScalarHostImmediate));
static_assert(sizeof(ncclScalarResidence_t) == sizeof(strataScalarResidence_t));

static_assert(NCCL_SPLIT_NOCOLOR == STRATA_SPLIT_NOCOLOR);
static_assert(NCCL_SHRINK_DEFAULT == STRATA_SHRINK_DEFAULT);
static_assert(NCCL_SHRINK_ABORT == STRATA_SHRINK_ABORT);
static_assert(NCCL_REVOKE_DEFAULT == STRATA_REVOKE_DEFAULT);

static_assert(sizeof(ncclUniqueId) == sizeof(strataUniqueId));
static_assert(NCCL_UNIQUE_ID_BYTES == STRATA_UNIQUE_ID_BYTES);

// ---- run time: configs through the drop-in ----------------------------------------------------------------------

namespace {

int gFailures = 0;

void expect(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAIL", what.c_str());
  if (!ok) ++gFailures;
}

std::string name(ncclResult_t r) { return std::to_string(int(r)) + " (" + ncclGetErrorString(r) + ")"; }

ncclUniqueId freshId() {
  ncclUniqueId id;
  const ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess) {
    std::printf("FAIL: ncclGetUniqueId returned %s: %s\n", name(r).c_str(), ncclGetLastError(nullptr));
    std::exit(1);
  }
  return id;
}

// Polls ncclCommGetAsyncError until it leaves ncclInProgress (30 s at most); returns the last state.
ncclResult_t settle(ncclComm_t comm) {
  ncclResult_t state = ncclInProgress;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < end) {
    const ncclResult_t q = ncclCommGetAsyncError(comm, &state);
    if (q != ncclSuccess) return q;
    if (state != ncclInProgress) return state;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return state;
}

// A one-rank all-reduce of 2 floats on host buffers, settled (non-blocking communicators return ncclInProgress).
bool allReduceWorks(ncclComm_t comm) {
  float in[2] = {1.5f, -2.0f}, out[2] = {0, 0};
  const ncclResult_t r = ncclAllReduce(in, out, 2, ncclFloat32, ncclSum, comm, nullptr);
  if (r != ncclSuccess && r != ncclInProgress) return false;
  return settle(comm) == ncclSuccess && out[0] == 1.5f && out[1] == -2.0f;
}

// A config the size of an older ncclConfig_t: `size` bytes ending at the last readable byte of a page whose next
// page cannot be read, every byte after the fields set here unwritten (0xa5). A read past `size` kills the
// process with SIGSEGV, which ctest reports.
ncclConfig_t* olderConfig(size_t size, int version) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* mem = mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED || mprotect(static_cast<char*>(mem) + page, page, PROT_NONE) != 0) {
    std::perror("abi_check: mmap/mprotect");
    std::exit(1);
  }
  char* start = static_cast<char*>(mem) + page - size;
  std::memset(start, 0xa5, size);
  // Only the header and the fields inside `size`: the struct's later members are not there.
  ncclConfig_t full = NCCL_CONFIG_INITIALIZER;
  full.size = size;
  full.version = static_cast<unsigned>(version);
  full.blocking = 1;
  std::memcpy(start, &full, size);
  return reinterpret_cast<ncclConfig_t*>(start);
}

void olderConfigsAreAccepted() {
  // NCCL 2.14's config ended after netName; the shortest one that still has `blocking` ends after
  // cgaClusterSize (a multiple of 8, so the struct stays aligned). The first accepted config of the process
  // goes first: that is when the drop-in looks at the fields it does not use.
  const struct {
    size_t size;
    int version;
    const char* what;
  } older[] = {
      {offsetof(ncclConfig_t, minCTAs), 21400, "a config of 24 bytes (header, blocking, cgaClusterSize)"},
      {offsetof(ncclConfig_t, splitShare), 21400, "NCCL 2.14's config (40 bytes, up to netName)"},
      {offsetof(ncclConfig_t, collnetEnable), 21800, "a config up to commName (56 bytes)"},
  };
  static_assert(offsetof(ncclConfig_t, minCTAs) == 24 && offsetof(ncclConfig_t, splitShare) == 40);
  for (const auto& o : older) {
    ncclConfig_t* cfg = olderConfig(o.size, o.version);
    ncclComm_t comm = nullptr;
    const ncclResult_t r = ncclCommInitRankConfig(&comm, 1, freshId(), 0, cfg);
    const std::string why = r == ncclSuccess ? "" : std::string(": ") + ncclGetLastError(nullptr);
    expect(r == ncclSuccess && comm != nullptr, std::string(o.what) + " is accepted (got " + name(r) + why + ")");
    if (comm) {
      expect(allReduceWorks(comm), std::string(o.what) + ": an all-reduce on the communicator works");
      ncclCommDestroy(comm);
    }
  }
}

void uninitialisedConfigIsRefused() {
  // All zero: size 0, magic 0, as a config declared without NCCL_CONFIG_INITIALIZER (static storage) reads.
  ncclConfig_t zero;
  std::memset(&zero, 0, sizeof(zero));
  // Today's size and version, magic 0: someone filled the struct by hand.
  ncclConfig_t noMagic = NCCL_CONFIG_INITIALIZER;
  noMagic.magic = 0;
  for (ncclConfig_t* cfg : {&zero, &noMagic}) {
    ncclComm_t comm = reinterpret_cast<ncclComm_t>(0x1);
    const ncclResult_t r = ncclCommInitRankConfig(&comm, 1, freshId(), 0, cfg);
    const std::string message = ncclGetLastError(nullptr);
    const std::string what = "a config with size " + std::to_string(cfg->size) + ", magic 0";
    expect(r == ncclInvalidArgument, what + " is refused with ncclInvalidArgument (got " + name(r) + ")");
    expect(message.find("NCCL_CONFIG_INITIALIZER") != std::string::npos,
           what + ": the message names NCCL_CONFIG_INITIALIZER (\"" + message + "\")");
    expect(comm == nullptr, what + ": no communicator is returned");
    if (r == ncclSuccess && comm) ncclCommDestroy(comm);
  }
}

void nonBlockingReachesSuccess() {
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t comm = nullptr;
  const ncclResult_t r = ncclCommInitRankConfig(&comm, 1, freshId(), 0, &cfg);
  expect(r == ncclInProgress || r == ncclSuccess,
         "blocking = 0: ncclCommInitRankConfig returns ncclInProgress or ncclSuccess (got " + name(r) + ")");
  if (!comm) {
    expect(false, "blocking = 0: a communicator handle is returned");
    return;
  }
  const ncclResult_t state = settle(comm);
  expect(state == ncclSuccess, "blocking = 0: ncclCommGetAsyncError reaches ncclSuccess (got " + name(state) + ")");
  expect(allReduceWorks(comm), "blocking = 0: an all-reduce (ncclInProgress, then settled) gives the right sum");
  int count = 0;
  expect(ncclCommCount(comm, &count) == ncclSuccess && count == 1, "blocking = 0: ncclCommCount is 1");
  expect(ncclCommDestroy(comm) == ncclSuccess, "blocking = 0: ncclCommDestroy succeeds");
}

void commNameIsAccepted() {
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.commName = "abi-check-comm";
  ncclComm_t comm = nullptr;
  const ncclResult_t r = ncclCommInitRankConfig(&comm, 1, freshId(), 0, &cfg);
  expect(r == ncclSuccess && comm != nullptr, "commName is accepted (got " + name(r) + ")");
  if (comm) {
    expect(allReduceWorks(comm), "commName: an all-reduce on the communicator works");
    ncclCommDestroy(comm);
  }
}

void blockingTwoIsRefused() {
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 2;
  ncclComm_t comm = nullptr;
  const ncclResult_t r = ncclCommInitRankConfig(&comm, 1, freshId(), 0, &cfg);
  const std::string message = ncclGetLastError(nullptr);
  expect(r == ncclInvalidArgument, "blocking = 2 is refused with ncclInvalidArgument (got " + name(r) + ")");
  expect(message.find("blocking") != std::string::npos,
         "blocking = 2: the message names the field (\"" + message + "\")");
  expect(comm == nullptr, "blocking = 2: no communicator is returned");
  if (r == ncclSuccess && comm) ncclCommDestroy(comm);
}

}  // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // every line out before a crash
  int version = 0;
  const ncclResult_t v = ncclGetVersion(&version);
  const std::string header = std::to_string(NCCL_VERSION_CODE);
  expect(v == ncclSuccess && version == NCCL_VERSION_CODE,
         "ncclGetVersion gives the header's NCCL_VERSION_CODE " + header + " (got " + std::to_string(version) + ")");
  // The refusals first (nothing accepted yet), then the older configs (the first accepted ones), then the rest.
  uninitialisedConfigIsRefused();
  blockingTwoIsRefused();
  olderConfigsAreAccepted();
  nonBlockingReachesSuccess();
  commNameIsAccepted();
  std::printf("nccl_abi_check: %s (%d failure%s)\n", gFailures ? "FAIL" : "PASS", gFailures, gFailures == 1 ? "" : "s");
  return gFailures ? 1 : 0;
}
