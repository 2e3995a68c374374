// A rank of this program is killed from outside while all ranks loop over large all-reduces; every
// survivor must return an error naming the dead rank (checked by test_fault.sh), not hang.
//
// With --root-exits-early, the opposite: rank 0 (whose process hosts the bootstrap root) destroys its
// communicator on purpose and leaves with _exit(), the way a fork()ed worker ends, while the other ranks
// go on with collectives among themselves. They must finish them all; only what needs the root afterwards
// (a split) fails, with an error that says why.
//
// With --until FILE, a job that runs while a stranger floods its listeners (see untilFile).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "strata/strata.h"

namespace {

int rootExitsEarly() {
  strataComm_t world;
  strataResult_t r = strataCommInitFromEnv(&world);
  if (r != strataSuccess) {
    std::fprintf(stderr, "init failed: %s: %s\n", strataGetErrorString(r), strataGetLastError(nullptr));
    return 1;
  }
  int rank = 0, size = 0;
  strataCommUserRank(world, &rank);
  strataCommCount(world, &size);
  std::vector<int> v(1024, 1);
  if (strataAllReduce(v.data(), v.data(), v.size(), strataInt32, strataSum, world, nullptr) != strataSuccess ||
      v[0] != size) {
    std::fprintf(stderr, "rank %d: world all-reduce failed: %s\n", rank, strataGetLastError(world));
    return 1;
  }
  strataComm_t rest = nullptr;
  r = strataCommSplit(world, rank == 0 ? STRATA_SPLIT_NOCOLOR : 1, rank, &rest, nullptr);
  if (r != strataSuccess) {
    std::fprintf(stderr, "rank %d: split failed: %s\n", rank, strataGetLastError(world));
    return 1;
  }
  // Connections are made on first use, through the root: the others make theirs now, while it is there.
  if (rank != 0 &&
      strataAllReduce(v.data(), v.data(), v.size(), strataInt32, strataSum, rest, nullptr) != strataSuccess) {
    std::fprintf(stderr, "rank %d: warm-up all-reduce failed: %s\n", rank, strataGetLastError(rest));
    return 1;
  }
  // The last operation with rank 0: it may finish there, and rank 0 be gone, before the others have finished it.
  std::fill(v.begin(), v.end(), 1);
  if (strataAllReduce(v.data(), v.data(), v.size(), strataInt32, strataSum, world, nullptr) != strataSuccess ||
      v[0] != size) {
    std::fprintf(stderr, "FAIL rank %d: the last world all-reduce failed: %s\n", rank, strataGetLastError(world));
    return 2;
  }
  if (rank == 0) {
    strataCommDestroy(world);
    std::printf("rank 0: destroyed its communicator, exiting with _exit(0)\n");
    std::fflush(stdout);
    _exit(0);
  }
  // Long enough that rank 0's process is gone well before the end.
  const int iters = 3000;
  for (int it = 0; it < iters; ++it) {
    std::fill(v.begin(), v.end(), rank + it);
    r = strataAllReduce(v.data(), v.data(), v.size(), strataInt32, strataSum, rest, nullptr);
    int want = 0;
    for (int q = 1; q < size; ++q) want += q + it;
    if (r != strataSuccess || v[0] != want || v.back() != want) {
      std::fprintf(stderr, "FAIL rank %d iteration %d: %s: %s (got %d, want %d)\n", rank, it, strataGetErrorString(r),
                   strataGetLastError(rest), v[0], want);
      return 3;
    }
  }
  std::printf("rank %d: %d all-reduces after rank 0 left: all correct\n", rank, iters);
  // The root leaves with rank 0's process; until this rank has seen it go, a split may still succeed.
  for (int k = 0; k < 200; ++k) {
    strataComm_t again = nullptr;
    r = strataCommSplit(rest, 0, rank, &again, nullptr);
    if (r != strataSuccess) {
      const std::string why = strataGetLastError(rest);
      if (why.find("bootstrap root gone") == std::string::npos ||
          why.find("destroyed its communicators") == std::string::npos) {
        std::fprintf(stderr, "FAIL rank %d: split after the root left failed with an unclear error: %s\n", rank,
                     why.c_str());
        return 4;
      }
      std::printf("rank %d: split after the root left: %s\n", rank, why.c_str());
      strataCommDestroy(rest);
      strataCommDestroy(world);
      return 0;
    }
    strataCommDestroy(again);
    usleep(50000);
  }
  std::fprintf(stderr, "FAIL rank %d: splits still succeed 10 s after rank 0 exited\n", rank);
  return 5;
}

// With --until FILE: a job under attack (test_flood.sh). The ranks run checked all-reduces, and every few
// iterations a split communicator with its own new connections, until FILE exists (rank 0 looks; all stop at the
// same iteration) or 300 s passed. Exits 0 only if every call succeeded with the right result.
int untilFile(const char* file) {
  strataComm_t world;
  strataResult_t r = strataCommInitFromEnv(&world);
  if (r != strataSuccess) {
    std::fprintf(stderr, "FAIL init: %s: %s\n", strataGetErrorString(r), strataGetLastError(nullptr));
    return 1;
  }
  int rank = 0, size = 0;
  strataCommUserRank(world, &rank);
  strataCommCount(world, &size);
  const auto start = std::chrono::steady_clock::now();
  std::vector<int> v(4096);
  int it = 0;
  for (;; ++it) {
    int stop =
        rank == 0 && (access(file, F_OK) == 0 || std::chrono::steady_clock::now() - start > std::chrono::seconds(300));
    r = strataAllReduce(&stop, &stop, 1, strataInt32, strataMax, world, nullptr);
    if (r != strataSuccess) break;
    if (stop) break;
    strataComm_t comm = world, split = nullptr;
    if (it % 4 == 3) {
      r = strataCommSplit(world, 0, size - 1 - rank, &split, nullptr);
      if (r != strataSuccess) break;
      comm = split;
    }
    std::fill(v.begin(), v.end(), rank + it);
    r = strataAllReduce(v.data(), v.data(), v.size(), strataInt32, strataSum, comm, nullptr);
    const int want = size * it + size * (size - 1) / 2;
    if (r == strataSuccess && (v[0] != want || v.back() != want)) {
      std::fprintf(stderr, "FAIL rank %d iteration %d: got %d, want %d\n", rank, it, v[0], want);
      return 3;
    }
    if (split) strataCommDestroy(split);
    if (r != strataSuccess) break;
  }
  if (r != strataSuccess) {
    std::fprintf(stderr, "FAIL rank %d iteration %d: %s: %s\n", rank, it, strataGetErrorString(r),
                 strataGetLastError(world));
    return 2;
  }
  std::printf("rank %d: %d iterations (%d splits), all correct\n", rank, it, it / 4);
  strataCommDestroy(world);
  return 0;
}

// With --doctor MODE: 3 ranks run small all-reduces; at the 10th, rank 2 stops itself (MODE stop: SIGSTOP, the
// script continues it later), rank 1 is killed (kill: SIGKILL), or rank 1 calls all-gather instead (desync).
// Every rank that returns must have an error (exit 0); the flight recorder dumps are for strata-doctor
// (test_doctor.sh).
int doctorScenario(const std::string& mode) {
  strataComm_t comm;
  if (strataCommInitFromEnv(&comm) != strataSuccess) {
    std::fprintf(stderr, "init failed: %s\n", strataGetLastError(nullptr));
    return 1;
  }
  int rank = 0;
  strataCommUserRank(comm, &rank);
  std::vector<float> v(1024, 1.0f), g(3 * 1024);
  for (int it = 0; it < 20; ++it) {
    if (it == 10 && mode == "stop" && rank == 2) raise(SIGSTOP);
    if (it == 10 && mode == "kill" && rank == 1) raise(SIGKILL);
    strataResult_t r;
    if (it == 10 && mode == "desync" && rank == 1)
      r = strataAllGather(v.data(), g.data(), v.size(), strataFloat32, comm, nullptr);
    else r = strataAllReduce(v.data(), v.data(), v.size(), strataFloat32, strataMax, comm, nullptr);
    if (r != strataSuccess) {
      std::printf("rank %d: iteration %d failed as expected: %s\n", rank, it, strataGetLastError(comm));
      strataCommAbort(comm);
      return 0;
    }
  }
  std::fprintf(stderr, "FAIL rank %d: every call succeeded\n", rank);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 2 && std::strcmp(argv[1], "--doctor") == 0) return doctorScenario(argv[2]);
  if (argc > 1 && std::strcmp(argv[1], "--root-exits-early") == 0) return rootExitsEarly();
  if (argc > 2 && std::strcmp(argv[1], "--until") == 0) return untilFile(argv[2]);
  const size_t count = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : (4u << 20);
  strataComm_t comm;
  strataResult_t r = strataCommInitFromEnv(&comm);
  if (r != strataSuccess) {
    std::fprintf(stderr, "init failed: %s: %s\n", strataGetErrorString(r), strataGetLastError(nullptr));
    return 1;
  }
  int rank = 0;
  strataCommUserRank(comm, &rank);
  std::vector<float> buf(count, 1.0f);
  for (int iter = 0; iter < 1000000; ++iter) {
    r = strataAllReduce(buf.data(), buf.data(), count, strataFloat32, strataSum, comm, nullptr);
    if (r != strataSuccess) {
      std::fprintf(stderr, "FAULT rank %d iteration %d: %s: %s\n", rank, iter, strataGetErrorString(r),
                   strataGetLastError(comm));
      strataCommAbort(comm);
      return 3;
    }
    if (iter < 3 || iter % 10 == 0) {
      std::printf("rank %d iteration %d\n", rank, iter);
      std::fflush(stdout);
    }
    for (auto& x : buf) x = 1.0f;
  }
  strataCommDestroy(comm);
  return 0;
}
