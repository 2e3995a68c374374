// What the programs of tests/nccl share (each includes it once, nccl.h alone underneath): counted checks and their
// reporting, calls that must succeed, polling a non-blocking communicator with backoff, and unique ids handed
// from rank 0 to the other ranks through files (under strata-run or torchrun, which set no MPI).
// Build with STRATA_NCCL_TEST_MPI to end every rank with MPI_Abort on a fatal error.
#pragma once

#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <source_location>
#include <string>
#include <thread>
#ifdef STRATA_NCCL_TEST_MPI
#include <mpi.h>
#endif

namespace nccl_test {

using Clock = std::chrono::steady_clock;

inline std::string gWho = "nccl test";  // the program (and mode) in every message
inline int gRank = 0;
inline int gNranks = 1;
inline long gChecks = 0;
inline long gFailures = 0;
inline long gGroupChecks = 0;  // checks since the last progress line

// ---- reporting -----------------------------------------------------------------------------------------------

[[noreturn]] inline void die(const std::string& why) {
  std::fprintf(stderr, "%s rank %d of %d: FATAL: %s\n", gWho.c_str(), gRank, gNranks, why.c_str());
  std::fflush(stderr);
#ifdef STRATA_NCCL_TEST_MPI
  MPI_Abort(MPI_COMM_WORLD, 1);
#endif
  std::exit(1);
}

// One check. A failure is reported and counted; the rank goes on (its calls stay the same as the others').
inline bool check(bool ok, const std::string& what) {
  ++gChecks;
  ++gGroupChecks;
  if (!ok) {
    ++gFailures;
    std::fprintf(stderr, "%s rank %d of %d: FAILED: %s\n", gWho.c_str(), gRank, gNranks, what.c_str());
    std::fflush(stderr);
  }
  return ok;
}

inline std::string where(const std::source_location& loc) {
  return std::string(std::filesystem::path(loc.file_name()).filename()) + ":" + std::to_string(loc.line());
}

inline std::string lastError(ncclComm_t comm) {
  const char* e = ncclGetLastError(comm);
  return e ? e : "(null)";
}

inline std::string codeName(ncclResult_t r) { return std::to_string(r) + " (" + ncclGetErrorString(r) + ")"; }

// A call that must succeed: anything else ends the rank, since the other ranks would wait for it.
inline void ok(ncclResult_t r, const char* call, std::source_location loc = std::source_location::current()) {
  if (r == ncclSuccess) return;
  die(std::string(call) + " at " + where(loc) + " returned " + codeName(r) + ": " + lastError(nullptr));
}

inline std::string envOr(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

// ---- time ------------------------------------------------------------------------------------------------------

// Sleeps with exponential backoff from 50 us to 5 ms: ranks share few cores, so nobody spins.
class Backoff {
 public:
  explicit Backoff(const char* what, std::chrono::seconds limit = std::chrono::seconds(60))
      : what_(what), deadline_(Clock::now() + limit) {}
  void pause() {
    if (Clock::now() > deadline_) die(std::string("timed out waiting for ") + what_);
    std::this_thread::sleep_for(sleep_);
    sleep_ = std::min(sleep_ * 2, std::chrono::microseconds(5000));
  }

 private:
  const char* what_;
  Clock::time_point deadline_;
  std::chrono::microseconds sleep_{50};
};

// Polls a non-blocking communicator until its pending work (creation or calls) is no longer in progress; returns
// what it ended with.
inline ncclResult_t waitAsync(ncclComm_t comm, const char* what) {
  Backoff backoff(what);
  for (;;) {
    ncclResult_t state = ncclInProgress;
    ok(ncclCommGetAsyncError(comm, &state), "ncclCommGetAsyncError");
    if (state != ncclInProgress) return state;
    backoff.pause();
  }
}

// A call on a non-blocking communicator: ncclSuccess or ncclInProgress, then polled to completion.
inline void okAsync(ncclResult_t r, ncclComm_t comm, const char* call,
                    std::source_location loc = std::source_location::current()) {
  if (r != ncclSuccess && r != ncclInProgress) ok(r, call, loc);
  const ncclResult_t done = waitAsync(comm, call);
  if (done != ncclSuccess) ok(done, call, loc);
}

// ---- ids through files -----------------------------------------------------------------------------------------

// A file in the temp directory unique to one launch (strata-run picks a free MASTER_PORT and a fresh STRATA_SECRET,
// hashed here, not shown) and to `what`.
inline std::string launchFile(const std::string& program, const std::string& what) {
  const std::string key = envOr("MASTER_PORT", "0") + "." +
                          std::to_string(std::hash<std::string>{}(envOr("STRATA_SECRET", "")) % 1000000007);
  return (std::filesystem::temp_directory_path() / (program + "." + key + "." + what + ".id")).string();
}

// Written whole under another name, then renamed: a reader sees all of it or nothing.
inline void writeId(const std::string& path, const ncclUniqueId& id) {
  const std::string partial = path + ".partial";
  {
    std::ofstream out(partial, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(&id), sizeof id);
    if (!out) die("cannot write " + partial);
  }
  std::error_code ec;
  std::filesystem::rename(partial, path, ec);
  if (ec) die("cannot rename " + partial + " to " + path + ": " + ec.message());
}

// Waits (with backoff, within Backoff's deadline) for the file writeId writes.
inline ncclUniqueId readId(const std::string& path) {
  ncclUniqueId id{};
  Backoff backoff("a unique id file");
  for (;;) {
    std::ifstream in(path, std::ios::binary);
    if (in && in.read(reinterpret_cast<char*>(&id), sizeof id)) return id;
    backoff.pause();
  }
}

}  // namespace nccl_test
