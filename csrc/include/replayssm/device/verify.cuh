// Kernel V: chunked linear-chain verify with the strictly-lower causal window mask (SPEC §4 V).
//
// One block per (row tile, value head, request). Phase 1 normalises every window position's
// key and query and computes its gate into shared memory (and writes the raw ring record);
// phase 2 forms the cumulative log decays G; phase 3 the window's T x T matrices
//   A[i][j]  = beta_i e^{G_i - G_j} (k_i . k_j)   for j < i only (strictly lower), and
//   Sc[i][j] = e^{G_i - G_j} (q_i . k_j)          for j <= i;
// phase 4, per warp and state row, reads the checkpoint once, solves (I + A) U = R by forward
// substitution and forms the causal outputs. The checkpoint is never written.
#pragma once

#include "replayssm/device/recurrent.cuh"

namespace rssm {

// Dynamic shared memory of one block, in floats.
inline __host__ __device__ int64_t verify_smem_floats(int T, int K, bool kda) {
  return int64_t(2) * T * K + int64_t(T) * (kda ? K : 1) + T + int64_t(2) * T * T;
}

template <int EPL, class Act, bool KDA>
__global__ void __launch_bounds__(RowTiling::kThreads) verify_kernel(const rssm_verify_params p) {
  constexpr int K = kWarpSize * EPL;
  constexpr int ROWS = RowTiling::kRows;
  constexpr int TMAX = RSSM_MAX_VERIFY_WINDOW;
  constexpr int GW = KDA ? K : 1;
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int hv = blockIdx.y, req = blockIdx.z;
  const int row0 = (blockIdx.x * RowTiling::kWarps + warp) * ROWS;
  const int group = p.HV / p.H, h = hv / group;
  const int kc = lane * EPL;
  const int T = p.max_seqlen;

  // Device-side indices are checked, not trusted. Every exit below is uniform over the block.
  const int bos = p.cu_seqlens[req], eos = p.cu_seqlens[req + 1];
  if (bos < 0 || eos < bos || eos > p.num_tokens || eos - bos > T || T > TMAX) {
    if (blockIdx.x == 0 && threadIdx.x == 0) report_device_error(p.error_word, RSSM_DEVERR_BAD_SEQLENS);
    return;
  }
  const int len = eos - bos;
  const int slot = p.slots[req];
  const bool bad_slot = slot < -1 || slot >= p.num_slots;
  if (bad_slot && blockIdx.x == 0 && threadIdx.x == 0) report_device_error(p.error_word, RSSM_DEVERR_SLOT_OUT_OF_RANGE);
  Act *o = static_cast<Act *>(p.o);
  if (slot < 0 || bad_slot) {  // null (or untrusted) slot: zero outputs, no ring writes
    for (int t = bos; t < eos; ++t)
      if (lane < ROWS && row0 + lane < p.V)
        o[int64_t(t) * p.o_stride + int64_t(hv) * p.V + row0 + lane] = from_float<Act>(0.0f);
    return;
  }

  RSSM_DYNAMIC_SMEM(float, smem);
  float *kh = smem;              // [T][K] normalised keys
  float *qh = kh + T * K;        // [T][K] normalised, scaled queries
  float *G = qh + T * K;         // [T][GW] log decays, then their prefix sums
  float *beta = G + T * GW;      // [T]
  float *A = beta + T;           // [T][T] strictly lower
  float *Sc = A + T * T;         // [T][T] lower, inclusive

  const bool ring = p.ring_v != nullptr;
  const int64_t layer_slot = int64_t(p.layer) * p.num_slots + slot;
  const Act *q = static_cast<const Act *>(p.q);
  const Act *k = static_cast<const Act *>(p.k);
  const GateSource gate{p.a, p.b, p.A_log, p.dt_bias, p.g, p.beta, p.a_stride, p.b_stride, p.HV};

  // Phase 1: per position (one warp each, round robin).
  for (int i = warp; i < len; i += RowTiling::kWarps) {
    const int64_t tok = bos + i;
    const Act *k_in = k + tok * p.k_stride + int64_t(h) * K + kc;
    float kv[EPL], qv[EPL];
    load_key(k_in, p.qk_l2norm != 0, kv);
    load_key(q + tok * p.q_stride + int64_t(h) * K + kc, p.qk_l2norm != 0, qv);
    float g[GW == 1 ? 1 : EPL], b;
    token_gate<EPL, Act, KDA>(gate, tok, hv, kc, g, b);
    RSSM_UNROLL
    for (int j = 0; j < EPL; ++j) {
      kh[i * K + kc + j] = kv[j];
      qh[i * K + kc + j] = qv[j] * p.scale;
    }
    if constexpr (KDA) {
      RSSM_UNROLL
      for (int j = 0; j < EPL; ++j) G[i * K + kc + j] = g[j];
    } else if (lane == 0) {
      G[i] = g[0];
    }
    if (lane == 0) beta[i] = b;
    // Raw ring record of position i (k once per key head, gate once per value head).
    if (ring && i < p.window && blockIdx.x == 0) {
      const int64_t gate_at = (layer_slot * p.HV + hv) * p.window + i;
      if constexpr (KDA) {
        RSSM_UNROLL
        for (int j = 0; j < EPL; ++j) p.ring_g[gate_at * K + kc + j] = g[j];
      } else if (lane == 0) {
        p.ring_g[gate_at] = g[0];
      }
      if (lane == 0) p.ring_beta[gate_at] = b;
      if (hv % group == 0) {
        Act *rk = static_cast<Act *>(p.ring_k) + ((layer_slot * p.H + h) * p.window + i) * K + kc;
        RSSM_UNROLL
        for (int j = 0; j < EPL; ++j) rk[j] = k_in[j];
      }
    }
  }
  __syncthreads();

  // Phase 2: G_i = sum_{j <= i} g_j, per channel for KDA.
  for (int c = threadIdx.x; c < GW; c += blockDim.x)
    for (int i = 1; i < len; ++i) G[i * GW + c] = G[(i - 1) * GW + c] + G[i * GW + c];
  __syncthreads();

  // Phase 3: the window matrices, one (i, j) pair per warp, round robin.
  for (int i = 0, pair = 0; i < len; ++i) {
    for (int j = 0; j <= i; ++j, ++pair) {
      if (pair % RowTiling::kWarps != warp) continue;
      float d[2] = {0.0f, 0.0f};  // k_i . k_j and q_i . k_j, decayed per channel for KDA
      RSSM_UNROLL
      for (int e = 0; e < EPL; ++e) {
        const int c = kc + e;
        float kj = kh[j * K + c];
        if constexpr (KDA) kj = kj * expf(G[i * K + c] - G[j * K + c]);
        d[0] = fmaf(kh[i * K + c], kj, d[0]);
        d[1] = fmaf(qh[i * K + c], kj, d[1]);
      }
      warp_sum(d);
      if (lane == 0) {
        const float decay = KDA ? 1.0f : expf(G[i] - G[j]);
        A[i * T + j] = j < i ? beta[i] * (decay * d[0]) : 0.0f;
        Sc[i * T + j] = decay * d[1];
      }
    }
  }
  __syncthreads();

  // Phase 4: per warp, its rows of the checkpoint (read only) and the forward substitution.
  if (row0 >= p.V) return;
  bool row_ok[ROWS];
  RSSM_UNROLL
  for (int r = 0; r < ROWS; ++r) row_ok[r] = row0 + r < p.V;
  const int64_t head = int64_t(p.V) * K;
  float s[ROWS][EPL];
  load_rows(p.state + (layer_slot * p.HV + hv) * head + int64_t(row0) * K + kc, K, row_ok, s);
  const Act *v = static_cast<const Act *>(p.v);
  Act *ring_v = ring && len > 0 ? static_cast<Act *>(p.ring_v) + (layer_slot * p.HV + hv) * int64_t(p.window) * p.V + row0
                                : nullptr;
  float u[TMAX][ROWS];
  RSSM_UNROLL
  for (int i = 0; i < TMAX; ++i) {
    if (i >= len) break;
    const int64_t tok = bos + i;
    float kd[EPL], qd[EPL];
    RSSM_UNROLL
    for (int e = 0; e < EPL; ++e) {
      const float decay = KDA ? expf(G[i * GW + kc + e]) : 1.0f;
      kd[e] = kh[i * K + kc + e] * decay;
      qd[e] = qh[i * K + kc + e] * decay;
    }
    float dk[ROWS], dq[ROWS];
    RSSM_UNROLL
    for (int r = 0; r < ROWS; ++r) {
      dk[r] = 0.0f;
      dq[r] = 0.0f;
      RSSM_UNROLL
      for (int e = 0; e < EPL; ++e) {
        dk[r] = fmaf(s[r][e], kd[e], dk[r]);
        dq[r] = fmaf(s[r][e], qd[e], dq[r]);
      }
    }
    warp_sum(dk);
    warp_sum(dq);
    const float eG = KDA ? 1.0f : expf(G[i]);
    RSSM_UNROLL
    for (int r = 0; r < ROWS; ++r) {
      const Act v_raw = row_ok[r] ? v[tok * p.v_stride + int64_t(hv) * p.V + row0 + r] : from_float<Act>(0.0f);
      float acc = beta[i] * (to_float(v_raw) - eG * dk[r]);
      RSSM_UNROLL
      for (int j = 0; j < TMAX; ++j)
        if (j < i) acc = fmaf(-A[i * T + j], u[j][r], acc);
      u[i][r] = acc;
      float out = eG * dq[r];
      RSSM_UNROLL
      for (int j = 0; j < TMAX; ++j)
        if (j <= i) out = fmaf(Sc[i * T + j], u[j][r], out);
      if (lane == r && row_ok[r]) {
        o[tok * p.o_stride + int64_t(hv) * p.V + row0 + r] = from_float<Act>(out);
        if (ring_v && i < p.window) ring_v[int64_t(i) * p.V + r] = v_raw;
      }
    }
  }
}

}  // namespace rssm
