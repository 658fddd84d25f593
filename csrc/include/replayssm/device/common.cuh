// Device helpers shared by every kernel: dtype conversion, vector loads, warp reductions.
#pragma once

#include <stdint.h>

#include "replayssm/device/compat.cuh"
#include "replayssm/replayssm.h"  // the RSSM_DEVERR_* bits

namespace rssm {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarpSize = 32;

template <class T> __device__ __forceinline__ float to_float(T x);
template <> __device__ __forceinline__ float to_float<float>(float x) { return x; }
template <> __device__ __forceinline__ float to_float<__half>(__half x) { return __half2float(x); }
template <> __device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }

template <class T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16(x); }

// N consecutive floats. Under CUDA the widest aligned vector load: the launcher guarantees 16-byte
// aligned bases and every lane's chunk starts at a multiple of N floats.
template <int N> __device__ __forceinline__ void load_f32(const float *__restrict__ p, float (&x)[N]) {
#if defined(RSSM_EMULATION)
  std::memcpy(x, p, sizeof x);
#else
  if constexpr (N % 4 == 0) {
    RSSM_UNROLL
    for (int i = 0; i < N / 4; ++i) {
      const float4 t = reinterpret_cast<const float4 *>(p)[i];
      x[4 * i] = t.x, x[4 * i + 1] = t.y, x[4 * i + 2] = t.z, x[4 * i + 3] = t.w;
    }
  } else if constexpr (N % 2 == 0) {
    RSSM_UNROLL
    for (int i = 0; i < N / 2; ++i) {
      const float2 t = reinterpret_cast<const float2 *>(p)[i];
      x[2 * i] = t.x, x[2 * i + 1] = t.y;
    }
  } else {
    RSSM_UNROLL
    for (int i = 0; i < N; ++i) x[i] = p[i];
  }
#endif
}

template <int N> __device__ __forceinline__ void store_f32(float *__restrict__ p, const float (&x)[N]) {
#if defined(RSSM_EMULATION)
  std::memcpy(p, x, sizeof x);
#else
  if constexpr (N % 4 == 0) {
    RSSM_UNROLL
    for (int i = 0; i < N / 4; ++i)
      reinterpret_cast<float4 *>(p)[i] = make_float4(x[4 * i], x[4 * i + 1], x[4 * i + 2], x[4 * i + 3]);
  } else if constexpr (N % 2 == 0) {
    RSSM_UNROLL
    for (int i = 0; i < N / 2; ++i) reinterpret_cast<float2 *>(p)[i] = make_float2(x[2 * i], x[2 * i + 1]);
  } else {
    RSSM_UNROLL
    for (int i = 0; i < N; ++i) p[i] = x[i];
  }
#endif
}

template <class Act, int N> __device__ __forceinline__ void load_act(const Act *__restrict__ p, float (&x)[N]) {
  RSSM_UNROLL
  for (int i = 0; i < N; ++i) x[i] = to_float(p[i]);
}

// 16 bytes of activations (16 / sizeof(Act) values) converted from floats and stored at once; `p`
// is 16-byte aligned.
template <class Act> __device__ __forceinline__ void store_act16(Act *p, const float *x) {
  constexpr int N = 16 / int(sizeof(Act));
  Act v[N];
  RSSM_UNROLL
  for (int i = 0; i < N; ++i) v[i] = from_float<Act>(x[i]);
  int4 bits;
  memcpy(&bits, v, sizeof bits);
  *reinterpret_cast<int4 *>(p) = bits;
}

// The reduce-scatter levels of warp_sum from offset OFFSET on, N values still held (at the front
// of x), then the full butterfly's remaining levels on the one left.
template <int N, int OFFSET, int TOTAL> __device__ __forceinline__ void warp_scatter(float (&x)[TOTAL], int lane) {
  if constexpr (N > 1) {
    const bool upper = (lane & OFFSET) != 0;
    RSSM_UNROLL
    for (int i = 0; i < N / 2; ++i) {
      const float keep = upper ? x[i + N / 2] : x[i];
      const float give = upper ? x[i] : x[i + N / 2];
      x[i] = keep + __shfl_xor_sync(kFullMask, give, OFFSET);
    }
    warp_scatter<N / 2, OFFSET / 2>(x, lane);
  } else {
    RSSM_UNROLL
    for (int offset = OFFSET; offset > 0; offset >>= 1) x[0] += __shfl_xor_sync(kFullMask, x[0], offset);
  }
}

