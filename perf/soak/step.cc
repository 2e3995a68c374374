// One step of strata_soak run on a communicator (step.h).
#include "step.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

#include "check.h"
#include "dtypes.h"
#include "failure.h"

namespace soak {

namespace {

strataResult_t issue(const Op& op, const CommView& v, const Slot& s, strataRedOp_t redOp) {
  const DtypeInfo& d = info(op.dtype);
  const Layout l = layoutOf(op, v.rank, v.size);
  const void* in = op.inPlace ? s.recv + l.inOffset * d.size : s.send;
  void* out = s.recv + l.outOffset * d.size;
  const int root = static_cast<int>(op.rootDraw % static_cast<uint64_t>(v.size));
  switch (op.kind) {
    case kAllReduce: return strataAllReduce(in, out, op.count, op.dtype, redOp, v.comm, nullptr);
    case kReduceScatter: return strataReduceScatter(in, out, op.count, op.dtype, redOp, v.comm, nullptr);
    case kAllGather: return strataAllGather(in, out, op.count, op.dtype, v.comm, nullptr);
    case kBroadcast: return strataBroadcast(in, out, op.count, op.dtype, root, v.comm, nullptr);
    case kReduce: return strataReduce(in, out, op.count, op.dtype, redOp, root, v.comm, nullptr);
    case kAllToAll: return strataAllToAll(in, out, op.count, op.dtype, v.comm, nullptr);
    case kBarrier: return strataBarrier(v.comm, nullptr);
    case kSendRecv: {
      // A ring shift in a group of its own (nested when the step is a group).
      const int next = (v.rank + 1) % v.size, prev = (v.rank + v.size - 1) % v.size;
      strataResult_t r = strataGroupStart();
      if (r == strataSuccess) r = strataSend(in, op.count, op.dtype, next, v.comm, nullptr);
      if (r == strataSuccess) r = strataRecv(out, op.count, op.dtype, prev, v.comm, nullptr);
      const strataResult_t end = strataGroupEnd();
      return r != strataSuccess ? r : end;
    }
    default: return strataInternalError;
  }
}

}  // namespace

void runStep(const Step& step, const CommView& v, Buffers& buf, Stats& st) {
  const size_t nops = step.ops.size();
  std::vector<strataRedOp_t> redOps(nops, strataSum);
  std::vector<Slot> slots(nops);
  for (size_t k = 0; k < nops; ++k) {
    const Op& op = step.ops[k];
    const size_t offset = nops == 1 ? 0 : k * buf.slotBytes;
    slots[k] = Slot{buf.send.data() + offset, buf.recv.data() + offset};
    if (op.op == kPreMulSum) {
      unsigned char scalar[kMaxDtypeSize];
      store(scalar, 0, op.dtype, kPreMulScalar);
      expectOk(strataRedOpCreatePreMulSum(&redOps[k], scalar, op.dtype, strataScalarHostImmediate, v.comm), v.comm,
               "strataRedOpCreatePreMulSum for " + describe(op, v));
      ++st.preMulSums;
    } else if (op.op != kNoOp) {
      redOps[k] = static_cast<strataRedOp_t>(op.op);
    }
    prepare(op, v, slots[k]);
  }
  if (step.issue == Issue::kBlocking) {
    expectOk(issue(step.ops[0], v, slots[0], redOps[0]), v.comm, describe(step.ops[0], v));
  } else {
    expectOk(strataGroupStart(), v.comm, "strataGroupStart");
    for (size_t k = 0; k < nops; ++k)
      expectOk(issue(step.ops[k], v, slots[k], redOps[k]), v.comm, "in a group: " + describe(step.ops[k], v));
    std::string what = "the group of " + std::to_string(nops) + " ops, the first " + describe(step.ops[0], v);
    if (step.issue == Issue::kGroup) {
      expectOk(strataGroupEnd(), v.comm, "strataGroupEnd of " + what);
    } else {
      strataWork_t work = nullptr;
      expectOk(strataGroupEndAsync(&work), v.comm, "strataGroupEndAsync of " + what);
      strataResult_t r;
      if (step.pollAsync) {
        // Poll with a growing sleep: the machine's cores are shared by every rank.
        int done = 0, sleepUs = 10;
        while ((r = strataWorkTest(work, &done)) == strataSuccess && !done) {
          std::this_thread::sleep_for(std::chrono::microseconds(sleepUs));
          sleepUs = std::min(sleepUs * 2, 2000);
        }
      } else {
        r = strataWorkWait(work, -1);
      }
      if (r != strataSuccess) die("async %s: %s: %s", what.c_str(), strataGetErrorString(r), strataWorkError(work));
      expectOk(strataWorkFree(work), v.comm, "strataWorkFree");
      ++st.async;
    }
    st.grouped += nops;
  }
  for (size_t k = 0; k < nops; ++k) {
    const Op& op = step.ops[k];
    check(op, v, slots[k]);
    if (op.op == kPreMulSum) expectOk(strataRedOpDestroy(redOps[k], v.comm), v.comm, "strataRedOpDestroy");
    const Layout l = layoutOf(op, v.rank, v.size);
    ++st.ops[op.kind];
    st.bytes += std::max(l.inElems, l.outElems) * info(op.dtype).size;
  }
}

}  // namespace soak
