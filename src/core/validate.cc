#include "core/validate.h"

#include "util/error.h"

namespace strata {

void validateCall(const CollCall& c, int rank, int nranks, const RedOpTable& ops) {
  const char* name = collName(c.kind);
  if (!dtypeValid(static_cast<int>(c.dtype)))
    throw InvalidArgument(strprintf("rank %d: %s: invalid datatype %d", rank, name, static_cast<int>(c.dtype)));
  if (isReducing(c.kind) && !ops.valid(c.op))
    throw InvalidArgument(strprintf("rank %d: %s: invalid reduction op %d", rank, name, static_cast<int>(c.op)));
  if (isRooted(c.kind) && (c.root < 0 || c.root >= nranks))
    throw InvalidArgument(
        strprintf("rank %d: %s: root %d is not a rank of this %d-rank communicator", rank, name, c.root, nranks));
  if (isAnySource(c)) {
    if (!c.source)
      throw InvalidArgument(
          strprintf("rank %d: receive from any source: source is NULL (where its rank is stored)", rank));
    if (c.count == 0)
      throw InvalidArgument(strprintf(
          "rank %d: receive from any source of count 0: a send of 0 bytes carries no message to match", rank));
    if (nranks == 1)
      throw InvalidUsage(
          strprintf("rank %d: receive from any source on a 1-rank communicator: there is no other rank", rank));
    if (c.device)
      throw InvalidUsage(strprintf(
          "rank %d: receive from any source serves host memory only: a device call is enqueued on its stream with "
          "its peers fixed, while the peer of this receive is known only once a message has arrived",
          rank));
  } else if (isP2P(c.kind) && (c.peer < 0 || c.peer >= nranks))
    throw InvalidArgument(
        strprintf("rank %d: %s: peer %d is not a rank of this %d-rank communicator", rank, name, c.peer, nranks));
  const size_t esize = dtypeSize(c.dtype);
  size_t totalBytes;  // count x esize x nranks must fit (checked without a division: this runs on every call)
  if (__builtin_mul_overflow(c.count, esize * static_cast<size_t>(nranks), &totalBytes))
    throw InvalidArgument(strprintf("rank %d: %s: count %zu of %s overflows the address space for %d ranks", rank, name,
                                    c.count, dtypeName(c.dtype), nranks));
  size_t sendElems = 0, recvElems = 0;
  callBufferElems(c, nranks, rank, &sendElems, &recvElems);
  if (sendElems && !c.sendbuff)
    throw InvalidArgument(strprintf("rank %d: %s: sendbuff is NULL with count %zu", rank, name, c.count));
  if (recvElems && !c.recvbuff)
    throw InvalidArgument(strprintf("rank %d: %s: recvbuff is NULL with count %zu", rank, name, c.count));
  // Overlap other than NCCL's in-place layout would silently corrupt results.
  if (sendElems && recvElems && !callInPlace(c, rank, esize)) {
    const char* s = static_cast<const char*>(c.sendbuff);
    const char* r = static_cast<const char*>(c.recvbuff);
    if (s < r + recvElems * esize && r < s + sendElems * esize)
      throw InvalidArgument(strprintf("rank %d: %s: sendbuff and recvbuff overlap but are not in place", rank, name));
  }
}

}  // namespace strata
