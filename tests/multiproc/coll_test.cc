// Multi-process correctness test, run under strata-run: every collective x dtype x op x count, in place
// and out of place, checked exactly against values every rank can compute for every other rank
// (nccl-tests style: small integers whose sums and products are exact in every dtype).
// Usage: strata_coll_test [--counts 0,1,7] [--colls allreduce,...] [--algos allreduce:ring;allreduce:oneshot]
//
// Built a second time as strata_gpu_coll_test (STRATA_TEST_CUDA): --device runs every call on CUDA device
// buffers on a non-blocking stream. Inputs are uploaded before the call; after it, a kernel (Strata's own copy
// kernel) enqueued on the same stream copies every buffer and the copy is read back, so a result that is not
// complete in stream order fails the check. --device also checks CUDA graph capture: with the executor on (the
// default), executor calls are captured and the graph replayed K times (--graph K, default 5), checked at every replay;
// on one rank a captured collective is a device copy; otherwise a captured collective is refused with a clear error
// (rank 0 prints what the call returned). --probe
// exits 0 when a CUDA device is
// usable and 77 (CTest's skip code) with the reason otherwise.
// --no-sync K (with --device): instead of the matrix, K calls issued back to back on two streams with no host
// synchronisation between them, sizes cycling through every path of the device engine (asyncStress below).
// --abort-stopped-peer (with --device, STRATA_GPU_EXECUTOR=1): the last rank stops itself with a device all-reduce
// pending on the others, which abort and time strataCommAbort and their streams (abortStoppedPeer below).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "kernels/reduce.h"
#include "strata/strata.h"
#ifdef STRATA_TEST_CUDA
#include <cuda_runtime.h>
#include <signal.h>
#include <unistd.h>

#include "kernels/cuda_loader.h"
#endif

using strata::loadAsDouble;
using strata::storeFromDouble;

