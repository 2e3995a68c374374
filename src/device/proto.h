// The device protocol, written once for the GPU and for CPU threads: per-peer FIFOs with the Simple and LL
// protocols, NCCL-style primitives over them, and the executor that runs a lowered plan's lanes (device/dev_plan.h).
//
// Everything here is a template over an execution policy P (device/policy.h: DevicePolicy under nvcc,
// device/host_policy.h: HostPolicy for CPU threads), so the unit tests run, under ThreadSanitizer, the very code
// a kernel runs: P supplies the atomics and fences, the clock, the back-off and the thread group of a lane (a
// thread block on the GPU, one thread on the CPU).
//
// Memory (one ConnMem per ordered pair of ranks, held by the receiver and mapped by the sender: CUDA IPC on the
// GPU, a shared mapping in the CPU tests):
//   ctrl.head   pieces the sender has posted (Simple; written by the sender, read by the receiver)
//   ctrl.tail   pieces the receiver has consumed (both protocols; written by the receiver, read by the sender)
//   simple[s]   nslots slots of pieceBytes
//   ll[s]       nslots slots of LL lines: 8 bytes each, 4 bytes of data and a 4-byte flag, stored as one 64-bit
//               word, so a line is never seen half written; flag = low 32 bits of (step + 1)
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
// Linkage: like util/dtype_codec.h (which this uses), everything is in an unnamed namespace: include this from a
// .cc/.cu file, never from an inline function with external linkage.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "collectives/plan.h"
#include "device/dev_types.h"
#include "kernels/reduce_kind.h"
#include "strata/strata.h"
#include "util/dtype_codec.h"

#if defined(__CUDACC__)
#define STRATA_HD __host__ __device__
#else
#define STRATA_HD
#endif

namespace strata::devproto {

// ---- elements -----------------------------------------------------------------------------------------------

namespace {

template <class T>
struct Plain {
  using Storage = T;
  using Acc = T;
  static STRATA_HD_INLINE Acc widen(Storage s) { return s; }
  static STRATA_HD_INLINE Storage narrow(Acc a) { return a; }
};
template <class Codec, class S>
struct Narrow {
  using Storage = S;
  using Acc = float;
  static STRATA_HD_INLINE float widen(Storage s) { return Codec::decode(s); }
  static STRATA_HD_INLINE Storage narrow(float a) { return static_cast<Storage>(Codec::encode(a)); }
};
using HalfElem = Narrow<dtype_codec::Half, uint16_t>;
using Bf16Elem = Narrow<dtype_codec::Bf16, uint16_t>;
using E4m3Elem = Narrow<dtype_codec::E4m3, uint8_t>;
using E5m2Elem = Narrow<dtype_codec::E5m2, uint8_t>;

// The element operator, as the host kernels define it (kernels/reduce_kind.h): integers wrap through the
// unsigned type; float max/min propagate NaN (x when x is NaN, else the comparison's choice).
template <ReduceKind K, class A>
STRATA_HD_INLINE A combine(A x, A y) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    if constexpr (K == ReduceKind::kSum) return static_cast<A>(static_cast<U>(x) + static_cast<U>(y));
    if constexpr (K == ReduceKind::kProd) return static_cast<A>(static_cast<U>(x) * static_cast<U>(y));
    if constexpr (K == ReduceKind::kMax) return x > y ? x : y;
    if constexpr (K == ReduceKind::kMin) return x < y ? x : y;
  } else {
#if defined(__CUDA_ARCH__)
    if constexpr (K == ReduceKind::kSum) {
      if constexpr (std::is_same_v<A, float>) return __fadd_rn(x, y);
      else return __dadd_rn(x, y);
    }
    if constexpr (K == ReduceKind::kProd) {
      if constexpr (std::is_same_v<A, float>) return __fmul_rn(x, y);
      else return __dmul_rn(x, y);
    }
#else
    if constexpr (K == ReduceKind::kSum) return x + y;
    if constexpr (K == ReduceKind::kProd) return x * y;
#endif
    if constexpr (K == ReduceKind::kMax) return (x > y || x != x) ? x : y;
    if constexpr (K == ReduceKind::kMin) return (x < y || x != x) ? x : y;
  }
  return x;
}