// The reduce-scatter of staged V, whose lanes keep value j in slot j ^ lane down to the last
// SELECTED values: while more are held, a lane keeps its front half and adds the partner's back
// half (the same values: the partner's slots are flipped in that bit); the last levels select as
// warp_scatter does. After it lane l holds the sum of value l (N = 32). Not the butterfly's bits
// (V is checked by tolerance, not bit for bit).
template <int N, int OFFSET, int SELECTED, int TOTAL>
__device__ __forceinline__ void warp_scatter_front(float (&x)[TOTAL], int lane) {
  if constexpr (N > SELECTED) {
    RSSM_UNROLL
    for (int i = 0; i < N / 2; ++i) x[i] += __shfl_xor_sync(kFullMask, x[i + N / 2], OFFSET);
    warp_scatter_front<N / 2, OFFSET / 2, SELECTED>(x, lane);
  } else {
    warp_scatter<N, OFFSET>(x, lane);
  }
}

// Butterfly sum of N independent values across the warp. Every lane ends with the same bits
// (float addition is commutative), and the tree is fixed: the fold, the replay and the recurrent
// kernel all reduce through here, which is what makes their states bit-identical.
//
// For N = 2^m values (2 <= N <= 32) the first m levels reduce-scatter: at offset o a lane keeps
// the half of its values its lane bit o selects and adds the partner's copy of that half, so
// after m levels it holds one value's partial sum, and the remaining levels and a broadcast of
// each value from the lane holding it finish. Each partial sum is the butterfly's (the same two
// operands at every level: a lane and its partner share the bits that chose the half), so the
// result is the full butterfly's bit for bit, in N - 1 + 5 - m additions and exchanges plus N
// broadcasts instead of 5 N of each (at N = 8: 9 additions and 17 shuffles instead of 40 and 40).
template <int N> __device__ __forceinline__ void warp_sum(float (&x)[N]) {
  if constexpr (N >= 2 && N <= kWarpSize && (N & (N - 1)) == 0) {
    warp_scatter<N, kWarpSize / 2>(x, int(threadIdx.x) % kWarpSize);
    // Value i ended in the lanes whose scatter bits (offsets 16, 8, ... for i's bits from the
    // most significant down) spell i.
    const float mine = x[0];
    RSSM_UNROLL
    for (int i = 0; i < N; ++i) {
      int src = 0;
      RSSM_UNROLL
      for (int bit = N / 2, offset = kWarpSize / 2; bit > 0; bit >>= 1, offset >>= 1)
        if (i & bit) src |= offset;
      x[i] = __shfl_sync(kFullMask, mine, src);
    }
  } else {
    RSSM_UNROLL
    for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
      RSSM_UNROLL
      for (int i = 0; i < N; ++i) x[i] += __shfl_xor_sync(kFullMask, x[i], offset);
    }
  }
}

// Offset of (layer, slot)'s checkpoint in a pool whose slot and layer pitches (elements) are given,
// 0 = packed ([NL, NS, HV, V, K]): an engine's page-major pool has both set (params docs).
__device__ __forceinline__ int64_t state_offset(int64_t slot_stride, int64_t layer_stride, int layer, int slot,
                                                int num_slots, int64_t slot_elems) {
  const int64_t ss = slot_stride ? slot_stride : slot_elems;
  const int64_t ls = layer_stride ? layer_stride : ss * num_slots;
  return int64_t(layer) * ls + int64_t(slot) * ss;
}

__device__ __forceinline__ void report_device_error(uint32_t *error_word, uint32_t bit) {
  if (error_word) atomicOr(reinterpret_cast<unsigned *>(error_word), bit);
}

