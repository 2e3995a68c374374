// The GPU execution policy of the device protocol (device/proto.h): a lane's group is a thread block; atomics are
// cuda::atomic_ref at system scope (the memory may be a peer GPU's, mapped by CUDA IPC, or mapped host memory:
// the abort word); the clock is %globaltimer (ns); waiting backs off with __nanosleep. Include from .cu files.
#pragma once

#include <cstdint>
#include <cuda/atomic>

#include "device/dev_types.h"

namespace strata::devproto {

struct DevicePolicy {
  uint32_t* shared;  // one word of the block's shared memory: the leader's verdict

  // Threads that move consecutive 16-byte vectors (a warp), and the fewest threads a block has (the launch refuses
  // fewer): a piece's unaligned head and tail, at most kMaxEdgeElems elements, take one pass of the block.
  static constexpr uint32_t kWarp = 32;
  static constexpr uint32_t kMinThreads = 64;

  template <class T>
  static __device__ T loadAcquire(const T* p) {
    return cuda::atomic_ref<T, cuda::thread_scope_system>(*const_cast<T*>(p)).load(cuda::memory_order_acquire);
  }
  template <class T>
  static __device__ T loadRelaxed(const T* p) {
    return cuda::atomic_ref<T, cuda::thread_scope_system>(*const_cast<T*>(p)).load(cuda::memory_order_relaxed);
  }
  template <class T>
  static __device__ void storeRelease(T* p, T v) {
    cuda::atomic_ref<T, cuda::thread_scope_system>(*p).store(v, cuda::memory_order_release);
  }
  template <class T>
  static __device__ void storeRelaxed(T* p, T v) {
    cuda::atomic_ref<T, cuda::thread_scope_system>(*p).store(v, cuda::memory_order_relaxed);
  }
  static __device__ bool casU32(uint32_t* p, uint32_t expected, uint32_t desired) {
    return cuda::atomic_ref<uint32_t, cuda::thread_scope_system>(*p).compare_exchange_strong(
        expected, desired, cuda::memory_order_acq_rel);
  }
  static __device__ uint32_t fetchAddU32(uint32_t* p, uint32_t v) {
    return cuda::atomic_ref<uint32_t, cuda::thread_scope_system>(*p).fetch_add(v, cuda::memory_order_acq_rel);
  }
  // 16 bytes at a 16-byte aligned generic address (this GPU's memory or a peer's), as one instruction: written in
  // PTX so that the compiler cannot split it into narrower loads when it needs only some of the words.
  static __device__ __forceinline__ Vec16 load16(const void* p) {
    Vec16 v;
    asm volatile("ld.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.w[0]), "=r"(v.w[1]), "=r"(v.w[2]), "=r"(v.w[3])
                 : "l"(p)
                 : "memory");
    return v;
  }
  static __device__ __forceinline__ void store16(void* p, const Vec16& v) {
    asm volatile("st.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.w[0]), "r"(v.w[1]), "r"(v.w[2]), "r"(v.w[3])
                 : "memory");
  }
  // LL128 (device/proto.h), as NCCL's: eight threads of a warp write a 128-byte line with one 16-byte volatile
  // store each, the last thread's holding the flag, and read it with one 16-byte volatile load each; nothing orders
  // the eight stores but the hardware, which delivers a warp's stores to one aligned 128-byte line together over
  // NVLink (why LL128 is on only where every GPU pair of the host has NVLink, STRATA_GPU_LL128=auto).
  static constexpr uint32_t kLineThreads = 8;
  static __device__ __forceinline__ void storeLinePart(Vec16* p, const Vec16 (&v)[1], bool) {
    asm volatile("st.volatile.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v[0].w[0]), "r"(v[0].w[1]),
                 "r"(v[0].w[2]), "r"(v[0].w[3])
                 : "memory");
  }
  static __device__ __forceinline__ void loadLinePart(const Vec16* p, Vec16 (&v)[1], bool) {
    asm volatile("ld.volatile.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v[0].w[0]), "=r"(v[0].w[1]), "=r"(v[0].w[2]), "=r"(v[0].w[3])
                 : "l"(p)
                 : "memory");
  }
  // A warp's vote: every thread of the warp calls it together.
  static __device__ bool warpAll(bool x) { return __all_sync(0xffffffffu, x); }
  static __device__ bool warpAny(bool x) { return __any_sync(0xffffffffu, x); }

  static __device__ uint64_t nowNs() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
  }

  __device__ uint32_t tid() const { return threadIdx.x; }
  __device__ uint32_t nthreads() const { return blockDim.x; }
  __device__ void sync() const { __syncthreads(); }
  // The leader's value, seen by every thread of the block.
  __device__ uint32_t broadcast(uint32_t v) const {
    if (threadIdx.x == 0) *shared = v;
    __syncthreads();
    const uint32_t out = *shared;
    __syncthreads();
    return out;
  }
  __device__ uint32_t anyFailed(uint32_t v) const { return __syncthreads_or(v != 0) ? 1u : 0u; }
  // The block's data writes, made visible system-wide before the leader's release of a head.
  __device__ void fenceSystem() const { __threadfence_system(); }
  __device__ void backoff(uint32_t spins) const {
    if (spins > 1024) __nanosleep(spins > 65536 ? 1000 : 100);
  }
};

}  // namespace strata::devproto
