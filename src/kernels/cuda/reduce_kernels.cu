// CUDA reduction kernels: dst = srcs[0] op srcs[1] op ... op srcs[n-1], one pass over memory.
//
// Layout of the work: a grid-stride loop over 16-byte vectors (uint4) of every source and of the destination,
// so each thread issues one 16-byte load per source per step, the widest load the memory system serves in one
// transaction. Vector loads need every pointer 16-byte aligned at the same element: when the pointers share
// their misalignment, a scalar head brings them to a 16-byte boundary and a scalar tail finishes the last
// partial vector; when they do not (a sub-buffer at an odd element offset), the whole range runs scalar, which
// is still coalesced, only with narrower loads.
//
// Rounding follows the host kernels exactly (src/kernels/reduce_loops.h): narrow floats are widened to f32,
// combined in f32, and rounded once at the end with the same branch-free codecs, the one copy in
// src/util/dtype_codec.h (nearest even; e4m3 saturates at 448; e5m2 and f16 overflow to infinity; NaN stays NaN).
// They are the host's rather than cuda_fp8.h's conversions, whose f32 -> e5m2 saturates (PTX only has
// .satfinite for fp8), where the host overflows to infinity.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/cuda_kernels.h"
#include "util/dtype.h"
#include "util/dtype_codec.h"

