// The line protocols of the device protocol (device/proto.h): LL (8-byte lines, 4 bytes of data and a 4-byte flag),
// LL128 (128-byte lines, 120 bytes of data and an 8-byte flag, written by a warp) and the send/recv header (one LL
// piece of two lines), as OpRunner's member functions. Included at the end of device/proto.h (which it needs and
// does not include: the two are one file cut in two), not on its own.
#pragma once

#include <cstdint>

namespace strata::devproto {
namespace {

// ---- LL ----
// A line: low 32 bits data, high 32 bits flag. The piece's bytes are packed 4 to a line; each thread owns
// whole elements' lines (ceil(sizeof(S)/4) lines per element, several elements per line when S is narrower).
template <class P, class E, ReduceKind K>
STRATA_HD_INLINE uint32_t OpRunner<P, E, K>::ll(const DevOp& o) const {
  const OpKind kind = static_cast<OpKind>(o.kind);
  const bool recvs = o.recvPeer >= 0, sends = o.sendPeer >= 0;
  constexpr uint64_t kPerLine = sizeof(S) >= 4 ? 1 : 4 / sizeof(S);   // elements per line
  constexpr uint64_t kLinesPer = sizeof(S) >= 4 ? sizeof(S) / 4 : 1;  // lines per element group
  const uint64_t pieceElems = a.cfg.llMaxBytes / sizeof(S);           // the whole op: one piece
  S* dst = writesDst(kind) ? buf(o.dstBuf, o.dstOff) : nullptr;
  const S* src = readsSrc(kind) ? buf(o.srcBuf, o.srcOff) : nullptr;
  const bool red = reduces(kind), scale = src != nullptr && scaled(o);
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
      S m[kPerLine] = {};
      if (recvs) {
        uint32_t words[kLinesPer];
        for (uint64_t l = 0; l < kLinesPer; ++l) {
          uint64_t* line = inLines + g * kLinesPer + l;
          uint64_t v = 0;
          mine = waitFor(p, a, deadlineNs, opIndex, o.recvPeer, 2, [&] {
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
          const uint64_t i = base + first + e;
          msg[e] = value(recvs ? m[e] : S{}, src ? src[i] : S{}, recvs, red, scale);
          if (dst) dst[i] = msg[e];
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
    linePieceDone(o, rmem, rstep, sstep);
  }
  return kFailNone;
}

// The end of an LL or LL128 piece, every thread of the group in step: the leader counts the piece sent and received
// and frees the receive slot (no head is published: the lines' flags were the data's arrival).
template <class P, class E, ReduceKind K>
STRATA_HD_INLINE void OpRunner<P, E, K>::linePieceDone(const DevOp& o, void* rmem, uint64_t rstep,
                                                       uint64_t sstep) const {
  if (p.tid() == 0) {
    if (o.sendPeer >= 0) a.sendStep[o.sendPeer] = sstep + 1;
    if (o.recvPeer >= 0) {
      P::storeRelease(&connCtrl(rmem)->tail, rstep + 1);
      a.recvStep[o.recvPeer] = rstep + 1;
    }
  }
  p.sync();
}

// ---- LL128 ----
// A piece of up to pieceBytes in lines of 128 bytes, 120 of the piece and the flag (step + 1, 64 bits) in the
// last 8 (dev_types.h, kLL128LineBytes). kLineThreads threads share a line, each holding kParts of its eight
// vectors, the last of them the flag; a warp takes kWarp / kLineThreads lines at a time, every thread of it in
// every round (those past the piece's last line vote "ready"), so its votes never split it. The receiving threads
// poll their parts until the warp's every line has its flag; then each thread computes its parts' elements (8- or
// 16-byte pieces of the user's buffers where those are 8-byte aligned, element by element at the piece's end or
// otherwise) and writes the destination and, flag set, its parts of the outgoing line at once (P::storeLinePart).
// Like LL, no head is published: the lines' flags are the data's arrival; the receiver frees the slot (tail).

// The elements of a line's vector `vec` (0..7; the last carries 8 bytes) at byte `off` of the piece, `valid` of
// them in the piece, from the user's buffer `src` (elements of the piece from its start).
template <class P, class E, ReduceKind K>
STRATA_HD_INLINE Vec16 OpRunner<P, E, K>::ll128Read(const S* src, uint64_t off, uint32_t valid, bool full,
                                                    bool aligned) const {
  Vec16 v{};
  const S* at = src + off / sizeof(S);
  if (full && aligned) {
    const uint64_t x = load8(at), y = valid * sizeof(S) > 8 ? load8(at + 8 / sizeof(S)) : 0;
    v.w[0] = static_cast<uint32_t>(x), v.w[1] = static_cast<uint32_t>(x >> 32);
    v.w[2] = static_cast<uint32_t>(y), v.w[3] = static_cast<uint32_t>(y >> 32);
    return v;
  }
  STRATA_UNROLL
  for (uint32_t e = 0; e < kVecElems; ++e)
    if (e < valid) setElem<S>(v, e, at[e]);
  return v;
}
template <class P, class E, ReduceKind K>
STRATA_HD_INLINE void OpRunner<P, E, K>::ll128Write(S* d, uint64_t off, uint32_t valid, bool full, bool aligned,
                                                    const Vec16& v) const {
  S* at = d + off / sizeof(S);
  if (full && aligned) {
    store8(at, static_cast<uint64_t>(v.w[0]) | (static_cast<uint64_t>(v.w[1]) << 32));
    if (valid * sizeof(S) > 8)
      store8(at + 8 / sizeof(S), static_cast<uint64_t>(v.w[2]) | (static_cast<uint64_t>(v.w[3]) << 32));
    return;
  }
  STRATA_UNROLL
  for (uint32_t e = 0; e < kVecElems; ++e)
    if (e < valid) at[e] = elemAt<S>(v, e);
}

template <class P, class E, ReduceKind K>
STRATA_HD_INLINE uint32_t OpRunner<P, E, K>::ll128(const DevOp& o) const {
  constexpr uint32_t kT = P::kLineThreads, kLinesPerWarp = P::kWarp / kT;
  static_assert(P::kWarp % kT == 0 && 8 % kT == 0, "a warp holds whole lines");
  const OpKind kind = static_cast<OpKind>(o.kind);
  const bool recvs = o.recvPeer >= 0, sends = o.sendPeer >= 0;
  const uint64_t pieceElems = a.cfg.pieceBytes / sizeof(S);
  S* dst = writesDst(kind) ? buf(o.dstBuf, o.dstOff) : nullptr;
  const S* srcAll = readsSrc(kind) ? buf(o.srcBuf, o.srcOff) : nullptr;
  const bool red = reduces(kind), scale = srcAll != nullptr && scaled(o);
  const bool dAligned = dst && (reinterpret_cast<uintptr_t>(dst) & 7u) == 0;
  const bool sAligned = srcAll && (reinterpret_cast<uintptr_t>(srcAll) & 7u) == 0;
  const uint32_t warp = p.tid() / P::kWarp, inWarp = p.tid() % P::kWarp, part = inWarp % kT;
  const bool holdsFlag = part == kT - 1;
  const uint64_t warps = p.nthreads() / P::kWarp;
  for (uint64_t base = 0; base < o.count; base += pieceElems) {
    const uint64_t n = o.count - base < pieceElems ? o.count - base : pieceElems;
    const uint64_t bytes = n * sizeof(S);
    void* rmem = recvs ? a.recvMem[o.recvPeer] : nullptr;
    void* smem = sends ? a.sendMem[o.sendPeer] : nullptr;
    const uint64_t rstep = recvs ? a.recvStep[o.recvPeer] : 0;
    const uint64_t sstep = sends ? a.sendStep[o.sendPeer] : 0;
    uint32_t failed = kFailNone;
    if (sends && p.tid() == 0) failed = waitSlot(o.sendPeer, smem, sstep);
    if (p.broadcast(failed) != kFailNone) return kFailAborted;
    const uint64_t rflag = rstep + 1, sflag = sstep + 1;
    const Vec16* inLines = recvs ? ll128Slot(rmem, a.cfg, rstep) : nullptr;
    Vec16* outLines = sends ? ll128Slot(smem, a.cfg, sstep) : nullptr;
    S* d = dst ? dst + base : nullptr;
    const S* src = srcAll ? srcAll + base : nullptr;
    const uint64_t nlines = (bytes + kLL128LineData - 1) / kLL128LineData;
    uint32_t mine = kFailNone;
    for (uint64_t first = warp * kLinesPerWarp; first < nlines; first += warps * kLinesPerWarp) {
      const uint64_t line = first + inWarp / kT;
      const bool active = line < nlines;
      const uint64_t at = line * (kLL128LineBytes / 16) + part * kLineParts;  // this thread's first vector
      Vec16 m[kLineParts] = {};
      if (recvs) {
        mine = waitWarp(p, a, deadlineNs, opIndex, o.recvPeer, 5, [&] {
          if (!active) return true;
          P::loadLinePart(inLines + at, m, holdsFlag);
          const Vec16& f = m[kLineParts - 1];
          return !holdsFlag || (static_cast<uint64_t>(f.w[2]) | (static_cast<uint64_t>(f.w[3]) << 32)) == rflag;
        });
        if (mine != kFailNone) break;  // the whole warp (a vote)
      }
      if (!active) continue;
      Vec16 out[kLineParts];
      STRATA_UNROLL
      for (uint32_t j = 0; j < kLineParts; ++j) {
        const uint32_t vec = part * kLineParts + j;  // 0..7 in the line; 7 carries 8 bytes and the flag
        const uint32_t room = vec == 7 ? 8 : 16;
        const uint64_t off = line * kLL128LineData + vec * 16u;
        const uint64_t left = off < bytes ? bytes - off : 0;
        const uint32_t valid = static_cast<uint32_t>((left < room ? left : room) / sizeof(S));
        const bool full = valid * sizeof(S) == room;
        const Vec16 sv = src && valid ? ll128Read(src, off, valid, full, sAligned) : Vec16{};
        out[j] = valueVec(m[j], sv, recvs, red, scale);
        if (d && valid) ll128Write(d, off, valid, full, dAligned, out[j]);
      }
      if (sends) {
        if (holdsFlag) {
          out[kLineParts - 1].w[2] = static_cast<uint32_t>(sflag);
          out[kLineParts - 1].w[3] = static_cast<uint32_t>(sflag >> 32);
        }
        P::storeLinePart(outLines + at, out, holdsFlag);
      }
    }
    if (p.anyFailed(mine) != kFailNone) return kFailAborted;
    linePieceDone(o, rmem, rstep, sstep);
  }
  return kFailNone;
}

template <class P, class E, ReduceKind K>
STRATA_HD_INLINE void OpRunner<P, E, K>::unpack(S* m, const uint32_t* words) {
  if constexpr (sizeof(S) >= 4) {
    uint32_t tmp[sizeof(S) / 4];
    for (uint64_t l = 0; l < sizeof(S) / 4; ++l) tmp[l] = words[l];
    memcpyBits(m, tmp, sizeof(S));
  } else {
    memcpyBits(m, words, 4);
  }
}
template <class P, class E, ReduceKind K>
STRATA_HD_INLINE void OpRunner<P, E, K>::pack(uint32_t* words, const S* msg) {
  if constexpr (sizeof(S) >= 4) {
    memcpyBits(words, msg, sizeof(S));
  } else {
    memcpyBits(words, msg, 4);
  }
}
template <class P, class E, ReduceKind K>
STRATA_HD_INLINE void OpRunner<P, E, K>::memcpyBits(void* d, const void* s, uint64_t n) {
  auto* dc = static_cast<unsigned char*>(d);
  auto* sc = static_cast<const unsigned char*>(s);
  for (uint64_t i = 0; i < n; ++i) dc[i] = sc[i];
}

// ---- a send/recv header (kDevOpHeader) ----
// One LL piece of two lines (the low and high 32 bits of the message's bytes) on the op's connection, written by
// the sender's leader and checked by the receiver's: the same slots and steps as any LL piece.
template <class P, class E, ReduceKind K>
STRATA_HD_INLINE uint32_t OpRunner<P, E, K>::header(const DevOp& o) const {
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
        failed = waitFor(p, a, deadlineNs, opIndex, o.recvPeer, 3, [&] {
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

}  // namespace
}  // namespace strata::devproto
