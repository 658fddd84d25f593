// Kernel D, buffered decode (design §4 D), and its materialise entry. A warp rebuilds its rows of
// S_{t-1} in registers from the checkpoint and the m pending ring records (delta_rule_apply:
// the same float operations as kernel R), then runs R's update and readout for the new token.
// Only the registers hold S_{t-1}: the checkpoint is read once and written on flush steps only.
// Rec is the element type of the ring's u and k^: f32, where the flushed state equals R's bit for
// bit for any L, or the activations' f16/bf16, where the update itself uses the rounded values
// (delta_rule_update's Rec) and the flushed state equals R's with record_dtype = Rec.
#pragma once

#include <type_traits>

#include "replayssm/device/delta_rule.cuh"
#include "replayssm/device/tiling.cuh"
#include "replayssm/replayssm.h"

namespace rssm {

// Pool and ring geometry of one D launch.
template <class Rec> struct DecodeGeometry {
  float *state;
  Rec *ring_d, *ring_k;
  float *ring_g;
  int num_slots, L, H, HV, K, V;
  int64_t state_slot_stride, state_layer_stride;  // elements, 0 = packed (the params' fields)

  // (layer, slot) row of the pool, ring and cursor arrays.
  __device__ __forceinline__ int64_t ls(int layer, int slot) const { return int64_t(layer) * num_slots + slot; }
  __device__ __forceinline__ float *state_rows(int layer, int slot, int hv, int row0) const {
    const int64_t head = int64_t(V) * K;
    return state + state_offset(state_slot_stride, state_layer_stride, layer, slot, num_slots, HV * head) +
           hv * head + int64_t(row0) * K;
  }
  __device__ __forceinline__ Rec *d_at(int layer, int slot, int hv, int pos) const {
    return ring_d + ((ls(layer, slot) * HV + hv) * L + pos) * int64_t(V);
  }
  __device__ __forceinline__ Rec *k_at(int layer, int slot, int h, int pos) const {
    return ring_k + ((ls(layer, slot) * H + h) * L + pos) * int64_t(K);
  }
  // One float per record (GDN) or K of them (KDA).
  __device__ __forceinline__ float *g_at(int layer, int slot, int hv, int pos, bool kda) const {
    const int64_t rec = (ls(layer, slot) * HV + hv) * L + pos;
    return ring_g + (kda ? rec * K : rec);
  }

  __device__ __forceinline__ static DecodeGeometry of(const rssm_decode_params &p, int K) {
    return {p.base.state, static_cast<Rec *>(p.ring_d), static_cast<Rec *>(p.ring_k), p.ring_g, p.base.num_slots,
            p.cache_len, p.base.H, p.base.HV, K, p.base.V, p.base.state_slot_stride, p.base.state_layer_stride};
  }
};

// N record values: f32 with the widest vector load, f16/bf16 converted.
template <class Rec, int N> __device__ __forceinline__ void load_record(const Rec *__restrict__ p, float (&x)[N]) {
  if constexpr (std::is_same_v<Rec, float>)
    load_f32(p, x);
  else
    load_act(p, x);
}

// N record values stored (already rounded where Rec is f16/bf16: the conversion is exact).
template <class Rec, int N> __device__ __forceinline__ void store_record(Rec *__restrict__ p, const float (&x)[N]) {
  if constexpr (std::is_same_v<Rec, float>) {
    store_f32(p, x);
  } else {
    RSSM_UNROLL
    for (int i = 0; i < N; ++i) p[i] = from_float<Rec>(x[i]);
  }
}

// Replays pending records 0..m-1 of (layer, slot, hv) into this warp's rows `s`.
template <int EPL, int ROWS, bool KDA, class Rec>
__device__ __forceinline__ void replay_pending(const DecodeGeometry<Rec> &geo, int layer, int slot, int hv, int row0,
                                               const bool (&row_ok)[ROWS], int m, float (&s)[ROWS][EPL]) {
  const int h = hv / (geo.HV / geo.H);
  const int kc = (threadIdx.x % kWarpSize) * EPL;
  for (int j = 0; j < m; ++j) {
    float kh[EPL];
    load_record(geo.k_at(layer, slot, h, j) + kc, kh);
    float g[KDA ? EPL : 1];
    const float *gp = geo.g_at(layer, slot, hv, j, KDA);
    RSSM_UNROLL
    for (int i = 0; i < (KDA ? EPL : 1); ++i) g[i] = gp[KDA ? kc + i : 0];
    const Rec *d = geo.d_at(layer, slot, hv, j) + row0;
    float u[ROWS];  // loaded before the decay is computed: one round trip for the whole record
    RSSM_UNROLL
    for (int r = 0; r < ROWS; ++r) u[r] = row_ok[r] ? to_float(d[r]) : 0.0f;
    const Decay<EPL, KDA> decay = decay_from_log<EPL, KDA>(g);
    delta_rule_apply<EPL, ROWS, KDA>(s, kh, decay, u);
  }
}

// The new token's k^ and q^ (normalised where asked, q^ scaled) and, for KDA, its per-channel g and
// exp(g): the same for every warp of a block, so the block computes each channel once. Thread i
// computes channels i, i + 128, ..., with each warp's own norms (the full reduction, as load_key
// does) and the float operations of load_key, token_gate and decay_from_log, so the values are
// those a warp computes alone, bit for bit; a warp does a quarter of the divisions, gates and
// exponentials it did alone. (GDN's gate is one value per token: every warp computes it itself.)
// The tile is dynamic shared memory (smem.h's decode_smem_floats), which the emulator poisons at
// every block start: a channel read before the barrier or never written reads NaN there.
template <int EPL, bool KDA> struct TokenTile {
  static constexpr int K = kWarpSize * EPL;
  float *kh, *qh, *g, *decay;  // [K] each; g and decay KDA only

  __device__ __forceinline__ static TokenTile at(float *smem) {
    return {smem, smem + K, KDA ? smem + 2 * K : nullptr, KDA ? smem + 3 * K : nullptr};
  }
};

// What one thread reads for its share of the TokenTile, loaded apart from the computation so
// that PREFETCH can issue it before anything else.
template <int EPL, class Act, bool KDA> struct TokenInputs {
  static constexpr int K = kWarpSize * EPL;
  static constexpr int N = (K + RowTiling::kThreads - 1) / RowTiling::kThreads;  // channels per thread
  static_assert(ReplayTiling<EPL>::kThreads == RowTiling::kThreads, "kernel D's blocks are RowTiling's");
  int c[N];  // past K (K < 128) a thread reads a valid channel and stores nothing
  float kv[EPL], qv[EPL], kx[N], qx[N];
  KdaGateInputs<N, Act> gate;

  __device__ __forceinline__ void load(const rssm_decode_params &p, int64_t tok, int hv, int h) {
    const int kc = (threadIdx.x % kWarpSize) * EPL;
    const Act *k = static_cast<const Act *>(p.tokens.k) + tok * p.tokens.k_stride + int64_t(h) * K;
    const Act *q = static_cast<const Act *>(p.tokens.q) + tok * p.tokens.q_stride + int64_t(h) * K;
    RSSM_UNROLL
    for (int i = 0; i < N; ++i) c[i] = (int(threadIdx.x) + i * RowTiling::kThreads) % K;
    load_act(k + kc, kv);
    load_act(q + kc, qv);
    RSSM_UNROLL
    for (int i = 0; i < N; ++i) {
      kx[i] = to_float(k[c[i]]);
      qx[i] = to_float(q[c[i]]);
    }
    if constexpr (KDA) gate.load(GateSource::of(p.tokens, p.base.HV), tok, hv, K, c);
  }

  // Computes this thread's channels into `t`. Whole warp (the norms).
  __device__ __forceinline__ void share(const rssm_decode_params &p, const TokenTile<EPL, KDA> &t) {
    float g[N];
    if constexpr (KDA) gate.gate(GateSource::of(p.tokens, p.base.HV), g);
    if (p.base.qk_l2norm != 0) {
      const float nk = l2_norm(kv), nq = l2_norm(qv);
      RSSM_UNROLL
      for (int i = 0; i < N; ++i) {
        kx[i] = kx[i] / nk;
        qx[i] = qx[i] / nq;
      }
    }
    RSSM_UNROLL
    for (int i = 0; i < N; ++i) {
      if (K % RowTiling::kThreads != 0 && int(threadIdx.x) + i * RowTiling::kThreads >= K) continue;
      t.kh[c[i]] = kx[i];
      t.qh[c[i]] = qx[i] * p.tokens.scale;
      if constexpr (KDA) {
        t.g[c[i]] = g[i];
        t.decay[c[i]] = expf(g[i]);
      }
    }
  }
};

// The body of kernel D. PREFETCH (RSSM_IMPL_PREFETCH) issues the token's loads first of all and
// computes its inputs before the record loop; the default loads and computes them after it.
template <int EPL, class Act, bool KDA, bool PREFETCH, class Rec>
__device__ __forceinline__ void decode_rows(const rssm_decode_params &p) {
  constexpr int K = kWarpSize * EPL;
  constexpr int ROWS = ReplayTiling<EPL>::kRows;
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int hv = blockIdx.y, b = blockIdx.z;
  const int row0 = (blockIdx.x * ReplayTiling<EPL>::kWarps + warp) * ROWS;
  const int h = hv / (p.base.HV / p.base.H);
  const int kc = lane * EPL;
  bool row_ok[ROWS];
  RSSM_UNROLL
  for (int r = 0; r < ROWS; ++r) row_ok[r] = row0 + r < p.base.V;

  // The token's inputs depend on the row alone, not on its slot or cursor: PREFETCH issues their
  // loads before the slot is read, so their round trip is the slot's. Where they are loaded
  // changes no float operation, so both orders give the same bits.
  const int64_t tok = b;
  const GateSource gate = GateSource::of(p.tokens, p.base.HV);
  TokenInputs<EPL, Act, KDA> token_in;
  float b_in = 0.0f, vr[ROWS];
  const auto load_token = [&]() {
    const Act *v = static_cast<const Act *>(p.tokens.v) + tok * p.tokens.v_stride + int64_t(hv) * p.base.V + row0;
    RSSM_UNROLL
    for (int r = 0; r < ROWS; ++r) vr[r] = row_ok[r] ? to_float(v[r]) : 0.0f;
    if constexpr (KDA) b_in = beta_input<Act>(gate, tok, hv);
    token_in.load(p, tok, hv, h);
  };
  if constexpr (PREFETCH) load_token();

  // The duplicate scan (a live slot shared with another row: both rows are skipped, their state
  // and ring writes would race) comes first among the checks, while little else is live: placed
  // after the other checks it made ptxas cap the registers of the KDA instantiations and spill.
  const int slot = p.base.slots[b];
  const bool dup = slot >= 0 && slot < p.base.num_slots && warp_find_other(p.base.slots, p.base.batch, b, slot);
  const int L = p.cache_len;
  Act *o = static_cast<Act *>(p.tokens.o) + int64_t(b) * p.tokens.o_stride + int64_t(hv) * p.base.V + row0;

  // Device-side indices are checked, not trusted (under graph replay the host never saw them).
  const bool reporter = row0 == 0 && lane == 0;
  bool skip = slot == -1;
  if (slot < -1 || slot >= p.base.num_slots) {
    if (reporter) report_device_error(p.base.error_word, RSSM_DEVERR_SLOT_OUT_OF_RANGE);
    skip = true;
  }
  if (!skip && dup) {
    if (reporter) report_device_error(p.base.error_word, RSSM_DEVERR_DUPLICATE_SLOT);
    skip = true;
  }
  const int m = skip ? 0 : p.positions[b];
  if (!skip && (m < 0 || m >= L)) {
    if (reporter) report_device_error(p.base.error_word, RSSM_DEVERR_BAD_LENGTH);
    skip = true;
  }
  // skip is the same for every warp of the block: a skipped block leaves the barrier below to
  // none of its warps.
  if (skip) {  // null or untrusted row: zero outputs, nothing else
    if (lane < ROWS && row0 + lane < p.base.V) o[lane] = from_float<Act>(0.0f);  // (no dynamic index into row_ok: it would live on the stack)
    return;
  }
  const bool flush = m == L - 1 || (p.force_flush != nullptr && p.force_flush[b] != 0);

  // The token's channels are shared by the block (TokenTile). A warp past the last row owns no
  // state but computes its share and meets the block's one barrier (__syncthreads is aligned: every
  // warp must reach the same one).
  RSSM_DYNAMIC_SMEM(float, token_smem);
  const TokenTile<EPL, KDA> token = TokenTile<EPL, KDA>::at(token_smem);
  const bool owns_rows = row0 < p.base.V;
  float s[ROWS][EPL];
  float g[KDA ? EPL : 1], beta;
  const auto compute_token = [&]() {
    token_in.share(p, token);
    if constexpr (KDA)
      beta = token_beta(gate, b_in);
    else
      token_gate<EPL, Act, KDA>(gate, tok, hv, kc, g, beta);
  };
  const auto geo = DecodeGeometry<Rec>::of(p, K);
  float *state = geo.state_rows(p.base.layer, slot, hv, row0) + kc;
  if (owns_rows) {
    load_rows(state, K, row_ok, s);
    if constexpr (PREFETCH) compute_token();
    replay_pending<EPL, ROWS, KDA, Rec>(geo, p.base.layer, slot, hv, row0, row_ok, m, s);
    if constexpr (!PREFETCH) {
      load_token();
      compute_token();
    }
  } else {
    if constexpr (!PREFETCH) load_token();
    token_in.share(p, token);
  }
  __syncthreads();
  if (!owns_rows) return;
  float kh[EPL], qh[EPL];
  Decay<EPL, KDA> decay;
  RSSM_UNROLL
  for (int j = 0; j < EPL; ++j) {
    kh[j] = token.kh[kc + j];
    qh[j] = token.qh[kc + j];
  }
  if constexpr (KDA) {
    RSSM_UNROLL
    for (int j = 0; j < EPL; ++j) {
      g[j] = token.g[kc + j];
      decay.d[j] = token.decay[kc + j];
    }
  } else {
    decay = decay_from_log<EPL, KDA>(g);
  }

  float u[ROWS];
  delta_rule_update<EPL, ROWS, KDA, Rec>(s, kh, decay, beta, vr, u);
  float out[ROWS];
  delta_rule_readout<EPL, ROWS>(s, qh, out);
  RSSM_UNROLL
  for (int r = 0; r < ROWS; ++r)  // the bound, not row_ok[r]: folded into row_ok[lane], it put row_ok on the stack
    if (lane == r && row0 + r < p.base.V) o[r] = from_float<Act>(out[r]);

  if (flush) {
    store_rows(state, K, row_ok, s);
    return;
  }
  // Append record m. u: one row per lane; k^ once per key head (first value head of its group);
  // g once per value head (first row tile).
  // (u is the rounded value the update used; k^ is rounded by the store, as the update rounded it.)
  Rec *d = geo.d_at(p.base.layer, slot, hv, m) + row0;
  RSSM_UNROLL
  for (int r = 0; r < ROWS; ++r)
    if (lane == r && row0 + r < p.base.V) d[r] = from_float<Rec>(u[r]);
  if (blockIdx.x == 0 && warp == 0) {
    if (hv % (p.base.HV / p.base.H) == 0) store_record(geo.k_at(p.base.layer, slot, h, m) + kc, kh);
    float *gp = geo.g_at(p.base.layer, slot, hv, m, KDA);
    if constexpr (KDA) {
      RSSM_UNROLL
      for (int j = 0; j < EPL; ++j) gp[kc + j] = g[j];
    } else {
      if (lane == 0) gp[0] = g[0];
    }
  }
}

// (The min-blocks hint of 1 keeps ptxas from a heuristic register cap that spilled: the prefetch
// kernel at K = 128, KDA, and both at K = 256, KDA, once the block's warps shared one barrier;
// tests/resources.rs guards it.)
template <int EPL, class Act, bool KDA, class Rec = float>
__global__ void __launch_bounds__(RowTiling::kThreads, 1) decode_kernel(const rssm_decode_params p) {
  decode_rows<EPL, Act, KDA, false, Rec>(p);
}

template <int EPL, class Act, bool KDA, class Rec = float>
__global__ void __launch_bounds__(RowTiling::kThreads, 1) decode_prefetch_kernel(const rssm_decode_params p) {
  decode_rows<EPL, Act, KDA, true, Rec>(p);
}

// Materialise: replays positions[b] pending records of every layer into the checkpoint. (No act
// dtype: it reads the f32 pool and gates and the ring's records of element type Rec.)
template <int EPL, bool KDA, class Rec = float>
__global__ void __launch_bounds__(RowTiling::kThreads, 1) decode_materialize_kernel(const rssm_decode_params p) {
  using Tiling = ReplayTiling<EPL>;
  constexpr int K = kWarpSize * EPL;
  constexpr int ROWS = Tiling::kRows;
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  // Grid as kernel F's: x = (layer, row tile), y = value head, z = request.
  const int tiles = (p.base.V + Tiling::kRowsPerBlock - 1) / Tiling::kRowsPerBlock;
  const int tile = int(blockIdx.x % unsigned(tiles)), layer = int(blockIdx.x / unsigned(tiles));
  const int hv = blockIdx.y, b = blockIdx.z;
  const int row0 = (tile * Tiling::kWarps + warp) * ROWS;
  if (row0 >= p.base.V) return;
  const int slot = p.base.slots[b];
  const bool reporter = row0 == 0 && lane == 0 && hv == 0 && layer == 0;
  if (slot == -1) return;
  if (slot < -1 || slot >= p.base.num_slots) {
    if (reporter) report_device_error(p.base.error_word, RSSM_DEVERR_SLOT_OUT_OF_RANGE);
    return;
  }
  if (warp_find_other(p.base.slots, p.base.batch, b, slot)) {
    if (reporter) report_device_error(p.base.error_word, RSSM_DEVERR_DUPLICATE_SLOT);
    return;
  }
  const int m = p.positions[b];
  if (m < 0 || m >= p.cache_len) {
    if (reporter) report_device_error(p.base.error_word, RSSM_DEVERR_BAD_LENGTH);
    return;
  }
  if (m == 0) return;
  bool row_ok[ROWS];
  RSSM_UNROLL
  for (int r = 0; r < ROWS; ++r) row_ok[r] = row0 + r < p.base.V;
  const auto geo = DecodeGeometry<Rec>::of(p, K);
  float *state = geo.state_rows(layer, slot, hv, row0) + lane * EPL;
  float s[ROWS][EPL];
  load_rows(state, K, row_ok, s);
  replay_pending<EPL, ROWS, KDA, Rec>(geo, layer, slot, hv, row0, row_ok, m, s);
  store_rows(state, K, row_ok, s);
}

}  // namespace rssm
