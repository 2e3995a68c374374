// The device protocol, written once for the GPU and for CPU threads: per-peer FIFOs with the Simple and LL
// protocols, NCCL-style primitives over them, and the executor that runs a lowered plan's lanes (device/dev_plan.h).
//
// Everything here is a template over an execution policy P (device/device_policy.cuh: DevicePolicy under nvcc,
// device/host_policy.h: HostPolicy for CPU threads), so the unit tests run, under ThreadSanitizer, the very code
// a kernel runs: P supplies the atomics and fences, the clock, the back-off and the thread group of a lane (a
// thread block on the GPU, one thread on the CPU).
//
// Memory (one ConnMem per ordered pair of ranks, held by the receiver and mapped by the sender: CUDA IPC on the
// GPU, a shared mapping in the CPU tests):
//   ctrl.head   pieces the sender has posted (Simple; written by the sender, read by the receiver)
//   ctrl.tail   pieces the receiver has consumed (both protocols; written by the receiver, read by the sender)
//   simple[s]   nslots slots: a 16-byte header (the byte offset, 0..15, of the piece after it), then the piece
//   ll[s]       nslots slots of LL lines: 8 bytes each, 4 bytes of data and a 4-byte flag, stored as one 64-bit
//               word, so a line is never seen half written; flag = low 32 bits of (step + 1)
//   ll128[s]    (when LL128 is on) nslots slots of LL128 lines: 128 bytes each, 120 bytes of data and an 8-byte
//               flag = step + 1, written by P::kLineThreads threads at once (see OpRunner::ll128)
// Step counters (pieces sent / received on each connection) live in the rank's own memory and are advanced by
// the executor, never chosen by the host, so a captured kernel replays correctly.
//
// Both ends split each op into pieces the same way (the plan's ops pair up with equal counts) and choose the
// protocol from the op's byte count the same way (ProtoConfig, which the set-up exchange makes equal on every
// rank), so neither sizes nor protocols travel.
//
// Every wait polls the abort word (set by strataCommAbort or by the host's peer watch), the rank's stop word (set
// by a lane of this rank that failed) and a deadline; a wait that ends that way records why in the Failure word
// and the lane returns.
//
// The elements and operators are in device/elements.h, the 16-byte vectors of the data loops in device/vec16.h, the
// line protocols (LL, LL128, the send/recv header) in device/proto_lines.h.
//
// Linkage: like util/dtype_codec.h (which this uses), everything is in an unnamed namespace: include this from a
// .cc/.cu file, never from an inline function with external linkage.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "collectives/plan.h"
#include "device/dev_types.h"
#include "device/elements.h"
#include "device/vec16.h"
#include "kernels/reduce_kind.h"
#include "strata/strata.h"

#if defined(__CUDACC__)
#define STRATA_HD __host__ __device__
#else
#define STRATA_HD
#endif

