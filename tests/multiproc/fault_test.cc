// A rank of this program is killed from outside while all ranks loop over large all-reduces; every
// survivor must return an error naming the dead rank (checked by test_fault.sh), not hang.
//
// With --root-exits-early, the opposite: rank 0 (whose process hosts the bootstrap root) destroys its
// communicator on purpose and leaves with _exit(), the way a fork()ed worker ends, while the other ranks
// go on with collectives among themselves. They must finish them all; only what needs the root afterwards
// (a split) fails, with an error that says why.
//
// With --until FILE, a job that runs while a stranger floods its listeners (see untilFile).
// With --doctor MODE and --shrink VICTIM: see doctorScenario and shrinkScenario.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "strata/strata.h"

namespace {

template <typename... Args>
std::string formatText(const char* fmt, Args... args) {
  char buf[512];
  std::snprintf(buf, sizeof(buf), fmt, args...);
  return buf;
}

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

// With --shrink VICTIM: elastic training's recovery. Every rank runs steps of all-reduce, reduce-scatter and
// all-gather over exact integer data; before step 10 rank VICTIM is killed (SIGKILL). The survivors' step fails
// naming it; they shrink the communicator to exclude it (strataCommShrink, no new rendezvous), abort the old one,
// agree on the first failed step, and redo it and every step to 40 on the new one, each result checked exactly. Exit 0
// and "shrunk: ... correct" on success; 2 if a step is wrong; 3 if the shrink fails (it must say why).
int shrinkScenario(int victim) {
  strataComm_t comm;
  if (strataCommInitFromEnv(&comm) != strataSuccess) {
    std::fprintf(stderr, "init failed: %s\n", strataGetLastError(nullptr));
    return 1;
  }
  int rank = 0, size = 0;
  strataCommUserRank(comm, &rank);
  strataCommCount(comm, &size);
  const int worldRank = rank;
  // One training step on `c`, whose ranks are world ranks `members` (in order): exact integer results.
  auto step = [&](strataComm_t c, const std::vector<int>& members, int it, std::string& error) -> strataResult_t {
    const size_t n = members.size(), block = 4099;  // odd, so pieces do not line up with anything
    std::vector<int32_t> in(n * block), out(n * block), rs(block), ag(n * block);
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int32_t>((worldRank + 1) * 1000 + it + int(i % 7));
    strataResult_t r = strataAllReduce(in.data(), out.data(), in.size(), strataInt32, strataSum, c, nullptr);
    if (r == strataSuccess) r = strataReduceScatter(in.data(), rs.data(), block, strataInt32, strataSum, c, nullptr);
    if (r == strataSuccess) r = strataAllGather(rs.data(), ag.data(), block, strataInt32, c, nullptr);
    if (r != strataSuccess) {
      error = strataGetLastError(c);
      return r;
    }
    int64_t ranksSum = 0;
    for (int m : members) ranksSum += m + 1;
    for (size_t i = 0; i < in.size(); ++i) {
      const int64_t want = ranksSum * 1000 + int64_t(n) * (it + int(i % 7));
      if (out[i] != want || ag[i] != want) {
        error = formatText("step %d element %zu: all-reduce %d, all-gather %d, expected %lld", it, i, out[i], ag[i],
                           static_cast<long long>(want));
        return strataInternalError;
      }
    }
    return strataSuccess;
  };
  std::vector<int> members(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) members[static_cast<size_t>(r)] = r;
  constexpr int kFault = 10, kLast = 40;
  // The victim dies before step 10, having finished step 9; a survivor still in step 9 then fails there (it hears
  // of the death before the victim's last messages), so survivors fail at step 9 or 10, and agree afterwards on
  // where to resume, as elastic training resumes from the last step every rank completed.
  int failedAt = -1;
  std::string error;
  for (int it = 0; it <= kFault; ++it) {
    if (it == kFault && rank == victim) raise(SIGKILL);
    if (step(comm, members, it, error) == strataSuccess) continue;
    if (it < kFault - 1) {
      std::fprintf(stderr, "FAIL rank %d: step %d, before the fault: %s\n", rank, it, error.c_str());
      return 2;
    }
    failedAt = it;
    break;
  }
  if (failedAt < 0) {
    std::fprintf(stderr, "FAIL rank %d: step %d succeeded without rank %d\n", rank, kFault, victim);
    return 2;
  }
  std::printf("rank %d: step %d failed as expected: %s\n", rank, failedAt, error.c_str());
  const int excluded[] = {victim};
  strataComm_t shrunk = nullptr;
  const auto t0 = std::chrono::steady_clock::now();
  if (strataCommShrink(comm, excluded, 1, &shrunk, nullptr, STRATA_SHRINK_DEFAULT) != strataSuccess) {
    std::printf("rank %d: shrink failed: %s\n", rank, strataGetLastError(comm));
    strataCommAbort(comm);
    return 3;
  }
  const double shrinkMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  strataCommAbort(comm);
  members.erase(std::find(members.begin(), members.end(), victim));
  int newRank = -1, newSize = 0;
  strataCommUserRank(shrunk, &newRank);
  strataCommCount(shrunk, &newSize);
  const int expectRank = static_cast<int>(std::find(members.begin(), members.end(), worldRank) - members.begin());
  if (newSize != size - 1 || newRank != expectRank) {
    std::fprintf(stderr, "FAIL rank %d: shrunk to rank %d of %d, expected %d of %d\n", rank, newRank, newSize,
                 expectRank, size - 1);
    return 2;
  }
  int resume = failedAt;
  if (strataAllReduce(&resume, &resume, 1, strataInt32, strataMin, shrunk, nullptr) != strataSuccess) {
    std::fprintf(stderr, "FAIL rank %d (now %d): agreeing on the step: %s\n", rank, newRank,
                 strataGetLastError(shrunk));
    return 2;
  }
  for (int it = resume; it <= kLast; ++it) {
    if (step(shrunk, members, it, error) != strataSuccess) {
      std::fprintf(stderr, "FAIL rank %d (now %d): step %d after the shrink: %s\n", rank, newRank, it, error.c_str());
      return 2;
    }
  }
  std::printf("rank %d: shrunk in %.1f ms to rank %d of %d; steps %d-%d correct\n", rank, shrinkMs, newRank, newSize,
              resume, kLast);
  return strataCommDestroy(shrunk) == strataSuccess ? 0 : 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 2 && std::strcmp(argv[1], "--doctor") == 0) return doctorScenario(argv[2]);
  if (argc > 2 && std::strcmp(argv[1], "--shrink") == 0) return shrinkScenario(std::atoi(argv[2]));
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