namespace strata {
namespace {

// ---- narrow formats: the host loops' scalar codecs (util/dtype_codec.h), compiled for the device ------------
using dtype_codec::Bf16;
using dtype_codec::E4m3;
using dtype_codec::E5m2;
using dtype_codec::Half;

// Storage tags for the narrow formats (all are plain unsigned integers in memory).
struct HalfTag {};
struct Bf16Tag {};
struct E4m3Tag {};
struct E5m2Tag {};

// What an element is stored as, what it is combined in, and the conversions between the two.
template <class T>
struct Elem {
  using Storage = T;
  using Acc = T;
  static __device__ __forceinline__ Acc widen(Storage s) { return s; }
  static __device__ __forceinline__ Storage narrow(Acc a) { return a; }
};
template <>
struct Elem<HalfTag> {
  using Storage = uint16_t;
  using Acc = float;
  static __device__ __forceinline__ float widen(uint16_t s) { return Half::decode(s); }
  static __device__ __forceinline__ uint16_t narrow(float a) { return static_cast<uint16_t>(Half::encode(a)); }
};
template <>
struct Elem<Bf16Tag> {
  using Storage = uint16_t;
  using Acc = float;
  static __device__ __forceinline__ float widen(uint16_t s) { return Bf16::decode(s); }
  static __device__ __forceinline__ uint16_t narrow(float a) { return Bf16::encode(a); }
};
template <>
struct Elem<E4m3Tag> {
  using Storage = uint8_t;
  using Acc = float;
  static __device__ __forceinline__ float widen(uint8_t s) { return E4m3::decode(s); }
  static __device__ __forceinline__ uint8_t narrow(float a) { return static_cast<uint8_t>(E4m3::encode(a)); }
};
template <>
struct Elem<E5m2Tag> {
  using Storage = uint8_t;
  using Acc = float;
  static __device__ __forceinline__ float widen(uint8_t s) { return E5m2::decode(s); }
  static __device__ __forceinline__ uint8_t narrow(float a) { return static_cast<uint8_t>(E5m2::encode(a)); }
};

// ---- element operators: the host's semantics (reduce_elements.h) ---------------------------------------------
template <class T>
using UnsignedOf = std::make_unsigned_t<T>;

template <ReduceKind K, class A>
__device__ __forceinline__ A combine(A x, A y) {
  if constexpr (std::is_integral_v<A>) {
    // Integers wrap (two's complement) through the unsigned type.
    if constexpr (K == ReduceKind::kSum)
      return static_cast<A>(static_cast<UnsignedOf<A>>(x) + static_cast<UnsignedOf<A>>(y));
    if constexpr (K == ReduceKind::kProd)
      return static_cast<A>(static_cast<UnsignedOf<A>>(x) * static_cast<UnsignedOf<A>>(y));
    if constexpr (K == ReduceKind::kMax) return x > y ? x : y;
    if constexpr (K == ReduceKind::kMin) return x < y ? x : y;
  } else if constexpr (std::is_same_v<A, float>) {
    if constexpr (K == ReduceKind::kSum) return __fadd_rn(x, y);
    if constexpr (K == ReduceKind::kProd) return __fmul_rn(x, y);
    // NaN on either side comes out: x when x is NaN, else the comparison's choice (y when y is NaN).
    if constexpr (K == ReduceKind::kMax) return (x > y || x != x) ? x : y;
    if constexpr (K == ReduceKind::kMin) return (x < y || x != x) ? x : y;
  } else {
    if constexpr (K == ReduceKind::kSum) return __dadd_rn(x, y);
    if constexpr (K == ReduceKind::kProd) return __dmul_rn(x, y);
    if constexpr (K == ReduceKind::kMax) return (x > y || x != x) ? x : y;
    if constexpr (K == ReduceKind::kMin) return (x < y || x != x) ? x : y;
  }
  return x;
}

struct Sources {
  const void* p[kCudaMaxReduceSources];
};

template <class Tag, ReduceKind K>
__device__ __forceinline__ typename Elem<Tag>::Storage reduceOne(const Sources& s, int nsrcs, size_t i) {
  using E = Elem<Tag>;
  using S = typename E::Storage;
  auto acc = E::widen(static_cast<const S*>(s.p[0])[i]);
  for (int k = 1; k < nsrcs; ++k) acc = combine<K>(acc, E::widen(static_cast<const S*>(s.p[k])[i]));
  return E::narrow(acc);
}

// Elements [begin, end) one at a time, grid-stride.
template <class Tag, ReduceKind K>
__device__ __forceinline__ void scalarRange(void* dst, const Sources& s, int nsrcs, size_t begin, size_t end) {
  using S = typename Elem<Tag>::Storage;
  const size_t stride = size_t(blockDim.x) * gridDim.x;
  for (size_t i = begin + size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < end; i += stride)
    static_cast<S*>(dst)[i] = reduceOne<Tag, K>(s, nsrcs, i);
}

template <class Tag, ReduceKind K>
__global__ void __launch_bounds__(512)
    reduceKernel(void* dst, Sources s, int nsrcs, size_t count, size_t head, size_t nvec) {
  using E = Elem<Tag>;
  using S = typename E::Storage;
  constexpr int kPer = 16 / sizeof(S);
  // Head (up to 15 bytes' worth of elements before the first 16-byte boundary), then vectors, then the tail.
  scalarRange<Tag, K>(dst, s, nsrcs, 0, head);
  const size_t stride = size_t(blockDim.x) * gridDim.x;
  for (size_t v = size_t(blockIdx.x) * blockDim.x + threadIdx.x; v < nvec; v += stride) {
    const size_t base = head + v * kPer;
    union Vec {
      uint4 u;
      S e[kPer];
    };
    // Every source's load is issued before any is used, so a thread has all of them in flight at once
    // instead of paying one memory latency per source.
    Vec in[kCudaMaxReduceSources];
#pragma unroll
    for (int k = 0; k < kCudaMaxReduceSources; ++k)
      if (k < nsrcs) in[k].u = *reinterpret_cast<const uint4*>(static_cast<const S*>(s.p[k]) + base);
    typename E::Acc acc[kPer];
#pragma unroll
    for (int j = 0; j < kPer; ++j) acc[j] = E::widen(in[0].e[j]);
#pragma unroll
    for (int k = 1; k < kCudaMaxReduceSources; ++k) {
      if (k < nsrcs) {
#pragma unroll
        for (int j = 0; j < kPer; ++j) acc[j] = combine<K>(acc[j], E::widen(in[k].e[j]));
      }
    }
    Vec out;
#pragma unroll
    for (int j = 0; j < kPer; ++j) out.e[j] = E::narrow(acc[j]);
    *reinterpret_cast<uint4*>(static_cast<S*>(dst) + base) = out.u;
  }
  scalarRange<Tag, K>(dst, s, nsrcs, head + nvec * kPer, count);
}

template <class Tag, ReduceKind K>
cudaError_t launchTyped(void* dst, const Sources& s, int nsrcs, size_t count, cudaStream_t stream) {
  using S = typename Elem<Tag>::Storage;
  constexpr size_t kPer = 16 / sizeof(S);
  // Vectorize only if every pointer has the same offset from a 16-byte boundary.
  const uintptr_t mis = reinterpret_cast<uintptr_t>(dst) & 15;
  bool same = true;
  for (int k = 0; k < nsrcs; ++k) same &= (reinterpret_cast<uintptr_t>(s.p[k]) & 15) == mis;
  size_t head = count, nvec = 0;
  if (same) {
    head = mis ? (16 - mis) / sizeof(S) : 0;
    if (head > count) head = count;
    nvec = (count - head) / kPer;
  }
  constexpr int kThreads = 512;
  // One full wave: as many blocks as the SMs hold at once for this instantiation (its register use decides),
  // and the grid-stride loop covers the rest; a second wave would only add a tail. Small counts get a grid
  // sized to the work, so an 8-byte all-reduce launches one block. Computed once per instantiation, for the
  // device current at the first launch (ranks use one device each).
  static const int maxBlocks = [] {
    int dev = 0, sms = 0, perSm = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
      sms = 80;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, reduceKernel<Tag, K>, kThreads, 0) != cudaSuccess ||
        perSm < 1)
      perSm = 1;
    return sms * perSm;
  }();
  const size_t items = nvec + (count - nvec * kPer);  // vectors plus scalars, an upper bound on the parallel work
  size_t blocks = (items + kThreads - 1) / kThreads;
  if (blocks < 1) blocks = 1;
  if (blocks > static_cast<size_t>(maxBlocks)) blocks = static_cast<size_t>(maxBlocks);
  reduceKernel<Tag, K><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(dst, s, nsrcs, count, head, nvec);
  return cudaGetLastError();
}