namespace strata::devproto {
namespace {

// ---- the policy-generic pieces --------------------------------------------------------------------------------

/// Records the rank's first failure (the first lane to get here wins) and raises the stop word, so the other lanes
/// stop too. Returns `code`. `expected` and `got`: kFailMismatch's sizes.
template <class P>
STRATA_HD_INLINE uint32_t recordStop(const LaneArgs& a, uint32_t code, int op, int peer, uint32_t what,
                                     uint64_t expected = 0, uint64_t got = 0) {
  if (P::casU32(&a.failure->code, kFailNone, code)) {
    a.failure->lane = a.lane;
    a.failure->op = op;
    a.failure->peer = peer;
    a.failure->waitingFor = what;
    a.failure->expected = expected;
    a.failure->got = got;
  }
  P::storeRelaxed(a.stopWord, 1u);
  return code;
}

/// Waits until `ready()`; polls the stop conditions every 64 tries. Returns kFailNone or why it stopped, after
/// recording it. Only the group's leader calls it for Simple waits; for LL every thread polls its own lines.
template <class P, class Ready>
STRATA_HD_INLINE uint32_t waitFor(const P& p, const LaneArgs& a, uint64_t deadlineNs, int op, int peer, uint32_t what,
                                  Ready ready) {
  uint32_t spins = 0;
  while (!ready()) {
    if ((++spins & 63) == 0) {
      uint32_t code = kFailNone;
      if (P::loadRelaxed(a.abortWord) != 0 || P::loadRelaxed(a.stopWord) != 0) code = kFailAborted;
      else if (deadlineNs != 0 && P::nowNs() > deadlineNs) code = kFailTimedOut;
      if (code != kFailNone) return recordStop<P>(a, code, op, peer, what);
    }
    p.backoff(spins);
  }
  return kFailNone;
}

/// waitFor for a warp that waits together (LL128's lines): every thread of the warp calls it, `ready()` is this
/// thread's part, and the warp goes on once every thread's part is ready, or stops together (a vote), so that the
/// warp never splits across its votes. Returns kFailNone or why it stopped (recorded by a thread that saw it).
template <class P, class Ready>
STRATA_HD_INLINE uint32_t waitWarp(const P& p, const LaneArgs& a, uint64_t deadlineNs, int op, int peer, uint32_t what,
                                   Ready ready) {
  uint32_t spins = 0;
  while (!P::warpAll(ready())) {
    if ((++spins & 63) == 0) {
      uint32_t code = kFailNone;
      if (P::loadRelaxed(a.abortWord) != 0 || P::loadRelaxed(a.stopWord) != 0) code = kFailAborted;
      else if (deadlineNs != 0 && P::nowNs() > deadlineNs) code = kFailTimedOut;
      if (P::warpAny(code != kFailNone))
        return code != kFailNone ? recordStop<P>(a, code, op, peer, what) : kFailAborted;
    }
    p.backoff(spins);
  }
  return kFailNone;
}

/// One op of a lane, typed. Simple: the leader waits for the slots, the group moves the data, the leader posts.
/// LL: every thread waits for its own lines.
template <class P, class E, ReduceKind K>
struct OpRunner {
  using S = typename E::Storage;
  const P& p;
  const LaneArgs& a;    // read where it is (on the GPU, the launch's array in device memory): never copied
  uint64_t deadlineNs;  // P::nowNs() past this: time out (0: none)
  int opIndex;
  FactorOf<E> factor;  // the pre-multiplication's factor (factorOf), held in a register

  STRATA_HD_INLINE S* buf(uint32_t b, uint64_t off) const {
    return static_cast<S*>(a.bufTable != nullptr ? a.bufTable[b] : a.bufs[b]) + off;
  }
  STRATA_HD_INLINE S reduce(S msg, S src) const { return E::narrow(combine<K>(E::widen(msg), E::widen(src))); }

  // What an op computes per element from its message element m (when it receives) and its source element s (when it
  // reads one): m (+) s when it reduces, else m when it receives, else s, the source pre-multiplied where the op asks
  // for it. That value goes to the op's destination and to its outgoing message, whichever it has.
  STRATA_HD_INLINE S value(S m, S s, bool hasIn, bool red, bool scale) const {
    if (scale) s = preScale<E>(s, factor);
    return red ? reduce(m, s) : (hasIn ? m : s);
  }
  static STRATA_HD_INLINE bool readsSrc(OpKind k) {
    return k == OpKind::kSend || k == OpKind::kRecvReduce || k == OpKind::kRecvReduceSend ||
           k == OpKind::kRecvReduceCopySend || k == OpKind::kCopySend;
  }
  STRATA_HD_INLINE bool scaled(const DevOp& o) const {
    return o.srcBuf == kBufSend && a.bufTable == nullptr && (a.preMul != 1.0 || a.preMulInt != 1);
  }

  static STRATA_HD_INLINE bool writesDst(OpKind k) {
    return k == OpKind::kRecv || k == OpKind::kRecvReduce || k == OpKind::kRecvReduceCopySend ||
           k == OpKind::kRecvCopySend || k == OpKind::kCopySend;
  }