// The pre-multiplication of PreMulSum and float Avg, as the host's scaleBy/multiplyBy: f64 for 64-bit floats, f32
// for the others; integers multiply in their own type (wrapping).
template <class E>
STRATA_HD_INLINE typename E::Storage preScale(typename E::Storage s, const LaneArgs& a) {
  using Acc = typename E::Acc;
  if constexpr (std::is_integral_v<Acc>) {
    using U = std::make_unsigned_t<Acc>;
    return static_cast<Acc>(static_cast<U>(s) * static_cast<U>(a.preMulInt));
  } else if constexpr (std::is_same_v<Acc, double>) {
    return s * a.preMul;
  } else {
    return E::narrow(E::widen(s) * static_cast<float>(a.preMul));
  }
}

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
STRATA_HD_INLINE uint32_t waitFor(const P& p, const LaneArgs& a, int op, int peer, uint32_t what, Ready ready) {
  uint32_t spins = 0;
  while (!ready()) {
    if ((++spins & 63) == 0) {
      uint32_t code = kFailNone;
      if (P::loadRelaxed(a.abortWord) != 0 || P::loadRelaxed(a.stopWord) != 0) code = kFailAborted;
      else if (a.deadlineNs != 0 && P::nowNs() > a.deadlineNs) code = kFailTimedOut;
      if (code != kFailNone) return recordStop<P>(a, code, op, peer, what);
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
  const LaneArgs& a;
  int opIndex;

  STRATA_HD S* buf(uint32_t b, uint64_t off) const {
    return static_cast<S*>(a.bufTable != nullptr ? a.bufTable[b] : a.bufs[b]) + off;
  }
  // An element read from a buffer: the send buffer's elements pre-multiplied where the op asks for it.
  STRATA_HD_INLINE S readSrc(const DevOp& o, uint64_t i) const {
    const S v = buf(o.srcBuf, o.srcOff)[i];
    if (scaled(o)) return preScale<E>(v, a);
    return v;
  }
  STRATA_HD_INLINE S reduce(S msg, S src) const { return E::narrow(combine<K>(E::widen(msg), E::widen(src))); }

  // The element an op produces from its message element m (if it receives) and its source element s (if it reads
  // one, pre-multiplied): what goes to dst and to the outgoing message.
  struct Out {
    S dst, msg;
  };
  static STRATA_HD_INLINE Out produceWith(OpKind kind, S m, S s, const OpRunner& r) {
    switch (kind) {
      case OpKind::kSend: return {S{}, s};
      case OpKind::kRecv: return {m, S{}};
      case OpKind::kRecvReduce: {
        const S v = r.reduce(m, s);
        return {v, S{}};
      }
      case OpKind::kRecvReduceSend: return {S{}, r.reduce(m, s)};
      case OpKind::kRecvReduceCopySend: {
        const S v = r.reduce(m, s);
        return {v, v};
      }
      case OpKind::kRecvCopySend: return {m, m};
      case OpKind::kCopySend: return {s, s};
      default: return {S{}, S{}};
    }
  }
  static STRATA_HD_INLINE bool readsSrc(OpKind k) {
    return k == OpKind::kSend || k == OpKind::kRecvReduce || k == OpKind::kRecvReduceSend ||
           k == OpKind::kRecvReduceCopySend || k == OpKind::kCopySend;
  }
  STRATA_HD_INLINE Out produce(const DevOp& o, S m, uint64_t i) const {
    const OpKind kind = static_cast<OpKind>(o.kind);
    return produceWith(kind, m, readsSrc(kind) ? readSrc(o, i) : S{}, *this);
  }
  STRATA_HD_INLINE bool scaled(const DevOp& o) const {
    return o.srcBuf == kBufSend && a.bufTable == nullptr && (a.preMul != 1.0 || a.preMulInt != 1);
  }

  // 16 bytes of elements: a Simple piece moves in these where every pointer it touches is 16-byte aligned (the
  // slots always are), one vector load or store per pointer per 16 bytes (ld/st.v4 on the GPU).
  static constexpr uint64_t kVec = 16 / sizeof(S);
  struct alignas(16) Vec {
    S e[kVec];
  };
  static STRATA_HD_INLINE bool aligned16(const void* q) { return (reinterpret_cast<uintptr_t>(q) & 15u) == 0; }

  static STRATA_HD_INLINE bool writesDst(OpKind k) {
    return k == OpKind::kRecv || k == OpKind::kRecvReduce || k == OpKind::kRecvReduceCopySend ||
           k == OpKind::kRecvCopySend || k == OpKind::kCopySend;
  }

  // The sender's wait for a free slot of peer's FIFO at step sstep (leader only).
  STRATA_HD_INLINE uint32_t waitSlot(int peer, void* smem, uint64_t sstep) const {
    ConnCtrl* c = connCtrl(smem);
    return waitFor(p, a, opIndex, peer, 0, [&] { return sstep - P::loadAcquire(&c->tail) < a.cfg.nslots; });
  }

  // ---- local ops ----
  STRATA_HD uint32_t local(const DevOp& o) const {
    S* dst = buf(o.dstBuf, o.dstOff);
    if (static_cast<OpKind>(o.kind) == OpKind::kCopy) {
      const S* src = buf(o.srcBuf, o.srcOff);
      if (src == dst && !scaled(o)) return kFailNone;
      for (uint64_t i = p.tid(); i < o.count; i += p.nthreads()) dst[i] = readSrc(o, i);
    } else {  // kReduceLocal
      for (uint64_t i = p.tid(); i < o.count; i += p.nthreads()) dst[i] = reduce(dst[i], readSrc(o, i));
    }
    p.sync();
    return kFailNone;
  }

  // ---- Simple ----
  STRATA_HD uint32_t simple(const DevOp& o) const {
    const OpKind kind = static_cast<OpKind>(o.kind);
    const bool recvs = o.recvPeer >= 0, sends = o.sendPeer >= 0;
    const uint64_t pieceElems = a.cfg.pieceBytes / sizeof(S);
    S* dst = writesDst(kind) ? buf(o.dstBuf, o.dstOff) : nullptr;
    for (uint64_t base = 0; base < o.count; base += pieceElems) {
      const uint64_t n = o.count - base < pieceElems ? o.count - base : pieceElems;
      uint64_t rstep = 0, sstep = 0;
      void* rmem = recvs ? a.recvMem[o.recvPeer] : nullptr;
      void* smem = sends ? a.sendMem[o.sendPeer] : nullptr;
      if (recvs) rstep = a.recvStep[o.recvPeer];
      if (sends) sstep = a.sendStep[o.sendPeer];
      uint32_t failed = kFailNone;
      if (p.tid() == 0) {
        if (recvs) {
          ConnCtrl* c = connCtrl(rmem);
          failed = waitFor(p, a, opIndex, o.recvPeer, 1, [&] { return P::loadAcquire(&c->head) > rstep; });
        }
        if (sends && failed == kFailNone) {
          failed = waitSlot(o.sendPeer, smem, sstep);
        }
      }
      if (p.broadcast(failed) != kFailNone) return kFailAborted;
      const S* in = recvs ? reinterpret_cast<const S*>(simpleSlot(rmem, a.cfg, rstep)) : nullptr;
      S* out = sends ? reinterpret_cast<S*>(simpleSlot(smem, a.cfg, sstep)) : nullptr;
      const S* src = readsSrc(kind) ? buf(o.srcBuf, o.srcOff) + base : nullptr;
      S* d = dst ? dst + base : nullptr;
      const bool scale = src != nullptr && scaled(o);
      // 16-byte moves for the aligned body, then element by element for the rest.
      const uint64_t nv = aligned16(in) && aligned16(out) && aligned16(src) && aligned16(d) ? n / kVec : 0;
      for (uint64_t v = p.tid(); v < nv; v += p.nthreads()) {
        Vec mi{}, si{}, di, mo;
        if (in) mi = reinterpret_cast<const Vec*>(in)[v];
        if (src) si = reinterpret_cast<const Vec*>(src)[v];
        for (uint64_t e = 0; e < kVec; ++e) {
          const Out r = produceWith(kind, mi.e[e], scale ? preScale<E>(si.e[e], a) : si.e[e], *this);
          di.e[e] = r.dst;
          mo.e[e] = r.msg;
        }
        if (d) reinterpret_cast<Vec*>(d)[v] = di;
        if (out) reinterpret_cast<Vec*>(out)[v] = mo;
      }
      for (uint64_t i = nv * kVec + p.tid(); i < n; i += p.nthreads()) {
        const Out r = produce(o, in ? in[i] : S{}, base + i);
        if (dst) dst[base + i] = r.dst;
        if (out) out[i] = r.msg;
      }
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

  // ---- LL ----
  // A line: low 32 bits data, high 32 bits flag. The piece's bytes are packed 4 to a line; each thread owns
  // whole elements' lines (ceil(sizeof(S)/4) lines per element, several elements per line when S is narrower).
  STRATA_HD uint32_t ll(const DevOp& o) const {
    const OpKind kind = static_cast<OpKind>(o.kind);
    const bool recvs = o.recvPeer >= 0, sends = o.sendPeer >= 0;
    constexpr uint64_t kPerLine = sizeof(S) >= 4 ? 1 : 4 / sizeof(S);   // elements per line
    constexpr uint64_t kLinesPer = sizeof(S) >= 4 ? sizeof(S) / 4 : 1;  // lines per element group
    const uint64_t pieceElems = a.cfg.llMaxBytes / sizeof(S);           // the whole op: one piece
    S* dst = writesDst(kind) ? buf(o.dstBuf, o.dstOff) : nullptr;
    for (uint64_t base = 0; base < o.count; base += pieceElems) {
      const uint64_t n = o.count - base < pieceElems ? o.count - base : pieceElems;
      void* rmem = recvs ? a.recvMem[o.recvPeer] : nullptr;
      void* smem = sends ? a.sendMem[o.sendPeer] : nullptr;
      const uint64_t rstep = recvs ? a.recvStep[o.recvPeer] : 0;
      const uint64_t sstep = sends ? a.sendStep[o.sendPeer] : 0;
      uint32_t failed = kFailNone;
      if (sends && p.tid() == 0) {
        failed = waitSlot(o.sendPeer, smem, sstep);
      }
      if (p.broadcast(failed) != kFailNone) return kFailAborted;
      const uint32_t rflag = static_cast<uint32_t>(rstep + 1), sflag = static_cast<uint32_t>(sstep + 1);
      uint64_t* inLines = recvs ? llSlot(rmem, a.cfg, rstep) : nullptr;
      uint64_t* outLines = sends ? llSlot(smem, a.cfg, sstep) : nullptr;
      uint32_t mine = kFailNone;
      const uint64_t groups = (n + kPerLine - 1) / kPerLine;  // element groups: one line's worth each
      for (uint64_t g = p.tid(); g < groups && mine == kFailNone; g += p.nthreads()) {
        const uint64_t first = g * kPerLine;
        const uint64_t cnt = n - first < kPerLine ? n - first : kPerLine;
        // The message elements of this group, unpacked from their lines.
        S m[kPerLine];
        if (recvs) {
          uint32_t words[kLinesPer];
          for (uint64_t l = 0; l < kLinesPer; ++l) {
            uint64_t* line = inLines + g * kLinesPer + l;
            uint64_t v = 0;
            mine = waitFor(p, a, opIndex, o.recvPeer, 2, [&] {
              v = P::loadRelaxed(line);
              return static_cast<uint32_t>(v >> 32) == rflag;
            });
            if (mine != kFailNone) break;
            words[l] = static_cast<uint32_t>(v);
          }
          if (mine != kFailNone) break;
          unpack(m, words);
        }
        S msg[kPerLine];
        for (uint64_t e = 0; e < kPerLine; ++e) {
          if (e < cnt) {
            const Out r = produce(o, recvs ? m[e] : S{}, base + first + e);
            if (dst) dst[base + first + e] = r.dst;
            msg[e] = r.msg;
          } else {
            msg[e] = S{};
          }
        }
        if (sends) {
          uint32_t words[kLinesPer];
          pack(words, msg);
          for (uint64_t l = 0; l < kLinesPer; ++l)
            P::storeRelaxed(outLines + g * kLinesPer + l, (static_cast<uint64_t>(sflag) << 32) | words[l]);
        }
      }
      if (p.anyFailed(mine) != kFailNone) return kFailAborted;
      if (p.tid() == 0) {
        if (sends) a.sendStep[o.sendPeer] = sstep + 1;
        if (recvs) {
          P::storeRelease(&connCtrl(rmem)->tail, rstep + 1);
          a.recvStep[o.recvPeer] = rstep + 1;
        }
      }
      p.sync();
    }
    return kFailNone;
  }

  static STRATA_HD_INLINE void unpack(S* m, const uint32_t* words) {
    if constexpr (sizeof(S) >= 4) {
      uint32_t tmp[sizeof(S) / 4];
      for (uint64_t l = 0; l < sizeof(S) / 4; ++l) tmp[l] = words[l];
      memcpyBits(m, tmp, sizeof(S));
    } else {
      memcpyBits(m, words, 4);
    }
  }
  static STRATA_HD_INLINE void pack(uint32_t* words, const S* msg) {
    if constexpr (sizeof(S) >= 4) {
      memcpyBits(words, msg, sizeof(S));
    } else {
      memcpyBits(words, msg, 4);
    }
  }
  static STRATA_HD_INLINE void memcpyBits(void* d, const void* s, uint64_t n) {
    auto* dc = static_cast<unsigned char*>(d);
    auto* sc = static_cast<const unsigned char*>(s);
    for (uint64_t i = 0; i < n; ++i) dc[i] = sc[i];
  }

  // ---- a send/recv header (kDevOpHeader) ----
  // One LL piece of two lines (the low and high 32 bits of the message's bytes) on the op's connection, written by
  // the sender's leader and checked by the receiver's: the same slots and steps as any LL piece.
  STRATA_HD uint32_t header(const DevOp& o) const {
    uint32_t failed = kFailNone;
    if (p.tid() == 0) {
      if (o.sendPeer >= 0) {
        void* smem = a.sendMem[o.sendPeer];
        const uint64_t sstep = a.sendStep[o.sendPeer];
        failed = waitSlot(o.sendPeer, smem, sstep);
        if (failed == kFailNone) {
          uint64_t* lines = llSlot(smem, a.cfg, sstep);
          const uint64_t flag = static_cast<uint64_t>(static_cast<uint32_t>(sstep + 1)) << 32;
          P::storeRelaxed(lines, flag | (o.count & 0xffffffffu));
          P::storeRelaxed(lines + 1, flag | (o.count >> 32));
          a.sendStep[o.sendPeer] = sstep + 1;
        }
      } else if (o.recvPeer >= 0) {
        void* rmem = a.recvMem[o.recvPeer];
        const uint64_t rstep = a.recvStep[o.recvPeer];
        const uint32_t rflag = static_cast<uint32_t>(rstep + 1);
        uint64_t* lines = llSlot(rmem, a.cfg, rstep);
        uint64_t word[2] = {0, 0};
        for (int l = 0; l < 2 && failed == kFailNone; ++l) {
          failed = waitFor(p, a, opIndex, o.recvPeer, 3, [&] {
            word[l] = P::loadRelaxed(lines + l);
            return static_cast<uint32_t>(word[l] >> 32) == rflag;
          });
        }
        if (failed == kFailNone) {
          P::storeRelease(&connCtrl(rmem)->tail, rstep + 1);
          a.recvStep[o.recvPeer] = rstep + 1;
          const uint64_t got = (word[0] & 0xffffffffu) | (word[1] << 32);
          if (got != o.count) failed = recordStop<P>(a, kFailMismatch, opIndex, o.recvPeer, 3, o.count, got);
        }
      }
    }
    return p.broadcast(failed);
  }

  STRATA_HD uint32_t run(const DevOp& o) const {
    if (o.kind == kDevOpHeader) return header(o);
    const OpKind kind = static_cast<OpKind>(o.kind);
    if (kind == OpKind::kCopy || kind == OpKind::kReduceLocal) return local(o);
    if (o.count == 0) return kFailNone;
    if (o.count * sizeof(S) <= a.cfg.llMaxBytes) return ll(o);  // one piece, one slot
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
STRATA_HD void postDivide(const P& p, const LaneArgs& a) {
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

template <class P, class E, ReduceKind K>
STRATA_HD uint32_t runLaneTyped(const P& p, const LaneArgs& a) {
  OpRunner<P, E, K> r{p, a, 0};
  for (uint32_t i = 0; i < a.nops; ++i) {
    r.opIndex = static_cast<int>(i);
    if (r.run(a.ops[i]) != kFailNone) return P::loadRelaxed(&a.failure->code);
  }
  if (a.postDiv > 1 && a.lanesDone != nullptr) postDivide<P, E>(p, a);
  return kFailNone;
}

template <class P, class E>
STRATA_HD uint32_t runLaneOp(const P& p, const LaneArgs& a) {
  switch (a.op) {
    case ReduceKind::kSum: return runLaneTyped<P, E, ReduceKind::kSum>(p, a);
    case ReduceKind::kProd: return runLaneTyped<P, E, ReduceKind::kProd>(p, a);
    case ReduceKind::kMax: return runLaneTyped<P, E, ReduceKind::kMax>(p, a);
    case ReduceKind::kMin: return runLaneTyped<P, E, ReduceKind::kMin>(p, a);
  }
  return kFailBadPlan;
}

/// Runs one lane of a lowered plan with the group `p`; returns kFailNone or the rank's failure code (details in
/// *a.failure). Every thread of the group calls it.
template <class P>
STRATA_HD uint32_t runLane(const P& p, const LaneArgs& args) {
  LaneArgs a = args;
  if (a.deadlineNs == 0 && a.timeoutNs != 0) a.deadlineNs = P::nowNs() + a.timeoutNs;
  switch (a.dtype) {
    case strataInt8: return runLaneOp<P, Plain<int8_t>>(p, a);
    case strataUint8: return runLaneOp<P, Plain<uint8_t>>(p, a);
    case strataInt32: return runLaneOp<P, Plain<int32_t>>(p, a);
    case strataUint32: return runLaneOp<P, Plain<uint32_t>>(p, a);
    case strataInt64: return runLaneOp<P, Plain<int64_t>>(p, a);
    case strataUint64: return runLaneOp<P, Plain<uint64_t>>(p, a);
    case strataFloat16: return runLaneOp<P, HalfElem>(p, a);
    case strataFloat32: return runLaneOp<P, Plain<float>>(p, a);
    case strataFloat64: return runLaneOp<P, Plain<double>>(p, a);
    case strataBfloat16: return runLaneOp<P, Bf16Elem>(p, a);
    case strataFloat8e4m3: return runLaneOp<P, E4m3Elem>(p, a);
    case strataFloat8e5m2: return runLaneOp<P, E5m2Elem>(p, a);
    default: return kFailBadPlan;
  }
}

}  // namespace
}  // namespace strata::devproto