namespace {

int gRank = 0, gSize = 1;
long gFailures = 0, gChecks = 0;

#define CHECK_OK(call)                                                                             \
  do {                                                                                             \
    strataResult_t r_ = (call);                                                                    \
    if (r_ != strataSuccess) {                                                                     \
      std::fprintf(stderr, "rank %d: %s failed: %s: %s\n", gRank, #call, strataGetErrorString(r_), \
                   strataGetLastError(nullptr));                                                   \
      std::exit(1);                                                                                \
    }                                                                                              \
  } while (0)

const strataDataType_t kTypes[] = {strataInt8,    strataUint8,    strataInt32,      strataUint32,
                                   strataInt64,   strataUint64,   strataFloat16,    strataFloat32,
                                   strataFloat64, strataBfloat16, strataFloat8e4m3, strataFloat8e5m2};
bool isUnsigned(strataDataType_t t) { return t == strataUint8 || t == strataUint32 || t == strataUint64; }
bool isFp8(strataDataType_t t) { return t == strataFloat8e4m3 || t == strataFloat8e5m2; }

// Input of rank r at element i for an operator: small integers so every result is exact.
double value(int op, strataDataType_t t, int r, size_t i) {
  const long k = static_cast<long>((static_cast<size_t>(r) * 7 + i * 3) % 1000003);
  switch (op) {
    case strataProd:
      if (isUnsigned(t)) return (static_cast<size_t>(r) == i % static_cast<size_t>(gSize)) ? 2 : 1;
      return ((k % 3) == 0 ? -1.0 : 1.0) * ((static_cast<size_t>(r) == i % static_cast<size_t>(gSize)) ? 2 : 1);
    case strataMax:
    case strataMin: return isUnsigned(t) ? double(k % 11) : double(k % 11 - 5);
    default:  // sum, avg, premulsum
      if (isUnsigned(t)) return double(k % 3);
      if (isFp8(t)) return double(k % 3 - 1);
      return double(k % 5 - 2);
  }
}

double combine(int op, double a, double b) {
  switch (op) {
    case strataProd: return a * b;
    case strataMax: return a > b ? a : b;
    case strataMin: return a < b ? a : b;
    default: return a + b;
  }
}

// Reduction over ranks of element i (premul: multiply each input first; avg handled by caller).
double reduced(int op, strataDataType_t t, size_t i, double premul) {
  double acc = value(op, t, 0, i) * premul;
  for (int r = 1; r < gSize; ++r) acc = combine(op, acc, value(op, t, r, i) * premul);
  return acc;
}

struct Buffer {
  std::vector<char> bytes;
  strataDataType_t t;
  Buffer(size_t n, strataDataType_t type) : bytes(n * strata::dtypeSize(type) + 64, 0), t(type) {}
  void* at(size_t i) { return bytes.data() + i * strata::dtypeSize(t); }
  double get(size_t i) const { return loadAsDouble(bytes.data(), i, t); }
  void set(size_t i, double v) { storeFromDouble(bytes.data(), i, t, v); }
};

// ---- device mode -------------------------------------------------------------------------------------------
// P(buffer, hostPointer) is the pointer a call gets: the host pointer, or (--device) the same offset in a device
// copy of the buffer, made on first use in a call. done() brings every device copy back through a kernel
// enqueued after the call on the call's stream, then waits for the stream.
bool gDevice = false;
strataStream_t gStream = nullptr;

#ifdef STRATA_TEST_CUDA
#define CUDA_OK(call)                                                                         \
  do {                                                                                        \
    cudaError_t e_ = (call);                                                                  \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "rank %d: %s failed: %s\n", gRank, #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)
char* gArena = nullptr;  // one device allocation, bump-allocated per call
size_t gArenaSize = 0, gArenaUsed = 0;
struct Mirror {
  std::vector<char>* host;
  char* dev;
};
std::vector<Mirror> gMirrors;

char* arenaAlloc(size_t bytes) {
  bytes = (bytes + 255) / 256 * 256;
  if (gArenaUsed + bytes > gArenaSize) {
    std::fprintf(stderr, "rank %d: device arena of %zu bytes exhausted\n", gRank, gArenaSize);
    std::exit(1);
  }
  char* p = gArena + gArenaUsed;
  gArenaUsed += bytes;
  return p;
}
#endif

template <class B>
void* P(B& buf, const void* hostPtr) {
#ifdef STRATA_TEST_CUDA
  if (gDevice) {
    const char* h = static_cast<const char*>(hostPtr);
    const size_t off = static_cast<size_t>(h - buf.bytes.data());
    for (Mirror& m : gMirrors)
      if (m.host == &buf.bytes) return m.dev + off;
    char* d = arenaAlloc(buf.bytes.size());
    CUDA_OK(cudaMemcpy(d, buf.bytes.data(), buf.bytes.size(), cudaMemcpyHostToDevice));
    gMirrors.push_back(Mirror{&buf.bytes, d});
    return d + off;
  }
#endif
  (void)buf;
  return const_cast<void*>(hostPtr);
}

void done() {
#ifdef STRATA_TEST_CUDA
  if (!gDevice) return;
  cudaStream_t s = static_cast<cudaStream_t>(gStream);
  for (Mirror& m : gMirrors) {
    // A kernel on the same stream reads the result; only stream order makes it see the collective's output.
    char* check = arenaAlloc(m.host->size());
    const void* src = m.dev;
    if (strata::cudaApi().reduce(check, &src, 1, m.host->size(), strataUint8, strata::ReduceKind::kSum, s) != 0) {
      std::fprintf(stderr, "rank %d: copy kernel failed\n", gRank);
      std::exit(1);
    }
    CUDA_OK(cudaMemcpyAsync(m.host->data(), check, m.host->size(), cudaMemcpyDeviceToHost, s));
  }
  CUDA_OK(cudaStreamSynchronize(s));
  gMirrors.clear();
  gArenaUsed = 0;
#endif
}

double tolerance(strataDataType_t t, int op) {
  if (op != strataAvg) return 0;
  switch (t) {
    case strataFloat64: return 1e-12;
    case strataFloat32: return 1e-5;
    case strataFloat16: return 1e-2;
    case strataBfloat16: return 5e-2;
    case strataFloat8e4m3:
    case strataFloat8e5m2: return 0.5;
    default: return 0;
  }
}

void expect(const char* what, strataDataType_t t, int op, size_t count, bool inPlace, size_t i, double got,
            double want) {
  ++gChecks;
  const double tol = tolerance(t, op);
  const bool ok = (std::isnan(got) && std::isnan(want)) || std::fabs(got - want) <= tol;
  if (!ok) {
    if (gFailures < 20)
      std::fprintf(stderr, "rank %d: %s %s op %d count %zu %s: element %zu is %g, expected %g\n", gRank, what,
                   strata::dtypeName(t), op, count, inPlace ? "in-place" : "out-of-place", i, got, want);
    ++gFailures;
  }
}

double expectedReduction(int op, strataDataType_t t, size_t i, double premul) {
  if (op == strataAvg) {
    if (strata::dtypeIsFloat(t)) return reduced(strataSum, t, i, 1.0) / gSize;
    const double s = reduced(strataSum, t, i, 1.0);
    return std::trunc(s / gSize);
  }
  if (op >= strataNumOps) return reduced(strataSum, t, i, premul);
  return reduced(op, t, i, 1.0);
}

int valueOp(int op) { return op >= strataNumOps ? strataSum : (op == strataAvg ? strataSum : op); }

void testAllReduce(strataComm_t comm, strataDataType_t t, int op, strataRedOp_t rop, double premul, size_t count,
                   bool inPlace) {
  const int vop = valueOp(op);
  Buffer send(count, t), recv(count, t);
  for (size_t i = 0; i < count; ++i) send.set(i, value(vop, t, gRank, i));
  Buffer orig = send;
  Buffer& out = inPlace ? send : recv;
  CHECK_OK(strataAllReduce(P(send, send.at(0)), P(out, out.at(0)), count, t, rop, comm, gStream));
  done();
  for (size_t i = 0; i < count; ++i)
    expect("allreduce", t, op, count, inPlace, i, out.get(i), expectedReduction(op, t, i, premul));
  if (!inPlace && send.bytes != orig.bytes) expect("allreduce sendbuff changed", t, op, count, false, 0, 1, 0);
}

void testReduceScatter(strataComm_t comm, strataDataType_t t, int op, strataRedOp_t rop, double premul, size_t count,
                       bool inPlace) {
  const int vop = valueOp(op);
  const size_t n = static_cast<size_t>(gSize), r = static_cast<size_t>(gRank);
  Buffer send(n * count, t), recv(count, t);
  for (size_t i = 0; i < n * count; ++i) send.set(i, value(vop, t, gRank, i));
  Buffer orig = send;
  void* out = inPlace ? send.at(r * count) : recv.at(0);
  CHECK_OK(
      strataReduceScatter(P(send, send.at(0)), inPlace ? P(send, out) : P(recv, out), count, t, rop, comm, gStream));
  done();
  for (size_t i = 0; i < count; ++i) {
    const double got = inPlace ? send.get(r * count + i) : recv.get(i);
    expect("reducescatter", t, op, count, inPlace, i, got, expectedReduction(op, t, r * count + i, premul));
  }
  if (!inPlace && send.bytes != orig.bytes) expect("reducescatter sendbuff changed", t, op, count, false, 0, 1, 0);
}

void testAllGather(strataComm_t comm, strataDataType_t t, size_t count, bool inPlace) {
  const size_t n = static_cast<size_t>(gSize), r = static_cast<size_t>(gRank);
  Buffer send(count, t), recv(n * count, t);
  for (size_t i = 0; i < count; ++i) send.set(i, value(strataSum, t, gRank, i));
  if (inPlace)
    for (size_t i = 0; i < count; ++i) recv.set(r * count + i, value(strataSum, t, gRank, i));
  const void* in = inPlace ? recv.at(r * count) : send.at(0);
  CHECK_OK(strataAllGather(inPlace ? P(recv, in) : P(send, in), P(recv, recv.at(0)), count, t, comm, gStream));
  done();
  for (size_t j = 0; j < n; ++j)
    for (size_t i = 0; i < count; ++i)
      expect("allgather", t, -1, count, inPlace, j * count + i, recv.get(j * count + i),
             value(strataSum, t, static_cast<int>(j), i));
}

void testBroadcast(strataComm_t comm, strataDataType_t t, size_t count, bool inPlace, int root) {
  Buffer send(count, t), recv(count, t);
  if (gRank == root)
    for (size_t i = 0; i < count; ++i) send.set(i, value(strataSum, t, root, i));
  Buffer& out = inPlace ? send : recv;
  CHECK_OK(strataBroadcast(P(send, send.at(0)), P(out, out.at(0)), count, t, root, comm, gStream));
  done();
  for (size_t i = 0; i < count; ++i)
    expect("broadcast", t, -1, count, inPlace, i, out.get(i), value(strataSum, t, root, i));
}

void testReduce(strataComm_t comm, strataDataType_t t, int op, strataRedOp_t rop, double premul, size_t count,
                bool inPlace, int root) {
  const int vop = valueOp(op);
  Buffer send(count, t), recv(count, t);
  for (size_t i = 0; i < count; ++i) send.set(i, value(vop, t, gRank, i));
  Buffer& out = inPlace ? send : recv;
  CHECK_OK(strataReduce(P(send, send.at(0)), P(out, out.at(0)), count, t, rop, root, comm, gStream));
  done();
  if (gRank == root)
    for (size_t i = 0; i < count; ++i)
      expect("reduce", t, op, count, inPlace, i, out.get(i), expectedReduction(op, t, i, premul));
}

void testAllToAll(strataComm_t comm, strataDataType_t t, size_t count, bool inPlace) {
  const size_t n = static_cast<size_t>(gSize), r = static_cast<size_t>(gRank);
  Buffer send(n * count, t), recv(n * count, t);
  for (size_t i = 0; i < n * count; ++i) send.set(i, value(strataSum, t, gRank, i));
  Buffer& out = inPlace ? send : recv;
  CHECK_OK(strataAllToAll(P(send, send.at(0)), P(out, out.at(0)), count, t, comm, gStream));
  done();
  for (size_t j = 0; j < n; ++j)
    for (size_t i = 0; i < count; ++i)
      expect("alltoall", t, -1, count, inPlace, j * count + i, out.get(j * count + i),
             value(strataSum, t, static_cast<int>(j), r * count + i));
}

void testSendRecv(strataComm_t comm, strataDataType_t t, size_t count) {
  // Ring shift in one group, plus a self send/recv pair.
  const int next = (gRank + 1) % gSize, prev = (gRank + gSize - 1) % gSize;
  Buffer send(count, t), recv(count, t), self(count, t);
  for (size_t i = 0; i < count; ++i) send.set(i, value(strataSum, t, gRank, i));
  CHECK_OK(strataGroupStart());
  CHECK_OK(strataSend(P(send, send.at(0)), count, t, next, comm, gStream));
  CHECK_OK(strataRecv(P(recv, recv.at(0)), count, t, prev, comm, gStream));
  CHECK_OK(strataSend(P(send, send.at(0)), count, t, gRank, comm, gStream));
  CHECK_OK(strataRecv(P(self, self.at(0)), count, t, gRank, comm, gStream));
  CHECK_OK(strataGroupEnd());
  done();
  for (size_t i = 0; i < count; ++i) {
    expect("sendrecv", t, -1, count, false, i, recv.get(i), value(strataSum, t, prev, i));
    expect("sendrecv self", t, -1, count, false, i, self.get(i), value(strataSum, t, gRank, i));
  }
}

std::vector<std::string> splitList(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t c = s.find(sep, pos);
    std::string item = s.substr(pos, c == std::string::npos ? std::string::npos : c - pos);
    if (!item.empty()) out.push_back(item);
    if (c == std::string::npos) break;
    pos = c + 1;
  }
  return out;
}

bool wanted(const std::vector<std::string>& colls, const char* name) {
  if (colls.empty()) return true;
  for (auto& c : colls)
    if (c == name) return true;
  return false;
}

// Counts from this up are "large": what they add over the small counts is pieces, chunks and pipelining, which do
// not depend on the operator, so each (dtype, placement) runs 2 of the 6 operators, rotating so that every operator
// meets every element size; every operator of every dtype runs at the small counts.
constexpr size_t kLargeCount = 65536;

bool opSampled(size_t count, size_t typeIndex, int inPlace, int op) {
  if (count < kLargeCount) return true;
  const int first = static_cast<int>((typeIndex + static_cast<size_t>(inPlace)) % (strataNumOps + 1));
  return op == first || op == (first + 3) % (strataNumOps + 1);
}

void runAll(strataComm_t comm, const std::vector<size_t>& counts, const std::vector<std::string>& colls) {
  for (size_t count : counts) {
    for (size_t ti = 0; ti < std::size(kTypes); ++ti) {
      const strataDataType_t t = kTypes[ti];
      for (int inPlace = 0; inPlace < 2; ++inPlace) {
        for (int op = 0; op <= strataNumOps; ++op) {
          if (!opSampled(count, ti, inPlace, op)) continue;
          // op == strataNumOps: a pre-multiplied sum with scalar 2.
          strataRedOp_t rop = static_cast<strataRedOp_t>(op);
          double premul = 1.0;
          if (op == strataNumOps) {
            premul = 2.0;
            Buffer scalar(1, t);
            scalar.set(0, 2.0);
            CHECK_OK(strataRedOpCreatePreMulSum(&rop, scalar.at(0), t, strataScalarHostImmediate, comm));
          }
          if (wanted(colls, "allreduce")) testAllReduce(comm, t, op, rop, premul, count, inPlace);
          if (wanted(colls, "reducescatter")) testReduceScatter(comm, t, op, rop, premul, count, inPlace);
          if (wanted(colls, "reduce")) testReduce(comm, t, op, rop, premul, count, inPlace, (gSize - 1) / 2);
          if (op == strataNumOps) CHECK_OK(strataRedOpDestroy(rop, comm));
        }
        if (wanted(colls, "allgather")) testAllGather(comm, t, count, inPlace);
        if (wanted(colls, "broadcast")) testBroadcast(comm, t, count, inPlace, gSize - 1);
        if (wanted(colls, "alltoall")) testAllToAll(comm, t, count, inPlace);
      }
      if (wanted(colls, "sendrecv")) testSendRecv(comm, t, count);
    }
    if (wanted(colls, "barrier")) {
      CHECK_OK(strataBarrier(comm, gStream));
      done();
    }
  }
}

#ifdef STRATA_TEST_CUDA
// ---- --no-sync K: calls in flight ---------------------------------------------------------------------------
// K calls issued back to back, alternating between two streams, with no host synchronisation until all are
// issued, so several are in flight at once: the direct path's two parities and epochs and the staged path's
// slots are reused under real asynchrony (the matrix above waits after every call). The sizes cycle through
// every path with the default thresholds (STRATA_GPU_ONESHOT_BYTES 256 KiB, STRATA_GPU_DIRECT_BYTES 4 MiB):
// one-shot, two-shot, two-shot in rounds, and staged (Avg all-reduces and all-gathers never take the direct
// path). Every call has its own buffers and inputs that depend on its index, so a call that read another call's
// data, or completed after its stream said it had, is caught when every result is read back at the end.
struct AsyncCase {
  const char* path;
  bool allGather;
  strataDataType_t t;
  int op;
  size_t count;
};
const AsyncCase kAsyncCases[] = {
    {"one-shot", false, strataFloat32, strataSum, 1000},        // 4 KB
    {"two-shot", false, strataBfloat16, strataMax, 300001},     // 600 KB
    {"rounds", false, strataFloat32, strataSum, 1310723},       // 5 MiB: two rounds of at most 4 MiB
    {"staged", false, strataFloat32, strataAvg, 70001},         // Avg: the host path's rounding
    {"staged allgather", true, strataInt32, strataSum, 70001},  // every all-gather is staged
};

struct AsyncCall {
  const AsyncCase* c;
  bool inPlace;
  size_t shift;  // input of element i is value(.., i + shift): different for every call
  Buffer send, recv;
  char* dsend = nullptr;
  char* drecv = nullptr;
  AsyncCall(const AsyncCase* kase, bool inPlaceCall, size_t shiftBy, size_t sendCount, size_t recvCount)
      : c(kase), inPlace(inPlaceCall), shift(shiftBy), send(sendCount, kase->t), recv(recvCount, kase->t) {}
};

void asyncStress(strataComm_t comm, int calls) {
  const size_t n = static_cast<size_t>(gSize), r = static_cast<size_t>(gRank);
  const size_t ncases = sizeof(kAsyncCases) / sizeof(kAsyncCases[0]);
  cudaStream_t streams[2] = {static_cast<cudaStream_t>(gStream), nullptr};
  CUDA_OK(cudaStreamCreateWithFlags(&streams[1], cudaStreamNonBlocking));
  std::vector<AsyncCall> all;
  all.reserve(static_cast<size_t>(calls));
  long perPath[sizeof(kAsyncCases) / sizeof(kAsyncCases[0])] = {};
  for (int k = 0; k < calls; ++k) {
    const AsyncCase* c = &kAsyncCases[static_cast<size_t>(k) % ncases];
    ++perPath[static_cast<size_t>(k) % ncases];
    const bool inPlace = (static_cast<size_t>(k) / ncases) % 2 == 1;
    const size_t shift = static_cast<size_t>(k) * 1009;
    AsyncCall& a = all.emplace_back(c, inPlace, shift, c->count, c->allGather ? n * c->count : c->count);
    // Inputs: an all-gather's in-place input is this rank's block of the receive buffer.
    for (size_t i = 0; i < c->count; ++i) {
      const double v = value(c->allGather ? strataSum : valueOp(c->op), c->t, gRank, i + shift);
      if (c->allGather && inPlace) a.recv.set(r * c->count + i, v);
      else a.send.set(i, v);
    }
    CUDA_OK(cudaMalloc(&a.dsend, a.send.bytes.size()));
    CUDA_OK(cudaMalloc(&a.drecv, a.recv.bytes.size()));
    CUDA_OK(cudaMemcpy(a.dsend, a.send.bytes.data(), a.send.bytes.size(), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(a.drecv, a.recv.bytes.data(), a.recv.bytes.size(), cudaMemcpyHostToDevice));
  }
  CUDA_OK(cudaDeviceSynchronize());
  // Every rank starts issuing together (a host barrier), then never waits until all K are issued.
  CHECK_OK(strataBarrier(comm, nullptr));
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t k = 0; k < all.size(); ++k) {
    AsyncCall& a = all[k];
    const AsyncCase& c = *a.c;
    strataStream_t s = streams[k % 2];
    const size_t bytes = c.count * strata::dtypeSize(c.t);
    if (c.allGather) {
      const void* in = a.inPlace ? a.drecv + r * bytes : a.dsend;
      CHECK_OK(strataAllGather(in, a.drecv, c.count, c.t, comm, s));
    } else {
      void* out = a.inPlace ? a.dsend : a.drecv;
      CHECK_OK(strataAllReduce(a.dsend, out, c.count, c.t, static_cast<strataRedOp_t>(c.op), comm, s));
    }
  }
  const auto t1 = std::chrono::steady_clock::now();
  CUDA_OK(cudaStreamSynchronize(streams[0]));
  CUDA_OK(cudaStreamSynchronize(streams[1]));
  const auto t2 = std::chrono::steady_clock::now();
  for (AsyncCall& a : all) {
    const AsyncCase& c = *a.c;
    const bool inSend = a.inPlace && !c.allGather;  // an in-place all-reduce's result is in its send buffer
    Buffer& out = inSend ? a.send : a.recv;
    CUDA_OK(cudaMemcpy(out.bytes.data(), inSend ? a.dsend : a.drecv, out.bytes.size(), cudaMemcpyDeviceToHost));
    const char* what = c.allGather ? "no-sync allgather" : "no-sync allreduce";
    if (c.allGather) {
      for (size_t j = 0; j < n; ++j)
        for (size_t i = 0; i < c.count; ++i)
          expect(what, c.t, -1, c.count, a.inPlace, j * c.count + i, out.get(j * c.count + i),
                 value(strataSum, c.t, static_cast<int>(j), i + a.shift));
    } else {
      for (size_t i = 0; i < c.count; ++i)
        expect(what, c.t, c.op, c.count, a.inPlace, i, out.get(i), expectedReduction(c.op, c.t, i + a.shift, 1.0));
    }
    CUDA_OK(cudaFree(a.dsend));
    CUDA_OK(cudaFree(a.drecv));
  }
  CUDA_OK(cudaStreamDestroy(streams[1]));
  if (gRank == 0) {
    const auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
    std::printf("no-sync: %d calls in flight on 2 streams, issued in %.1f ms, complete %.1f ms later; per path:", calls,
                ms(t1 - t0), ms(t2 - t1));
    for (size_t i = 0; i < ncases; ++i) std::printf(" %s %ld", kAsyncCases[i].path, perPath[i]);
    std::printf("\n");
  }
}

// ---- CUDA graphs (STRATA_GPU_EXECUTOR=1) ---------------------------------------------------------------------
// Four executor calls captured once into a CUDA graph (a Simple all-reduce larger than the FIFOs, an LL bf16
// all-gather, an in-place float Avg all-reduce whose input is copied aside inside the graph, an in-place send/recv
// ring: sent to the next rank and received from the previous in one buffer, the send copied aside), then the graph
// launched `replays` times, each time on new inputs uploaded on the stream before the launch; every result is read
// back and checked after every replay. An uncaptured call runs between replays.
void graphReplay(strataComm_t comm, int replays) {
  const size_t n = static_cast<size_t>(gSize);
  constexpr size_t kAr = 300007, kAg = 33, kAvg = 1003, kRing = 70001;
  cudaStream_t s = static_cast<cudaStream_t>(gStream);
  Buffer x(kAr, strataFloat32), y(kAr, strataFloat32), agIn(kAg, strataBfloat16), ag(kAg * n, strataBfloat16),
      avg(kAvg, strataFloat32), ring(kRing, strataInt32);
  char *dx, *dy, *dagIn, *dag, *davg, *dring;
  CUDA_OK(cudaMalloc(&dx, x.bytes.size()));
  CUDA_OK(cudaMalloc(&dy, y.bytes.size()));
  CUDA_OK(cudaMalloc(&dagIn, agIn.bytes.size()));
  CUDA_OK(cudaMalloc(&dag, ag.bytes.size()));
  CUDA_OK(cudaMalloc(&davg, avg.bytes.size()));
  CUDA_OK(cudaMalloc(&dring, ring.bytes.size()));
  const int next = (gRank + 1) % gSize, prev = (gRank + gSize - 1) % gSize;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  const strataResult_t r1 = strataAllReduce(dx, dy, kAr, strataFloat32, strataSum, comm, gStream);
  const strataResult_t r2 = strataAllGather(dagIn, dag, kAg, strataBfloat16, comm, gStream);
  const strataResult_t r3 = strataAllReduce(davg, davg, kAvg, strataFloat32, strataAvg, comm, gStream);
  strataGroupStart();
  strataSend(dring, kRing, strataInt32, next, comm, gStream);
  strataRecv(dring, kRing, strataInt32, prev, comm, gStream);
  const strataResult_t r4 = strataGroupEnd();
  const std::string msg = strataGetLastError(comm);
  CUDA_OK(cudaStreamEndCapture(s, &graph));
  if (r1 != strataSuccess || r2 != strataSuccess || r3 != strataSuccess || r4 != strataSuccess) {
    std::fprintf(stderr, "rank %d: graph capture: a captured call returned %d/%d/%d/%d: %s\n", gRank, r1, r2, r3, r4,
                 msg.c_str());
    std::exit(1);
  }
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  const auto t0 = std::chrono::steady_clock::now();
  for (int k = 0; k < replays; ++k) {
    const size_t shift = static_cast<size_t>(k) * 17;
    for (size_t i = 0; i < kAr; ++i) x.set(i, value(strataSum, strataFloat32, gRank, i + shift));
    for (size_t i = 0; i < kAg; ++i) agIn.set(i, value(strataSum, strataBfloat16, gRank, i + shift));
    for (size_t i = 0; i < kAvg; ++i) avg.set(i, value(strataSum, strataFloat32, gRank, i + 2 * shift));
    for (size_t i = 0; i < kRing; ++i) ring.set(i, value(strataSum, strataInt32, gRank, i + 3 * shift));
    CUDA_OK(cudaMemcpyAsync(dring, ring.bytes.data(), ring.bytes.size(), cudaMemcpyHostToDevice, s));
    CUDA_OK(cudaMemcpyAsync(dx, x.bytes.data(), x.bytes.size(), cudaMemcpyHostToDevice, s));
    CUDA_OK(cudaMemcpyAsync(dagIn, agIn.bytes.data(), agIn.bytes.size(), cudaMemcpyHostToDevice, s));
    CUDA_OK(cudaMemcpyAsync(davg, avg.bytes.data(), avg.bytes.size(), cudaMemcpyHostToDevice, s));
    CUDA_OK(cudaGraphLaunch(exec, s));
    CUDA_OK(cudaMemcpyAsync(y.bytes.data(), dy, y.bytes.size(), cudaMemcpyDeviceToHost, s));
    CUDA_OK(cudaMemcpyAsync(ag.bytes.data(), dag, ag.bytes.size(), cudaMemcpyDeviceToHost, s));
    CUDA_OK(cudaMemcpyAsync(avg.bytes.data(), davg, avg.bytes.size(), cudaMemcpyDeviceToHost, s));
    CUDA_OK(cudaMemcpyAsync(ring.bytes.data(), dring, ring.bytes.size(), cudaMemcpyDeviceToHost, s));
    CUDA_OK(cudaStreamSynchronize(s));
    for (size_t i = 0; i < kAr; ++i)
      expect("graph allreduce", strataFloat32, strataSum, kAr, false, i, y.get(i),
             expectedReduction(strataSum, strataFloat32, i + shift, 1.0));
    for (size_t j = 0; j < n; ++j)
      for (size_t i = 0; i < kAg; ++i)
        expect("graph allgather", strataBfloat16, strataSum, kAg, false, j * kAg + i, ag.get(j * kAg + i),
               value(strataSum, strataBfloat16, static_cast<int>(j), i + shift));
    for (size_t i = 0; i < kAvg; ++i)
      expect("graph avg", strataFloat32, strataAvg, kAvg, true, i, avg.get(i),
             expectedReduction(strataAvg, strataFloat32, i + 2 * shift, 1.0));
    for (size_t i = 0; i < kRing; ++i)
      expect("graph sendrecv", strataInt32, strataSum, kRing, true, i, ring.get(i),
             value(strataSum, strataInt32, prev, i + 3 * shift));
    // An uncaptured executor call between replays, on the same FIFOs.
    CHECK_OK(strataAllReduce(dx, dy, 1001, strataFloat32, strataMax, comm, gStream));
  }
  CUDA_OK(cudaStreamSynchronize(s));
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  CUDA_OK(cudaGraphExecDestroy(exec));
  CUDA_OK(cudaGraphDestroy(graph));
  for (char* p : {dx, dy, dagIn, dag, davg, dring}) CUDA_OK(cudaFree(p));
  if (gRank == 0)
    std::printf(
        "graph capture: 4 executor calls captured, %d replays checked (%.1f ms in all, uploads and checks "
        "included)\n",
        replays, ms);
}

// ---- --abort-stopped-peer (STRATA_GPU_EXECUTOR=1) -------------------------------------------------------------
// The last rank stops itself (SIGSTOP) after a warm-up; the others enqueue a 64 MiB all-reduce on device buffers,
// which cannot complete, wait 300 ms, then call strataCommAbort. Checked on every other rank: strataCommAbort
// returns within 2 s, and the stream completes within 2 s after it (the executor's kernels poll the abort word and
// leave). Rank 0 then resumes the stopped rank (SIGCONT), which aborts its communicator too and exits. Prints
// "abort-stopped-peer: PASS" or what went over its bound; exit status 0 only on rank's success.
int abortStoppedPeer(strataComm_t comm) {
  const int last = gSize - 1;
  if (gSize < 2) {
    std::fprintf(stderr, "--abort-stopped-peer needs at least 2 ranks\n");
    return 2;
  }
  int64_t mine = static_cast<int64_t>(getpid());
  std::vector<int64_t> pids(static_cast<size_t>(gSize));
  CHECK_OK(strataAllGather(&mine, pids.data(), 1, strataInt64, comm, nullptr));
  constexpr size_t kCount = size_t{16} << 20;  // 64 MiB of floats: the executor's Simple protocol, many pieces
  float* d = nullptr;
  cudaStream_t s = static_cast<cudaStream_t>(gStream);
  CUDA_OK(cudaMalloc(&d, kCount * sizeof(float)));
  CUDA_OK(cudaMemset(d, 0, kCount * sizeof(float)));
  CHECK_OK(strataAllReduce(d, d, 1024, strataFloat32, strataSum, comm, gStream));  // warm-up: the executor set up
  CUDA_OK(cudaStreamSynchronize(s));
  CHECK_OK(strataBarrier(comm, nullptr));
  if (gRank == last) {
    raise(SIGSTOP);  // until rank 0's SIGCONT
    strataCommAbort(comm);
    std::printf("rank %d: resumed, communicator aborted\n", gRank);
    return 0;
  }
  using Clock = std::chrono::steady_clock;
  const auto seconds = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the last rank has stopped
  const strataResult_t issued = strataAllReduce(d, d, kCount, strataFloat32, strataSum, comm, gStream);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const bool pendingBefore = cudaStreamQuery(s) == cudaErrorNotReady;
  const auto t0 = Clock::now();
  strataCommAbort(comm);
  const auto t1 = Clock::now();
  // The stream, polled with its own bound: a kernel that never leaves must not hang the test.
  cudaError_t q = cudaErrorNotReady;
  while ((q = cudaStreamQuery(s)) == cudaErrorNotReady && seconds(t1, Clock::now()) < 10)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const auto t2 = Clock::now();
  const double abortS = seconds(t0, t1), streamS = seconds(t1, t2);
  const bool ok = issued == strataSuccess && pendingBefore && abortS < 2.0 && streamS < 2.0;
  std::printf(
      "rank %d: abort-stopped-peer: %s (all-reduce issued: %s; pending when aborted: %s; strataCommAbort "
      "%.3f s; stream done %.3f s later: %s)\n",
      gRank, ok ? "PASS" : "FAIL", strataGetErrorString(issued), pendingBefore ? "yes" : "no", abortS, streamS,
      q == cudaErrorNotReady ? "still running" : cudaGetErrorString(q));
  if (gRank == 0) kill(static_cast<pid_t>(pids[static_cast<size_t>(last)]), SIGCONT);
  if (q != cudaErrorNotReady) cudaFree(d);  // else the kernel may still write it: left to process exit
  return ok ? 0 : 1;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  std::vector<size_t> counts = {0, 1, 7, 1023, 1048576 + 3};
  std::vector<std::string> colls;
  std::vector<std::string> algos = {""};
  int fakeHosts = 0;          // > 0: the per-algorithm communicators see K ranks per "host" (STRATA_HOSTID)
  int noSync = 0;             // > 0: --no-sync K, the asynchronous stress instead of the matrix (device only)
  int graphReplays = 5;       // --graph K: replays of the captured graph (device, STRATA_GPU_EXECUTOR=1)
  bool abortStopped = false;  // --abort-stopped-peer (device, STRATA_GPU_EXECUTOR=1)
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--counts" && i + 1 < argc) {
      counts.clear();
      for (auto& c : splitList(argv[++i], ',')) counts.push_back(std::strtoull(c.c_str(), nullptr, 10));
    } else if (a == "--colls" && i + 1 < argc) {
      colls = splitList(argv[++i], ',');
    } else if (a == "--algos" && i + 1 < argc) {
      algos = splitList(argv[++i], ';');
    } else if (a == "--fake-hosts" && i + 1 < argc) {
      fakeHosts = std::atoi(argv[++i]);
    } else if (a == "--no-sync" && i + 1 < argc) {
      noSync = std::atoi(argv[++i]);
      if (noSync < 1) {
        std::fprintf(stderr, "--no-sync K: K must be a number of calls >= 1, got '%s'\n", argv[i]);
        return 2;
      }
    } else if (a == "--abort-stopped-peer") {
      abortStopped = true;
    } else if (a == "--graph" && i + 1 < argc) {
      graphReplays = std::atoi(argv[++i]);
      if (graphReplays < 1) {
        std::fprintf(stderr, "--graph K: K must be a number of replays >= 1, got '%s'\n", argv[i]);
        return 2;
      }
    } else if (a == "--device" || a == "--probe") {
#ifdef STRATA_TEST_CUDA
      int ndev = 0;
      const cudaError_t e = cudaGetDeviceCount(&ndev);
      if (e != cudaSuccess || ndev == 0) {
        std::printf("SKIPPED: no usable CUDA device (%s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return 77;
      }
      if (a == "--probe") return 0;
      gDevice = true;
#else
      std::printf("SKIPPED: built without CUDA\n");
      return 77;
#endif
    } else {
      std::fprintf(stderr,
                   "usage: %s [--counts a,b] [--colls x,y] [--algos 'allreduce:ring;allreduce:oneshot'] "
                   "[--fake-hosts K] [--device [--no-sync K] [--graph K] [--abort-stopped-peer]] [--probe]\n",
                   argv[0]);
      return 2;
    }
  }
  if (noSync > 0 && !gDevice) {
    std::fprintf(stderr, "--no-sync K needs --device: host calls return when they are complete\n");
    return 2;
  }
  if (abortStopped && !gDevice) {
    std::fprintf(stderr, "--abort-stopped-peer needs --device: it stops a rank with device work in flight\n");
    return 2;
  }
  strataComm_t world;
  CHECK_OK(strataCommInitFromEnv(&world));
  CHECK_OK(strataCommUserRank(world, &gRank));
  CHECK_OK(strataCommCount(world, &gSize));
#ifdef STRATA_TEST_CUDA
  if (gDevice) {
    // Ranks share the GPUs round-robin by local rank (one GPU: every rank on it).
    int ndev = 1;
    CUDA_OK(cudaGetDeviceCount(&ndev));
    const char* lr = std::getenv("LOCAL_RANK");
    CUDA_OK(cudaSetDevice((lr ? std::atoi(lr) : gRank) % ndev));
    cudaStream_t s;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    gStream = s;
    size_t largest = 0;
    if (noSync == 0)  // --no-sync allocates its own buffers: the arena holds the capture probe only
      for (size_t c : counts) largest = std::max(largest, c);
    // Per call at most: send and recv of n * count elements of 8 bytes, each mirrored and copied once more.
    gArenaSize = 4 * (largest * 8 * static_cast<size_t>(gSize) + 4096) + (1 << 20);
    CUDA_OK(cudaMalloc(&gArena, gArenaSize));
    // Capture: with the device executor on, captured calls replay (graphReplay); without it, a captured collective
    // is refused with a clear error and the capture is not broken.
    std::vector<char> one(64, 0);
    struct Bytes {
      std::vector<char> bytes;
    } probe{one};
    void* d = P(probe, probe.bytes.data());
    CHECK_OK(strataAllReduce(d, d, 4, strataFloat32, strataSum, world, gStream));
    done();
    const char* ex = std::getenv("STRATA_GPU_EXECUTOR");  // the executor is on unless this says 0
    if (!(ex && std::string(ex) == "0")) {
      gMirrors.clear();
      gArenaUsed = 0;
      graphReplay(world, graphReplays);
    } else {
      // One rank: a collective is a device copy (in place: nothing), which a graph captures as it is. More ranks
      // without the executor: refused with a clear error, and the capture is not broken.
      cudaGraph_t graph = nullptr;
      CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
      d = P(probe, probe.bytes.data());
      const strataResult_t r = strataAllReduce(d, d, 4, strataFloat32, strataSum, world, gStream);
      const std::string msg = strataGetLastError(world);
      CUDA_OK(cudaStreamEndCapture(s, &graph));
      if (graph) cudaGraphDestroy(graph);
      gMirrors.clear();
      gArenaUsed = 0;
      ++gChecks;
      const bool ok =
          gSize == 1 ? r == strataSuccess : r == strataInvalidUsage && msg.find("CUDA graph") != std::string::npos;
      if (!ok) {
        std::fprintf(stderr, "rank %d: a captured collective returned %d (%s), expected %s\n", gRank,
                     static_cast<int>(r), msg.c_str(), gSize == 1 ? "success (a device copy)" : "strataInvalidUsage");
        ++gFailures;
      } else if (gRank == 0) {
        std::printf("graph capture: strataAllReduce returned %s%s%s\n", strataGetErrorString(r),
                    msg.empty() ? "" : ": ", msg.c_str());
      }
    }
  }
#endif
  if (fakeHosts > 0) {
    // Ranks r/K share a host id: hierarchical plans see several hosts, and ranks on different "hosts"
    // talk over the network transport, as on a cluster.
    setenv("STRATA_HOSTID", ("coll-test-host" + std::to_string(gRank / fakeHosts)).c_str(), 1);
    if (algos.size() == 1 && algos[0].empty()) algos[0] = "barrier:dissemination";  // a fresh communicator
  }
#ifdef STRATA_TEST_CUDA
  if (abortStopped) {
    return abortStoppedPeer(world);  // the communicator is aborted: nothing else runs on it
  }
  if (noSync > 0) {
    asyncStress(world, noSync);
    algos.clear();  // the stress replaces the matrix
  }
#endif
  for (const std::string& algo : algos) {
    strataComm_t comm = world;
    if (!algo.empty()) {
      // A communicator per forced algorithm: the id travels over the world communicator.
      setenv("STRATA_ALGO", algo.c_str(), 1);
      strataUniqueId id;
      if (gRank == 0) CHECK_OK(strataGetUniqueId(&id));
      CHECK_OK(strataBroadcast(&id, &id, sizeof(id), strataUint8, 0, world, nullptr));
      CHECK_OK(strataCommInitRank(&comm, gSize, id, gRank));
    }
    runAll(comm, counts, colls);
    if (comm != world) CHECK_OK(strataCommDestroy(comm));
  }
  // Everyone learns the total number of failures.
  long total[2] = {gFailures, gChecks};
  CHECK_OK(strataAllReduce(total, total, 2, strataInt64, strataSum, world, nullptr));
  strataResult_t asyncErr = strataSuccess;
  CHECK_OK(strataCommGetAsyncError(world, &asyncErr));
  if (asyncErr != strataSuccess) {
    std::fprintf(stderr, "rank %d: asynchronous error: %s\n", gRank, strataGetErrorString(asyncErr));
    total[0] += 1;
  }
  CHECK_OK(strataCommDestroy(world));
  if (gRank == 0)
    std::printf("strata_coll_test: %d ranks%s, %ld checks, %ld wrong\n", gSize, gDevice ? " (device buffers)" : "",
                total[1], total[0]);
  return total[0] == 0 ? 0 : 1;
}
