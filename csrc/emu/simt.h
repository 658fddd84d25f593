// SIMT emulator: lets the real CUDA kernel sources compile as host C++ and run on the CPU.
//
// Each CUDA thread of a block is a fiber with its own stack. A fiber runs until it reaches a
// block barrier or a warp collective (shuffle, vote, __syncwarp), then yields. The scheduler
// releases a warp collective once every lane of the warp has arrived, and a barrier once every
// live thread of the block has. The order in which runnable fibers are resumed is a fresh
// pseudo-random permutation in every phase, so a kernel that relies on a barrier it does not
// have reads stale or poisoned shared memory and produces a wrong result; divergent
// collectives and deadlocks are reported as errors instead of hanging. Blocks run in parallel
// on host threads (one block per host thread at a time); __shared__ is thread_local storage
// and dynamic shared memory is poisoned with 0xFF bytes (NaN) at every block start.
//
// Environment, read once per process; a value that does not parse makes every launch fail with
// a message naming the variable, its value and the accepted range:
//   REPLAYSSM_EMU_THREADS  host threads blocks run on: decimal digits, 1..=64 (larger values are
//                          clamped to 64); default: the CPUs the process may run on, at most 64.
//   REPLAYSSM_EMU_SEED     base of the schedule's pseudo-random order: an unsigned 64-bit integer,
//                          decimal, 0x hexadecimal or 0 octal (strtoull base 0, the whole string).
// Resources: a launch maps at most 1 GiB of fiber stacks (256 KiB per CUDA thread per worker:
// 1024-thread blocks run on at most 4 host threads, 128-thread blocks on 32); helper threads
// have 1 MiB stacks; idle workers keep at most 1 GiB of stacks for later launches. When memory
// or threads run out a launch runs on the workers it could start, or fails with an error (never
// aborts the process).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __shared__ static thread_local

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct uint3 {
  unsigned x, y, z;
};

struct alignas(8) float2 {
  float x, y;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(8) int2 {
  int x, y;
};
struct alignas(16) int4 {
  int x, y, z, w;
};
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline int2 make_int2(int x, int y) { return {x, y}; }
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }

namespace rssm_emu {

enum class Collective : int { Shfl, ShflXor, ShflDown, ShflUp, All, Any, Ballot, SyncWarp };

struct ThreadCtx {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
};

// Context of the fiber running on this host thread.
ThreadCtx &ctx();
void syncthreads();
uint64_t warp_collective(Collective op, unsigned mask, uint64_t value, int arg, int width);
void *dynamic_smem();

// A kernel body as the emulator calls it: a function and its closure (no allocation, unlike
// std::function, so nothing can throw before the launch reports its own errors).
struct KernelBody {
  void (*call)(const void *closure);
  const void *closure;
  void operator()() const { call(closure); }
};
// Runs `body` once per thread of every block; returns 0 or an error (message in last_error()).
// Never throws and never aborts: running out of memory or threads is an error.
int launch(const char *name, dim3 grid, dim3 block, size_t dynamic_smem_bytes, const KernelBody &body);
template <class F> int launch_fn(const char *name, dim3 grid, dim3 block, size_t dynamic_smem_bytes, const F &f) {
  return launch(name, grid, block, dynamic_smem_bytes,
                KernelBody{[](const void *c) { (*static_cast<const F *>(c))(); }, &f});
}
const char *last_error();

template <class T> inline uint64_t to_bits(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffle of a type wider than 8 bytes");
  uint64_t u = 0;
  std::memcpy(&u, &v, sizeof(T));
  return u;
}
template <class T> inline T from_bits(uint64_t u) {
  T v;
  std::memcpy(&v, &u, sizeof(T));
  return v;
}

}  // namespace rssm_emu

#define threadIdx (::rssm_emu::ctx().thread_idx)
#define blockIdx (::rssm_emu::ctx().block_idx)
#define blockDim (::rssm_emu::ctx().block_dim)
#define gridDim (::rssm_emu::ctx().grid_dim)
#define warpSize 32

