// Kernel P (fp32 checkpoint replay of one layer), design §4 P, and the replay F builds on
// (device/fold.cuh; its path mode FT commits an accepted root-to-node path of a draft tree).
// Both replay records of a slot's spec ring into its checkpoint through replay_slot(), which runs
// the very same load_key / decay_from_log / delta_rule_update sequence as kernel R, so the
// committed state is bit-identical to R's after the same tokens (for FT: the tokens along the path).
#pragma once

#include <type_traits>

#include "replayssm/device/delta_rule.cuh"
#include "replayssm/device/tiling.cuh"
#include "replayssm/replayssm.h"
#include "replayssm/smem.h"

namespace rssm {

// The tiling of P's and F's implementation PREFETCH selects.
template <int EPL, bool PREFETCH>
using ReplayTilingOf = typename std::conditional<PREFETCH, RowTiling, ReplayTiling<EPL>>::type;

// Pool and ring geometry of a replay (from P's or F's params).
struct RingGeometry {
  float *state;  // [NL, NS, HV, V, K]
  const void *ring_v, *ring_k;
  const float *ring_g, *ring_beta;
  uint32_t *error_word;
  int num_slots, window, H, HV, K, V;
  bool l2norm;
  int64_t state_slot_stride, state_layer_stride;  // elements, 0 = packed (the params' fields)
};

// The geometry of a replay from the params base and the spec ring (P, F and VF alike).
__device__ __forceinline__ RingGeometry ring_geometry(const rssm_base_params &b, const rssm_ring_params &r) {
  return RingGeometry{b.state, r.v,   r.k,   r.g,  r.beta, b.error_word,       b.num_slots,       r.window,
                      b.H,     b.HV,  b.K,   b.V,  b.qk_l2norm != 0,          b.state_slot_stride, b.state_layer_stride};
}

// One warp's view of a replay: its ROWS rows of the checkpoint (and of a track slot) and the
// slot's ring records, addressed once for both implementations of the replay. `tile` is the
// block's tile (4 warps of ROWS rows) of value head blockIdx.y.
template <int EPL, class Act, bool KDA, int ROWS_PER_WARP = RowTiling::kRows> struct ReplayRows {
  static constexpr int K = kWarpSize * EPL;
  static constexpr int ROWS = ROWS_PER_WARP;
  int block_row0, row0, kc, V;
  bool row_ok[ROWS];
  bool l2norm;
  float *state, *track;  // this lane's first channel of the warp's row 0; track NULL = none
  const Act *rk;         // record 0's raw key, this lane's channels
  const Act *rv;         // record 0's raw v, the block's row 0
  const float *rg, *rb;  // record 0's log decay (this lane's channels for KDA) and beta

  __device__ __forceinline__ ReplayRows(const RingGeometry &geo, int tile, int layer, int slot, int track_slot) {
    const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
    const int hv = blockIdx.y, h = hv / (geo.HV / geo.H);
    block_row0 = tile * RowTiling::kWarps * ROWS;
    row0 = block_row0 + warp * ROWS;
    kc = lane * EPL;
    V = geo.V;
    l2norm = geo.l2norm;
    RSSM_UNROLL
    for (int r = 0; r < ROWS; ++r) row_ok[r] = row0 + r < geo.V;
    const int64_t head = int64_t(geo.V) * K, slot_base = int64_t(layer) * geo.num_slots;
    const int64_t rows_at = hv * head + int64_t(row0) * K + kc;
    const int64_t slot_elems = geo.HV * head;
    state = geo.state +
            state_offset(geo.state_slot_stride, geo.state_layer_stride, layer, slot, geo.num_slots, slot_elems) +
            rows_at;
    track = track_slot >= 0 ? geo.state +
                                  state_offset(geo.state_slot_stride, geo.state_layer_stride, layer, track_slot,
                                               geo.num_slots, slot_elems) +
                                  rows_at
                            : nullptr;
    const int64_t W = geo.window;
    rk = static_cast<const Act *>(geo.ring_k) + ((slot_base + slot) * geo.H + h) * W * K + kc;
    rv = static_cast<const Act *>(geo.ring_v) + ((slot_base + slot) * geo.HV + hv) * W * geo.V + block_row0;
    const int64_t gate_base = ((slot_base + slot) * geo.HV + hv) * W;
    rg = geo.ring_g + (KDA ? gate_base * K + kc : gate_base);
    rb = geo.ring_beta + gate_base;
  }

  // Record t's key (normalised when the ring asks) and decay factors, in this lane's channels.
  // Whole warp.
  __device__ __forceinline__ void record(int t, float (&kh)[EPL], Decay<EPL, KDA> &decay) const {
    load_key(rk + int64_t(t) * K, l2norm, kh);
    float g[KDA ? EPL : 1];
    RSSM_UNROLL
    for (int j = 0; j < (KDA ? EPL : 1); ++j) g[j] = rg[KDA ? int64_t(t) * K + j : t];
    decay = decay_from_log<EPL, KDA>(g);
  }

  // Record t's v at row `r` of the block (0 past V).
  __device__ __forceinline__ float v(int t, int r) const {
    return block_row0 + r < V ? to_float(rv[int64_t(t) * V + r]) : 0.0f;
  }
};

// The step loop of replay_slot on state rows already in registers (VF keeps them for its verify).
template <int EPL, class Act, bool KDA, int ROWS>
__device__ __forceinline__ void replay_steps(const ReplayRows<EPL, Act, KDA, ROWS> &w, int n, int track_step,
                                             const int32_t *path, float (&s)[ROWS][EPL]) {
  constexpr int K = ReplayRows<EPL, Act, KDA, ROWS>::K;
  const int my_rows = w.row0 - w.block_row0;
  for (int step = 0; step < n; ++step) {
    const int t = path ? path[step] : step;  // ring position of this step's record
    float kh[EPL];
    Decay<EPL, KDA> decay;
    w.record(t, kh, decay);
    float vr[ROWS];
    RSSM_UNROLL
    for (int r = 0; r < ROWS; ++r) vr[r] = w.v(t, my_rows + r);
    delta_rule_update<EPL, ROWS, KDA>(s, kh, decay, w.rb[t], vr);
    if (w.track && step == track_step) store_rows(w.track, K, w.row_ok, s);
  }
}

// Replays n records of `slot` (layer `layer`) into this warp's rows of the checkpoint: records
// 0..n-1, or path[0..n-1] when `path` is set (checked by the caller); when `track_slot >= 0`,
// also stores the state after step `track_step` into that slot.
template <int EPL, class Act, bool KDA>
__device__ __forceinline__ void replay_slot(const RingGeometry &geo, int tile, int layer, int slot, int n,
                                            int track_slot, int track_step, const int32_t *path = nullptr) {
  using Rows = ReplayRows<EPL, Act, KDA, ReplayTiling<EPL>::kRows>;
  constexpr int K = Rows::K, ROWS = Rows::ROWS;
  const Rows w(geo, tile, layer, slot, track_slot);
  float s[ROWS][EPL];
  load_rows(w.state, K, w.row_ok, s);
  replay_steps(w, n, track_step, path, s);
  store_rows(w.state, K, w.row_ok, s);
}

// RSSM_IMPL_PREFETCH of replay_slot: the same float operations in the same order (so the same
// bits), with every load hoisted out of the step loop. The state load is issued first; the n
// records are then read once per block (each warp normalises its share of the keys with the
// warp layout the step uses, so a key's bits do not depend on which warp normalised it) into
// shared memory, and the step loop touches only shared memory and registers. Every thread of the
// block must call it (one barrier); rows past V are computed as zeros and never stored.
template <int EPL, class Act, bool KDA>
__device__ __forceinline__ void replay_slot_prefetch(const RingGeometry &geo, int tile, int layer, int slot, int n,
                                                     int track_slot, int track_step, const int32_t *path) {
  using Rows = ReplayRows<EPL, Act, KDA>;
  constexpr int K = Rows::K, ROWS = Rows::ROWS;
  constexpr int RB = RowTiling::kRowsPerBlock;
  constexpr int GW = KDA ? EPL : 1;  // decay values per lane
  static_assert(RB == 16, "replay_prefetch_smem_floats stages 16 rows of v per record");
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const Rows w(geo, tile, layer, slot, track_slot);
  const int kc = w.kc;
  float s[ROWS][EPL];
  load_rows(w.state, K, w.row_ok, s);  // in flight while the records are staged

  const int W = geo.window;
  RSSM_DYNAMIC_SMEM(float, smem);
  float *key_s = smem;                                   // [n][K]
  float *decay_s = key_s + int64_t(W) * K;               // [n][K] (KDA) or [n]
  float *beta_s = decay_s + int64_t(W) * (KDA ? K : 1);  // [n]
  float *v_s = beta_s + W;                               // [n][16]
  for (int step = warp; step < n; step += RowTiling::kWarps) {
    const int t = path ? path[step] : step;
    float kh[EPL];
    Decay<EPL, KDA> decay;
    w.record(t, kh, decay);
    RSSM_UNROLL
    for (int j = 0; j < EPL; ++j) key_s[step * K + kc + j] = kh[j];
    if constexpr (KDA) {
      RSSM_UNROLL
      for (int j = 0; j < EPL; ++j) decay_s[step * K + kc + j] = decay.d[j];
    } else if (lane == 0) {
      decay_s[step] = decay.d[0];
    }
    if (lane == 0) beta_s[step] = w.rb[t];
  }
  for (int i = threadIdx.x; i < n * RB; i += RowTiling::kThreads) {
    const int step = i / RB;
    v_s[i] = w.v(path ? path[step] : step, i % RB);
  }
  __syncthreads();
  for (int step = 0; step < n; ++step) {
    float kh[EPL];
    RSSM_UNROLL
    for (int j = 0; j < EPL; ++j) kh[j] = key_s[step * K + kc + j];
    Decay<EPL, KDA> decay;
    RSSM_UNROLL
    for (int j = 0; j < GW; ++j) decay.d[j] = KDA ? decay_s[step * K + kc + j] : decay_s[step];
    float vr[ROWS];
    RSSM_UNROLL
    for (int r = 0; r < ROWS; ++r) vr[r] = v_s[step * RB + warp * ROWS + r];
    delta_rule_update<EPL, ROWS, KDA>(s, kh, decay, beta_s[step], vr);
    if (w.track && step == track_step) store_rows(w.track, K, w.row_ok, s);
  }
  store_rows(w.state, K, w.row_ok, s);
}

// Replays into this block's rows with the implementation PREFETCH selects (a compile-time choice:
// each implementation is its own kernel instantiation).
template <int EPL, class Act, bool KDA, bool PREFETCH>
__device__ __forceinline__ void replay_rows(const RingGeometry &geo, int tile, int layer, int slot, int n,
                                            int track_slot, int track_step, const int32_t *path) {
  if constexpr (PREFETCH)
    replay_slot_prefetch<EPL, Act, KDA>(geo, tile, layer, slot, n, track_slot, track_step, path);
  else
    replay_slot<EPL, Act, KDA>(geo, tile, layer, slot, n, track_slot, track_step, path);
}

// Device-side checks of request b's indices; false = skip it (flagged when invalid). A live slot
// shared with another request skips both (their state writes would race). Every lane of the warp
// calls it (the duplicate scan is a warp collective).
__device__ __forceinline__ bool replay_indices_ok(const RingGeometry &geo, const int32_t *slots, int batch, int b,
                                                  int slot, int n, bool report) {
  if (slot == -1) return false;
  if (slot < -1 || slot >= geo.num_slots) {
    if (report) report_device_error(geo.error_word, RSSM_DEVERR_SLOT_OUT_OF_RANGE);
    return false;
  }
  if (warp_find_other(slots, batch, b, slot)) {
    if (report) report_device_error(geo.error_word, RSSM_DEVERR_DUPLICATE_SLOT);
    return false;
  }
  if (n < 0 || n > geo.window) {
    if (report) report_device_error(geo.error_word, RSSM_DEVERR_BAD_LENGTH);
    return false;
  }
  return n > 0;
}

// Length of request b's accepted path (FT): its entries before the first -1, each a ring position
// below the window and larger than the previous one (a root path in topological order). -1 =
// invalid.
__device__ __forceinline__ int accepted_path_length(const int32_t *row, int width, int window) {
  int n = 0;
  for (; n < width && row[n] != -1; ++n)
    if (row[n] < 0 || row[n] >= window || (n > 0 && row[n] <= row[n - 1])) return -1;
  return n;
}

// The track of request b (F, VF), checked before the request's own indices so that a track on a row
// that commits nothing is flagged too: the engine must not believe a prefix-cache snapshot exists.
// Returns the track slot to store into, or -1 (none, or flagged). Every lane of the warp calls it
// (the duplicate scans are warp collectives).
__device__ __forceinline__ int checked_track(const int32_t *slots, const int32_t *track_slots,
                                             const int32_t *track_steps, int batch, int num_slots, int b, int slot,
                                             int n, uint32_t *error_word, bool report) {
  const int track_slot = track_slots ? track_slots[b] : -1;
  const int track_step = track_steps ? track_steps[b] : -1;
  if (track_slot == -1) return -1;
  uint32_t bad = 0;
  if (track_slot < -1 || track_slot >= num_slots)
    bad = RSSM_DEVERR_TRACK_SLOT;
  else if (warp_find_other(slots, batch, -1, track_slot) || warp_find_other(track_slots, batch, b, track_slot))
    bad = RSSM_DEVERR_DUPLICATE_SLOT;  // a live slot's checkpoint, or another row's track
  else if (slot < 0 || track_step < 0 || track_step >= n)
    bad = RSSM_DEVERR_TRACK_STEP;  // (n < 0, a bad path, is flagged by the caller)
  if (bad) {
    if (report) report_device_error(error_word, bad);
    return -1;
  }
  return track_slot;
}

// (The min-blocks hint of 1 keeps ptxas from a heuristic register cap that spilled 8 bytes in
// replay_kernel<8, float, false>; tests/resources.rs guards it.)
template <int EPL, class Act, bool KDA, bool PREFETCH>
__global__ void __launch_bounds__(RowTiling::kThreads, 1) replay_kernel(const rssm_replay_params p) {
  using Tiling = ReplayTilingOf<EPL, PREFETCH>;
  const int warp = threadIdx.x / kWarpSize;
  // (PREFETCH keeps every warp: its records are staged behind a block barrier.)
  if (!PREFETCH && int((blockIdx.x * Tiling::kWarps + warp) * Tiling::kRows) >= p.base.V) return;
  const RingGeometry geo = ring_geometry(p.base, p.ring);
  const int b = blockIdx.z;
  const int slot = p.base.slots[b], n = p.counts[b];
  const bool reporter = blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0;
  if (!replay_indices_ok(geo, p.base.slots, p.base.batch, b, slot, n, reporter)) return;
  replay_rows<EPL, Act, KDA, PREFETCH>(geo, blockIdx.x, p.base.layer, slot, n, -1, -1, nullptr);
}

}  // namespace rssm
