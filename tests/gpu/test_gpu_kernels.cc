// The CUDA reduction kernels against the host kernels, on the GPU: every dtype x op, 1..8 sources, counts around
// the 16-byte vector width, pointers aligned, equally misaligned (scalar head, vector body) and differently
// misaligned (scalar throughout). Inputs are random bits, so NaN, infinity, subnormals and overflow all occur.
// With two sources the result must equal reduce2() bit for bit (a NaN wherever it has one); with k sources it
// must equal the f32 (or native) accumulation rounded once, computed here with the host's scalar conversions.
// Skipped, with the reason, where no CUDA device is usable.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda_loader.h"
#include "kernels/reduce.h"
#include "util/error.h"

namespace strata {
namespace {

CudaApi* api() {
  static std::string why;
  static CudaApi* a = [] {
    try {
      return &cudaApi();
    } catch (const Error& e) {
      why = e.what();
      return static_cast<CudaApi*>(nullptr);
    }
  }();
  if (!a) std::printf("SKIPPED: %s\n", why.c_str());
  return a;
}

#define STRATA_SKIP_WITHOUT_GPU() \
  if (!api()) GTEST_SKIP() << "no usable CUDA device"

const strataDataType_t kTypes[] = {strataInt8,    strataUint8,    strataInt32,      strataUint32,
                                   strataInt64,   strataUint64,   strataFloat16,    strataFloat32,
                                   strataFloat64, strataBfloat16, strataFloat8e4m3, strataFloat8e5m2};
const ReduceKind kOps[] = {ReduceKind::kSum, ReduceKind::kProd, ReduceKind::kMax, ReduceKind::kMin};

bool narrow(strataDataType_t t) {
  return t == strataFloat16 || t == strataBfloat16 || t == strataFloat8e4m3 || t == strataFloat8e5m2;
}

float widen(const void* p, size_t i, strataDataType_t t) {
  if (t == strataFloat8e4m3) return fp8e4m3ToFloat(static_cast<const uint8_t*>(p)[i]);
  if (t == strataFloat8e5m2) return fp8e5m2ToFloat(static_cast<const uint8_t*>(p)[i]);
  uint16_t h;
  std::memcpy(&h, static_cast<const char*>(p) + 2 * i, 2);
  return t == strataFloat16 ? halfToFloat(h) : bf16ToFloat(h);
}

void narrowTo(void* p, size_t i, strataDataType_t t, float v) {
  if (t == strataFloat8e4m3) static_cast<uint8_t*>(p)[i] = floatToFp8e4m3(v);
  else if (t == strataFloat8e5m2) static_cast<uint8_t*>(p)[i] = floatToFp8e5m2(v);
  else {
    const uint16_t h = t == strataFloat16 ? floatToHalf(v) : floatToBf16(v);
    std::memcpy(static_cast<char*>(p) + 2 * i, &h, 2);
  }
}

float combineF(ReduceKind k, float x, float y) {
  switch (k) {
    case ReduceKind::kSum: return x + y;
    case ReduceKind::kProd: return x * y;
    case ReduceKind::kMax: return (x > y || x != x) ? x : y;
    case ReduceKind::kMin: return (x < y || x != x) ? x : y;
  }
  return x;
}

// Host reference for k sources.
std::vector<char> reference(const std::vector<std::vector<char>>& srcs, size_t off, size_t count, strataDataType_t t,
                            ReduceKind op) {
  const size_t es = dtypeSize(t);
  std::vector<char> out(count * es + 16);
  if (!narrow(t)) {
    std::memcpy(out.data(), srcs[0].data() + off * es, count * es);
    for (size_t k = 1; k < srcs.size(); ++k) reduce2(out.data(), out.data(), srcs[k].data() + off * es, count, t, op);
    return out;
  }
  for (size_t i = 0; i < count; ++i) {
    float acc = widen(srcs[0].data(), off + i, t);
    for (size_t k = 1; k < srcs.size(); ++k) acc = combineF(op, acc, widen(srcs[k].data(), off + i, t));
    narrowTo(out.data(), i, t, acc);
  }
  return out;
}

bool sameElement(const char* a, const char* b, size_t i, strataDataType_t t) {
  const size_t es = dtypeSize(t);
  if (std::memcmp(a + i * es, b + i * es, es) == 0) return true;
  // NaNs need not match bit for bit (payloads), only both be NaN.
  const double x = loadAsDouble(a, i, t), y = loadAsDouble(b, i, t);
  return std::isnan(x) && std::isnan(y);
}

void runCase(strataDataType_t t, ReduceKind op, int nsrcs, size_t count, size_t srcOff, size_t dstOff,
             std::mt19937_64& rng) {
  const size_t es = dtypeSize(t);
  const size_t bytes = (count + 16) * es;
  std::vector<std::vector<char>> host(static_cast<size_t>(nsrcs), std::vector<char>(bytes));
  for (auto& h : host)
    for (auto& c : h) c = static_cast<char>(rng());
  std::vector<void*> dev(static_cast<size_t>(nsrcs));
  for (int k = 0; k < nsrcs; ++k) {
    ASSERT_EQ(cudaMalloc(&dev[static_cast<size_t>(k)], bytes), cudaSuccess);
    ASSERT_EQ(
        cudaMemcpy(dev[static_cast<size_t>(k)], host[static_cast<size_t>(k)].data(), bytes, cudaMemcpyHostToDevice),
        cudaSuccess);
  }
  void* dst = nullptr;
  ASSERT_EQ(cudaMalloc(&dst, bytes), cudaSuccess);
  const void* srcs[kCudaMaxReduceSources];
  for (int k = 0; k < nsrcs; ++k) srcs[k] = static_cast<char*>(dev[static_cast<size_t>(k)]) + srcOff * es;
  ASSERT_EQ(api()->reduce(static_cast<char*>(dst) + dstOff * es, srcs, nsrcs, count, t, op, nullptr), 0);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<char> got(count * es + 16);
  ASSERT_EQ(cudaMemcpy(got.data(), static_cast<char*>(dst) + dstOff * es, count * es, cudaMemcpyDeviceToHost),
            cudaSuccess);
  const std::vector<char> want = reference(host, srcOff, count, t, op);
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    if (!sameElement(got.data(), want.data(), i, t)) {
      if (wrong++ < 3)
        ADD_FAILURE() << dtypeName(t) << " op " << int(op) << " nsrcs " << nsrcs << " count " << count << " offsets "
                      << srcOff << "/" << dstOff << ": element " << i << " is " << loadAsDouble(got.data(), i, t)
                      << ", host gives " << loadAsDouble(want.data(), i, t);
    }
  }
  if (nsrcs == 2 && count > 0) {
    // Two sources: exactly the host kernel.
    std::vector<char> h2(count * es + 16);
    reduce2(h2.data(), host[0].data() + srcOff * es, host[1].data() + srcOff * es, count, t, op);
    for (size_t i = 0; i < count && wrong < 3; ++i)
      if (!sameElement(got.data(), h2.data(), i, t)) {
        ++wrong;
        ADD_FAILURE() << dtypeName(t) << " differs from reduce2 at element " << i;
      }
  }
  for (void* p : dev) cudaFree(p);
  cudaFree(dst);
}

TEST(GpuKernels, EveryDtypeOpAndSourceCountMatchesHost) {
  STRATA_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(42);
  for (strataDataType_t t : kTypes)
    for (ReduceKind op : kOps)
      for (int nsrcs : {1, 2, 3, 8})
        for (size_t count : {size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{1000}, size_t{65543}})
          runCase(t, op, nsrcs, count, 0, 0, rng);
}

TEST(GpuKernels, MisalignedHeadsAndTails) {
  STRATA_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(7);
  for (strataDataType_t t : kTypes)
    for (size_t srcOff : {size_t{0}, size_t{1}, size_t{3}})
      for (size_t dstOff : {size_t{0}, size_t{1}, size_t{3}})
        runCase(t, ReduceKind::kSum, 2, 4099, srcOff, dstOff, rng);
}

TEST(GpuKernels, LargeBuffersGridStride) {
  STRATA_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(9);
  for (strataDataType_t t : {strataFloat32, strataBfloat16, strataFloat8e4m3, strataInt64})
    runCase(t, ReduceKind::kSum, 2, (size_t{1} << 24) + 5, 0, 0, rng);
}

TEST(GpuKernels, BadArgumentsAreRejected) {
  STRATA_SKIP_WITHOUT_GPU();
  void* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 1024), cudaSuccess);
  const void* srcs[kCudaMaxReduceSources + 1] = {};
  for (auto& s : srcs) s = d;
  EXPECT_NE(api()->reduce(d, srcs, 0, 4, strataFloat32, ReduceKind::kSum, nullptr), 0);
  EXPECT_NE(api()->reduce(d, srcs, kCudaMaxReduceSources + 1, 4, strataFloat32, ReduceKind::kSum, nullptr), 0);
  const void* odd[1] = {static_cast<char*>(d) + 1};
  EXPECT_NE(api()->reduce(d, odd, 1, 4, strataFloat32, ReduceKind::kSum, nullptr), 0);
  cudaFree(d);
}

}  // namespace
}  // namespace strata