  // The sender's wait for a free slot of peer's FIFO at step sstep (leader only).
  STRATA_HD_INLINE uint32_t waitSlot(int peer, void* smem, uint64_t sstep) const {
    ConnCtrl* c = connCtrl(smem);
    return waitFor(p, a, deadlineNs, opIndex, peer, 0, [&] { return sstep - P::loadAcquire(&c->tail) < a.cfg.nslots; });
  }

  static STRATA_HD_INLINE bool reduces(OpKind k) {
    return k == OpKind::kRecvReduce || k == OpKind::kRecvReduceSend || k == OpKind::kRecvReduceCopySend ||
           k == OpKind::kReduceLocal;
  }

  // ---- the data loops ----
  // Every op that moves data computes, per element, v = in (+) src when it reduces, else in when it receives, else
  // src (pre-multiplied where the op asks for it), and writes v to d and/or out. move() does that for n elements:
  // the writes (d and out, which the caller gives the same offset mod 16) go in aligned 16-byte vectors from the
  // first aligned byte on, kUnroll of them per thread in flight; a read at another offset mod 16 takes each vector
  // from two aligned loads shifted in registers; the few elements before and after the vectors (kMaxEdgeElems at
  // most) go one by one, one pass of the group. No read goes outside its pointer's n elements.
  static constexpr uint32_t kVecElems = 16 / sizeof(S);

  STRATA_HD_INLINE Vec16 valueVec(const Vec16& m, const Vec16& s, bool hasIn, bool red, bool scale) const {
    if (!red && (hasIn || !scale)) return hasIn ? m : s;  // a copy moves the bits
    // Element e of a vector is taken from its words by shifts (no array, no local memory).
    Vec16 out = s;
    if (red) {
      STRATA_UNROLL
      for (uint32_t e = 0; e < kVecElems; ++e) {
        const S x = elemAt<S>(s, e);
        setElem<S>(out, e, reduce(elemAt<S>(m, e), scale ? preScale<E>(x, factor) : x));
      }
    } else {
      STRATA_UNROLL
      for (uint32_t e = 0; e < kVecElems; ++e) setElem<S>(out, e, preScale<E>(elemAt<S>(s, e), factor));
    }
    return out;
  }

  // An element of a received piece, read by bytes: the sender placed the piece by its own buffer's offset mod 16,
  // which for send/recv (each end moves the widest element its own bytes and address allow) need not be a multiple
  // of this end's element size. Only the edges read this way; the vectors load aligned blocks and shift.
  static STRATA_HD_INLINE S receivedElem(const S* in, uint64_t i) {
    S v;
    std::memcpy(&v, reinterpret_cast<const char*>(in) + i * sizeof(S), sizeof(S));
    return v;
  }

  STRATA_HD_INLINE void moveOne(const S* in, const S* src, S* d, S* out, uint64_t i, bool red, bool scale) const {
    const S v = value(in ? receivedElem(in, i) : S{}, src ? src[i] : S{}, in != nullptr, red, scale);
    if (d) d[i] = v;
    if (out) out[i] = v;
  }