// cu_seqlens must cover every token: start at 0 and end at num_tokens. When it does not, the
// first (or last) request is skipped as a BAD_SEQLENS one, and its blocks zero columns
// [col0, col0 + ncols) of its tokens and of the uncovered ones (threads tid, tid + nthreads, ...),
// so no output of the launch is left unwritten. Called where the request is skipped (an early
// exit, so none of it is live in the kernel's main path). The host refuses such a cu_seqlens
// where it can read it.
__device__ __forceinline__ bool seqlens_uncovered(const int32_t *cu, int batch, int num_tokens, int req) {
  return (req == 0 && cu[0] != 0) || (req == batch - 1 && cu[batch] != num_tokens);
}

template <class Act>
__device__ __forceinline__ void zero_uncovered_tokens(const int32_t *cu, int batch, int num_tokens, int req, void *out,
                                                      int64_t o_stride, int64_t col0, int ncols, int tid,
                                                      int nthreads) {
  const auto clamp = [num_tokens](int x) { return x < 0 ? 0 : x > num_tokens ? num_tokens : x; };
  // [0, head) for the first request, [tail, num_tokens) for the last; nothing where covered.
  int head = 0, tail = num_tokens;
  if (req == 0 && cu[0] != 0) head = clamp(cu[0]) > clamp(cu[1]) ? clamp(cu[0]) : clamp(cu[1]);
  if (req == batch - 1 && cu[batch] != num_tokens)
    tail = clamp(cu[batch - 1]) < clamp(cu[batch]) ? clamp(cu[batch - 1]) : clamp(cu[batch]);
  Act *o = static_cast<Act *>(out) + col0;
  for (int tok = head > 0 ? 0 : tail; tok < num_tokens; ++tok) {
    if (tok == head && tail > head) tok = tail;  // past the tokens other requests cover
    if (tok >= num_tokens) break;
    for (int c = tid; c < ncols; c += nthreads) o[int64_t(tok) * o_stride + c] = from_float<Act>(0.0f);
  }
}

// Whether `value` occurs in values[0..n) at an index other than `self` (-1: at any index). Two rows
// of one launch on the same slot would race on its state, so the kernels check this on the device
// (the host never sees the indices under graph replay) without sorting or scratch memory: the warp
// scans cooperatively, lane i reading i, i+32, ...: n/32 coalesced loads per warp, then one vote.
// Every lane of the warp must call it with the same arguments; all get the same answer.
__device__ __forceinline__ bool warp_find_other(const int32_t *values, int n, int self, int32_t value) {
  const int lane = threadIdx.x % kWarpSize;
  bool found = false;
  for (int i = lane; i < n; i += kWarpSize) found |= i != self && values[i] == value;
  return __any_sync(kFullMask, found) != 0;
}

// The same for one thread on its own (kernels whose threads are rows, e.g. the cursor kernel).
__device__ __forceinline__ bool thread_find_other(const int32_t *values, int n, int self, int32_t value) {
  bool found = false;
  for (int i = 0; i < n; ++i) found |= i != self && values[i] == value;
  return found;
}

// Row b's slot in a bookkeeping kernel (one thread per row): -1 when the row is skipped, either
// null (slot -1) or flagged (a slot outside 0..num_slots-1, or a live slot another row repeats:
// both rows would write one entry).
__device__ __forceinline__ int32_t bookkeeping_slot(const int32_t *slots, int batch, int b, int num_slots,
                                                   uint32_t *error_word) {
  const int32_t slot = slots[b];
  if (slot == -1) return -1;
  if (slot < -1 || slot >= num_slots) {
    report_device_error(error_word, RSSM_DEVERR_SLOT_OUT_OF_RANGE);
    return -1;
  }
  if (thread_find_other(slots, batch, b, slot)) {
    report_device_error(error_word, RSSM_DEVERR_DUPLICATE_SLOT);
    return -1;
  }
  return slot;
}

}  // namespace rssm