template <class Tag>
cudaError_t launchOp(void* dst, const Sources& s, int nsrcs, size_t count, ReduceKind op, cudaStream_t stream) {
  switch (op) {
    case ReduceKind::kSum: return launchTyped<Tag, ReduceKind::kSum>(dst, s, nsrcs, count, stream);
    case ReduceKind::kProd: return launchTyped<Tag, ReduceKind::kProd>(dst, s, nsrcs, count, stream);
    case ReduceKind::kMax: return launchTyped<Tag, ReduceKind::kMax>(dst, s, nsrcs, count, stream);
    case ReduceKind::kMin: return launchTyped<Tag, ReduceKind::kMin>(dst, s, nsrcs, count, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

int cudaReduce(void* dst, const void* const* srcs, int nsrcs, size_t count, strataDataType_t dt, ReduceKind op,
               void* stream) {
  if (nsrcs < 1 || nsrcs > kCudaMaxReduceSources) return cudaErrorInvalidValue;
  if (count == 0) return cudaSuccess;
  const size_t esize = dtypeSize(dt);  // util/dtype.h: constexpr, nothing to link
  if (esize == 0) return cudaErrorInvalidValue;
  Sources s{};
  for (int k = 0; k < nsrcs; ++k) {
    if (!srcs[k] || reinterpret_cast<uintptr_t>(srcs[k]) % esize) return cudaErrorInvalidValue;
    s.p[k] = srcs[k];
  }
  if (!dst || reinterpret_cast<uintptr_t>(dst) % esize) return cudaErrorInvalidValue;
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  switch (dt) {
    case strataInt8: return launchOp<int8_t>(dst, s, nsrcs, count, op, st);
    case strataUint8: return launchOp<uint8_t>(dst, s, nsrcs, count, op, st);
    case strataInt32: return launchOp<int32_t>(dst, s, nsrcs, count, op, st);
    case strataUint32: return launchOp<uint32_t>(dst, s, nsrcs, count, op, st);
    case strataInt64: return launchOp<int64_t>(dst, s, nsrcs, count, op, st);
    case strataUint64: return launchOp<uint64_t>(dst, s, nsrcs, count, op, st);
    case strataFloat16: return launchOp<HalfTag>(dst, s, nsrcs, count, op, st);
    case strataFloat32: return launchOp<float>(dst, s, nsrcs, count, op, st);
    case strataFloat64: return launchOp<double>(dst, s, nsrcs, count, op, st);
    case strataBfloat16: return launchOp<Bf16Tag>(dst, s, nsrcs, count, op, st);
    case strataFloat8e4m3: return launchOp<E4m3Tag>(dst, s, nsrcs, count, op, st);
    case strataFloat8e5m2: return launchOp<E5m2Tag>(dst, s, nsrcs, count, op, st);
    default: break;
  }
  return cudaErrorInvalidValue;
}

// ---- stream-ordered flag wait, for devices without stream memory operations ---------------------------------
namespace {
__global__ void waitFlagKernel(volatile uint32_t* flag, uint32_t value) {
  while (static_cast<int32_t>(*flag - value) < 0) __nanosleep(200);
  __threadfence_system();
}
__global__ void writeFlagKernel(volatile uint32_t* flag, uint32_t value) {
  __threadfence_system();  // earlier work's writes are visible before the flag is
  *flag = value;
}
}  // namespace

int cudaWaitFlagKernel(void* stream, void* devAddr, uint32_t value) {
  waitFlagKernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(static_cast<volatile uint32_t*>(devAddr), value);
  return cudaGetLastError();
}

int cudaWriteFlagKernel(void* stream, void* devAddr, uint32_t value) {
  writeFlagKernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(static_cast<volatile uint32_t*>(devAddr), value);
  return cudaGetLastError();
}

}  // namespace strata