  STRATA_HD_INLINE void move(const S* in, const S* src, S* d, S* out, uint64_t n, bool red, bool scale) const {
    const uint64_t bytes = n * sizeof(S);
    uint64_t head = (16u - mis16(d ? static_cast<const void*>(d) : out)) & 15u;
    const uint32_t sIn = in ? mis16(reinterpret_cast<const char*>(in) + head) : 0;
    const uint32_t sSrc = src ? mis16(reinterpret_cast<const char*>(src) + head) : 0;
    if (sIn > head || sSrc > head) head += 16;  // a shifted read's first block would start before its pointer
    uint64_t nvec = bytes > head ? (bytes - head) / 16 : 0;
    for (const uint32_t sh : {sIn, sSrc}) {  // a shifted read's last block must end within its pointer's bytes
      if (sh == 0) continue;
      const uint64_t room = bytes + sh >= head + 16 ? (bytes + sh - head - 16) / 16 : 0;
      nvec = room < nvec ? room : nvec;
    }
    const uint64_t headElems = (head < bytes ? head : bytes) / sizeof(S);
    const uint64_t tailFrom = headElems + nvec * kVecElems;
    const uint64_t edge = headElems + (n - tailFrom);
    if constexpr (P::kMinThreads >= kMaxEdgeElems) {
      if (p.tid() < edge) {
        const uint64_t i = p.tid() < headElems ? p.tid() : tailFrom + (p.tid() - headElems);
        moveOne(in, src, d, out, i, red, scale);
      }
    } else {
      for (uint64_t j = p.tid(); j < edge; j += p.nthreads())
        moveOne(in, src, d, out, j < headElems ? j : tailFrom + (j - headElems), red, scale);
    }
    if (nvec == 0) return;
    const char* inB = in ? reinterpret_cast<const char*>(in) + head - sIn : nullptr;
    const char* srcB = src ? reinterpret_cast<const char*>(src) + head - sSrc : nullptr;
    Vec16* dB = d ? reinterpret_cast<Vec16*>(reinterpret_cast<char*>(d) + head) : nullptr;
    Vec16* outB = out ? reinterpret_cast<Vec16*>(reinterpret_cast<char*>(out) + head) : nullptr;
    // sass-check: data loops begin (perf/sass_check.py checks the machine code made from the lines up to "end")
#if defined(STRATA_SCALARISE_DATA_LOOPS)
    // perf/sass_check.sh's self-test only: the vectors moved element by element, as a scalarised loop would; the
    // machine-code check must fail on it.
    for (uint64_t v = p.tid(); v < nvec; v += p.nthreads())
      for (uint32_t e = 0; e < kVecElems; ++e) moveOne(in, src, d, out, headElems + v * kVecElems + e, red, scale);
#else
    const bool hasIn = in != nullptr;
    // A pass: each warp takes kUnroll * kWarp consecutive vectors, its threads interleaved, so a load instruction
    // of the warp reads kWarp consecutive vectors.
    const uint64_t perPass = static_cast<uint64_t>(kUnroll) * p.nthreads();
    const uint64_t mine = (p.tid() / P::kWarp) * (P::kWarp * kUnroll) + p.tid() % P::kWarp;
    uint64_t v0 = 0;
    for (; v0 + perPass <= nvec; v0 += perPass) {
      Vec16 m[kUnroll] = {}, s[kUnroll] = {};
      STRATA_UNROLL
      for (uint32_t u = 0; u < kUnroll; ++u) {
        const uint64_t v = v0 + mine + u * P::kWarp;
        if (inB) m[u] = readVec<P>(inB, sIn, v);
        if (srcB) s[u] = readVec<P>(srcB, sSrc, v);
      }
      STRATA_UNROLL
      for (uint32_t u = 0; u < kUnroll; ++u) {
        const uint64_t v = v0 + mine + u * P::kWarp;
        const Vec16 r = valueVec(m[u], s[u], hasIn, red, scale);
        if (dB) P::store16(dB + v, r);
        if (outB) P::store16(outB + v, r);
      }
    }
    for (uint64_t v = v0 + p.tid(); v < nvec; v += p.nthreads()) {
      const Vec16 m = inB ? readVec<P>(inB, sIn, v) : Vec16{};
      const Vec16 s = srcB ? readVec<P>(srcB, sSrc, v) : Vec16{};
      const Vec16 r = valueVec(m, s, hasIn, red, scale);
      if (dB) P::store16(dB + v, r);
      if (outB) P::store16(outB + v, r);
    }
#endif
    // sass-check: data loops end
  }

