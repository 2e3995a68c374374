// What an operation's buffers hold before and after it: the layout of its input and output, the inputs prepared
// (small integers whose results are exact in every dtype), and every result checked exactly, with the guard bytes
// after the output and, out of place, the send buffer.
#pragma once

#include <cstddef>

#include "comm_view.h"
#include "operations.h"

namespace soak {

constexpr unsigned char kSentinel = 0xa5;  // what output buffers hold before a call; never an expected value
constexpr size_t kGuardBytes = 64;         // bytes after an output that a call must leave alone

// Where an operation's input and output lie for `rank` of `n`, in elements.
struct Layout {
  size_t inElems = 0, outElems = 0;
  size_t inOffset = 0, outOffset = 0;  // in place: the input's and the result's place in the receive buffer
  size_t spanElems = 0;                // in place: the part of the receive buffer the call may write
};

/// The layout of `op` for `rank` of `n`.
Layout layoutOf(const Op& op, int rank, int n);

// One operation's share of the send and receive buffers.
struct Slot {
  unsigned char* send;
  unsigned char* recv;
};

/// Fills the receive buffer (its span and guard) with kSentinel and writes this rank's inputs.
void prepare(const Op& op, const CommView& v, const Slot& s);

/// Checks the output, the guard bytes and, out of place, the send buffer after the call; dies on a difference.
void check(const Op& op, const CommView& v, const Slot& s);

}  // namespace soak