inline void __syncthreads() { ::rssm_emu::syncthreads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  ::rssm_emu::warp_collective(::rssm_emu::Collective::SyncWarp, mask, 0, 0, 32);
}
template <class T> inline T __shfl_sync(unsigned mask, T var, int src, int width = 32) {
  return rssm_emu::from_bits<T>(
      rssm_emu::warp_collective(rssm_emu::Collective::Shfl, mask, rssm_emu::to_bits(var), src, width));
}
template <class T> inline T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = 32) {
  return rssm_emu::from_bits<T>(
      rssm_emu::warp_collective(rssm_emu::Collective::ShflXor, mask, rssm_emu::to_bits(var), lane_mask, width));
}
template <class T> inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32) {
  return rssm_emu::from_bits<T>(rssm_emu::warp_collective(rssm_emu::Collective::ShflDown, mask,
                                                          rssm_emu::to_bits(var), static_cast<int>(delta), width));
}
template <class T> inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32) {
  return rssm_emu::from_bits<T>(rssm_emu::warp_collective(rssm_emu::Collective::ShflUp, mask,
                                                          rssm_emu::to_bits(var), static_cast<int>(delta), width));
}
inline int __all_sync(unsigned mask, int pred) {
  return static_cast<int>(rssm_emu::warp_collective(rssm_emu::Collective::All, mask, pred != 0, 0, 32));
}
inline int __any_sync(unsigned mask, int pred) {
  return static_cast<int>(rssm_emu::warp_collective(rssm_emu::Collective::Any, mask, pred != 0, 0, 32));
}
inline unsigned __ballot_sync(unsigned mask, int pred) {
  return static_cast<unsigned>(rssm_emu::warp_collective(rssm_emu::Collective::Ballot, mask, pred != 0, 0, 32));
}

// Atomics: blocks run on several host threads, so these are real atomics.
inline unsigned atomicOr(unsigned *addr, unsigned v) { return __atomic_fetch_or(addr, v, __ATOMIC_SEQ_CST); }
inline int atomicAdd(int *addr, int v) { return __atomic_fetch_add(addr, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicAdd(unsigned *addr, unsigned v) { return __atomic_fetch_add(addr, v, __ATOMIC_SEQ_CST); }
inline float atomicAdd(float *addr, float v) {
  uint32_t old_bits = __atomic_load_n(reinterpret_cast<uint32_t *>(addr), __ATOMIC_SEQ_CST);
  for (;;) {
    float old_v;
    std::memcpy(&old_v, &old_bits, 4);
    const float nv = old_v + v;
    uint32_t new_bits;
    std::memcpy(&new_bits, &nv, 4);
    if (__atomic_compare_exchange_n(reinterpret_cast<uint32_t *>(addr), &old_bits, new_bits, false,
                                    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
      return old_v;
  }
}
inline int atomicMax(int *addr, int v) {
  int old = __atomic_load_n(addr, __ATOMIC_SEQ_CST);
  while (old < v && !__atomic_compare_exchange_n(addr, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
  }
  return old;
}

// Math intrinsics the kernels use, mapped to the host's correctly rounded functions.
inline float __fsqrt_rn(float x) { return std::sqrt(x); }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline int __float_as_int(float x) { return rssm_emu::from_bits<int>(rssm_emu::to_bits(x)); }
inline float __int_as_float(int x) { return rssm_emu::from_bits<float>(rssm_emu::to_bits(x)); }
inline unsigned __float_as_uint(float x) { return rssm_emu::from_bits<unsigned>(rssm_emu::to_bits(x)); }
inline float __uint_as_float(unsigned x) { return rssm_emu::from_bits<float>(rssm_emu::to_bits(x)); }
// expf, logf, log1pf, sqrtf, fmaf come from <cmath> (glibc's are correctly rounded or nearly so).

// bf16 / f16 storage types with the CUDA conversion functions (round to nearest even).
struct __nv_bfloat16 {
  uint16_t bits;
};
struct __half {
  uint16_t bits;
};

inline float __bfloat162float(__nv_bfloat16 h) {
  uint32_t u = static_cast<uint32_t>(h.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline __nv_bfloat16 __float2bfloat16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return {static_cast<uint16_t>((u >> 16) | 0x40u)};  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return {static_cast<uint16_t>(u >> 16)};
}
float __half2float(__half h);
__half __float2half(float f);

// Dynamic shared memory: `RSSM_DYNAMIC_SMEM(float, buf);` declares `float *buf`.
#define RSSM_DYNAMIC_SMEM(type, name) type *name = static_cast<type *>(::rssm_emu::dynamic_smem())
// Kernel launch: synchronous; evaluates to the emulator's status (0 = launched and finished).
#define RSSM_LAUNCH(kernel, grid, block, smem, stream, ...) \
  (static_cast<void>(stream), ::rssm_emu::launch_fn(#kernel, (grid), (block), (smem), [&]() { kernel(__VA_ARGS__); }))