  // ---- local ops ----
  STRATA_HD_INLINE uint32_t local(const DevOp& o) const {
    S* dst = buf(o.dstBuf, o.dstOff);
    const S* src = buf(o.srcBuf, o.srcOff);
    const bool scale = scaled(o);
    if (static_cast<OpKind>(o.kind) == OpKind::kCopy) {
      if (src == dst && !scale) return kFailNone;
      move(nullptr, src, dst, nullptr, o.count, false, scale);
    } else {  // kReduceLocal: dst = dst (+) src
      move(dst, src, dst, nullptr, o.count, true, scale);
    }
    p.sync();
    return kFailNone;
  }

  // ---- Simple ----
  // The leader waits for the piece (receiving) and for a free slot (sending), then the group moves the piece. The
  // sender places its piece at the offset mod 16 of the user's memory it writes (or else reads), and says so in the
  // slot's header, which the receiver's leader reads and broadcasts with its verdict.
  STRATA_HD_INLINE uint32_t simple(const DevOp& o) const {
    const OpKind kind = static_cast<OpKind>(o.kind);
    const bool recvs = o.recvPeer >= 0, sends = o.sendPeer >= 0;
    const uint64_t pieceElems = a.cfg.pieceBytes / sizeof(S);
    S* dst = writesDst(kind) ? buf(o.dstBuf, o.dstOff) : nullptr;
    const S* srcAll = readsSrc(kind) ? buf(o.srcBuf, o.srcOff) : nullptr;
    const bool red = reduces(kind), scale = srcAll != nullptr && scaled(o);
    for (uint64_t base = 0; base < o.count; base += pieceElems) {
      const uint64_t n = o.count - base < pieceElems ? o.count - base : pieceElems;
      void* rmem = recvs ? a.recvMem[o.recvPeer] : nullptr;
      void* smem = sends ? a.sendMem[o.sendPeer] : nullptr;
      const uint64_t rstep = recvs ? a.recvStep[o.recvPeer] : 0;
      const uint64_t sstep = sends ? a.sendStep[o.sendPeer] : 0;
      S* d = dst ? dst + base : nullptr;
      const S* src = srcAll ? srcAll + base : nullptr;
      const uint32_t outOff = d ? mis16(d) : src ? mis16(src) : 0;
      uint32_t word = kFailNone;  // the leader's verdict, and bits 8..11: the received piece's offset
      if (p.tid() == 0) {
        if (recvs) {
          ConnCtrl* c = connCtrl(rmem);
          word = waitFor(p, a, deadlineNs, opIndex, o.recvPeer, 1, [&] { return P::loadAcquire(&c->head) > rstep; });
          if (word == kFailNone)
            word = (P::loadRelaxed(reinterpret_cast<const uint32_t*>(simpleSlot(rmem, a.cfg, rstep))) & 15u) << 8;
        }
        if (sends && (word & 0xffu) == kFailNone) {
          const uint32_t failed = waitSlot(o.sendPeer, smem, sstep);
          if (failed != kFailNone) word = failed;
          else P::storeRelaxed(reinterpret_cast<uint32_t*>(simpleSlot(smem, a.cfg, sstep)), outOff);
        }
      }
      word = p.broadcast(word);
      if ((word & 0xffu) != kFailNone) return kFailAborted;
      const S* in =
          recvs ? reinterpret_cast<const S*>(simpleData(simpleSlot(rmem, a.cfg, rstep)) + (word >> 8)) : nullptr;
      S* out = sends ? reinterpret_cast<S*>(simpleData(simpleSlot(smem, a.cfg, sstep)) + outOff) : nullptr;
      move(in, src, d, out, n, red, scale);
      p.sync();
      if (p.tid() == 0) {
        if (sends) {
          p.fenceSystem();
          P::storeRelease(&connCtrl(smem)->head, sstep + 1);
          a.sendStep[o.sendPeer] = sstep + 1;
        }
        if (recvs) {
          P::storeRelease(&connCtrl(rmem)->tail, rstep + 1);
          a.recvStep[o.recvPeer] = rstep + 1;
        }
      }
      p.sync();
    }
    return kFailNone;
  }

  // ---- LL, LL128 and the send/recv header: the line protocols, defined in device/proto_lines.h ----
  STRATA_HD_INLINE uint32_t ll(const DevOp& o) const;
  STRATA_HD_INLINE void linePieceDone(const DevOp& o, void* rmem, uint64_t rstep, uint64_t sstep) const;
  static constexpr uint32_t kLineParts = 8 / P::kLineThreads;
  STRATA_HD_INLINE Vec16 ll128Read(const S* src, uint64_t off, uint32_t valid, bool full, bool aligned) const;
  STRATA_HD_INLINE void ll128Write(S* d, uint64_t off, uint32_t valid, bool full, bool aligned, const Vec16& v) const;
  STRATA_HD_INLINE uint32_t ll128(const DevOp& o) const;
  static STRATA_HD_INLINE void unpack(S* m, const uint32_t* words);
  static STRATA_HD_INLINE void pack(uint32_t* words, const S* msg);
  static STRATA_HD_INLINE void memcpyBits(void* d, const void* s, uint64_t n);
  STRATA_HD_INLINE uint32_t header(const DevOp& o) const;

  // ---- cross-lane waits ----
  // An op with afterOps waits (its leader polling, with the deadline and abort checks of every wait) until lane
  // afterLane of this rank has published that many completed ops; each lane of a plan with such waits publishes its
  // count after every op, once the whole group's writes are done (every op ends with the group in step) and fenced.
  STRATA_HD_INLINE uint32_t waitLane(const DevOp& o) const {
    uint32_t failed = kFailNone;
    if (p.tid() == 0) {
      if (a.laneOps == nullptr || o.afterLane < 0 || static_cast<uint32_t>(o.afterLane) >= a.nlanes) {
        failed = recordStop<P>(a, kFailBadPlan, opIndex, o.afterLane, 4);
      } else {
        const uint32_t* done = a.laneOps + o.afterLane;
        failed = waitFor(p, a, deadlineNs, opIndex, o.afterLane, 4, [&] { return P::loadAcquire(done) >= o.afterOps; });
      }
    }
    return p.broadcast(failed);
  }
  STRATA_HD_INLINE void publishDone(uint32_t ops) const {
    if (p.tid() == 0) {
      p.fenceSystem();
      P::storeRelease(a.laneOps + a.lane, ops);
    }
  }

  STRATA_HD_INLINE uint32_t run(const DevOp& o) const {
    if (o.kind == kDevOpHeader) return header(o);
    const OpKind kind = static_cast<OpKind>(o.kind);
    if (kind == OpKind::kCopy || kind == OpKind::kReduceLocal) return local(o);
    if (o.count == 0) return kFailNone;
    const uint64_t bytes = o.count * sizeof(S);
    if (bytes <= a.cfg.llMaxBytes) return ll(o);  // one piece, one slot
    if (bytes <= a.cfg.ll128MaxBytes) return ll128(o);
    return simple(o);
  }
};

// x / d truncating toward zero, as the host's divideBy (d >= 1).
template <class T>
STRATA_HD_INLINE T divideTruncating(T x, uint64_t d) {
  if constexpr (std::is_signed_v<T>) {
    if (d > static_cast<uint64_t>(INT64_MAX)) {
      // |x| < d for every x except INT64_MIN when d is exactly 2^63.
      return (static_cast<int64_t>(x) == INT64_MIN && d == static_cast<uint64_t>(INT64_MAX) + 1) ? T(-1) : T(0);
    }
    return static_cast<T>(static_cast<int64_t>(x) / static_cast<int64_t>(d));
  } else {
    return static_cast<T>(static_cast<uint64_t>(x) / d);
  }
}

// Integer Avg's division, by the last lane to finish (see LaneArgs::postDiv).
template <class P, class E>
STRATA_HD_INLINE void postDivide(const P& p, const LaneArgs& a) {
  using S = typename E::Storage;
  if constexpr (std::is_integral_v<S>) {
    p.sync();  // every thread of this lane is done with its writes
    uint32_t last = 0;
    if (p.tid() == 0) {
      p.fenceSystem();
      last = P::fetchAddU32(a.lanesDone, 1u) == a.nlanes - 1 ? 1u : 0u;
    }
    if (p.broadcast(last) == 0) return;
    S* out = static_cast<S*>(a.bufs[kBufRecv]);
    for (uint64_t i = p.tid(); i < a.recvElems; i += p.nthreads()) out[i] = divideTruncating<S>(out[i], a.postDiv);
    p.sync();
    if (p.tid() == 0) P::storeRelaxed(a.lanesDone, 0u);
  }
}

/// Runs one lane of a lowered plan with the element type E and the operator K fixed at compile time (a GPU kernel
/// per pair: device/cuda/exec_kernel.cuh), the group `p` running it; returns kFailNone or the rank's failure code
/// (details in *args.failure). Every thread of the group calls it.
template <class P, class E, ReduceKind K>
STRATA_HD_INLINE uint32_t runLaneAs(const P& p, const LaneArgs& a) {
  const uint64_t deadline = a.deadlineNs == 0 && a.timeoutNs != 0 ? P::nowNs() + a.timeoutNs : a.deadlineNs;
  OpRunner<P, E, K> r{p, a, deadline, 0, factorOf<E>(a)};
  for (uint32_t i = 0; i < a.nops; ++i) {
    r.opIndex = static_cast<int>(i);
    const DevOp& o = a.ops[i];
    if (o.afterOps != 0 && r.waitLane(o) != kFailNone) return P::loadRelaxed(&a.failure->code);
    if (r.run(o) != kFailNone) return P::loadRelaxed(&a.failure->code);
    if (a.laneOps != nullptr) r.publishDone(i + 1);
  }
  if (a.postDiv > 1 && a.lanesDone != nullptr) postDivide<P, E>(p, a);
  return kFailNone;
}

template <class P, strataDataType_t T>
uint32_t runLaneOp(const P& p, const LaneArgs& a) {
  using E = typename ElemOf<T>::type;
  switch (a.op) {
    case ReduceKind::kSum: return runLaneAs<P, E, ReduceKind::kSum>(p, a);
    case ReduceKind::kProd: return runLaneAs<P, E, ReduceKind::kProd>(p, a);
    case ReduceKind::kMax: return runLaneAs<P, E, ReduceKind::kMax>(p, a);
    case ReduceKind::kMin: return runLaneAs<P, E, ReduceKind::kMin>(p, a);
  }
  return kFailBadPlan;
}

/// runLaneAs for the lane's dtype and operator, chosen at run time (the CPU policy's entry; the GPU launches the
/// kernel of the pair instead).
template <class P>
uint32_t runLane(const P& p, const LaneArgs& a) {
  switch (a.dtype) {
    case strataInt8: return runLaneOp<P, strataInt8>(p, a);
    case strataUint8: return runLaneOp<P, strataUint8>(p, a);
    case strataInt32: return runLaneOp<P, strataInt32>(p, a);
    case strataUint32: return runLaneOp<P, strataUint32>(p, a);
    case strataInt64: return runLaneOp<P, strataInt64>(p, a);
    case strataUint64: return runLaneOp<P, strataUint64>(p, a);
    case strataFloat16: return runLaneOp<P, strataFloat16>(p, a);
    case strataFloat32: return runLaneOp<P, strataFloat32>(p, a);
    case strataFloat64: return runLaneOp<P, strataFloat64>(p, a);
    case strataBfloat16: return runLaneOp<P, strataBfloat16>(p, a);
    case strataFloat8e4m3: return runLaneOp<P, strataFloat8e4m3>(p, a);
    case strataFloat8e5m2: return runLaneOp<P, strataFloat8e5m2>(p, a);
    default: return kFailBadPlan;
  }
}

}  // namespace
}  // namespace strata::devproto

// The line protocols' member functions (OpRunner::ll, ll128, header).
#include "device/proto_lines.h"
