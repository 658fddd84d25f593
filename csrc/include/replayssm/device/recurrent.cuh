// Kernel R: the recurrent baseline (SPEC §4 R). One block per (row tile, value head, request);
// each warp keeps ROWS rows of the state in registers across all of the request's tokens, so the
// checkpoint is read once and written once (plus one snapshot per token when asked for).
#pragma once

#include "replayssm/device/delta_rule.cuh"
#include "replayssm/replayssm.h"

namespace rssm {

struct RecurrentConfig {
  static constexpr int kWarps = 4;
  static constexpr int kRows = 4;  // state rows per warp
  static constexpr int kThreads = kWarps * kWarpSize;
  static constexpr int kRowsPerBlock = kWarps * kRows;
};

template <int EPL, class Act, bool KDA>
__global__ void __launch_bounds__(RecurrentConfig::kThreads) recurrent_kernel(const rssm_recurrent_params p) {
  constexpr int K = kWarpSize * EPL;
  constexpr int ROWS = RecurrentConfig::kRows;
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int hv = blockIdx.y, req = blockIdx.z;
  const int row0 = (blockIdx.x * RecurrentConfig::kWarps + warp) * ROWS;
  if (row0 >= p.V) return;  // a whole warp past the last row: no collective needs it
  const int h = hv / (p.HV / p.H);
  const int kc = lane * EPL;  // this lane's first key channel

  // Device-side indices are checked here, not trusted: under graph replay the host never saw them.
  const int bos = p.cu_seqlens[req], eos = p.cu_seqlens[req + 1];
  if (bos < 0 || eos < bos || eos > p.num_tokens || eos - bos > p.max_seqlen) {
    if (row0 == 0 && lane == 0) report_device_error(p.error_word, RSSM_DEVERR_BAD_SEQLENS);
    return;
  }
  const int slot = p.slots[req];
  const bool bad_slot = slot < -1 || slot >= p.num_slots;
  if (bad_slot && row0 == 0 && lane == 0) report_device_error(p.error_word, RSSM_DEVERR_SLOT_OUT_OF_RANGE);
  Act *o_base = static_cast<Act *>(p.o);
  if (slot < 0 || bad_slot) {  // null (or untrusted) slot: zero outputs, nothing else
    for (int t = bos; t < eos; ++t)
      if (lane < ROWS && row0 + lane < p.V)
        o_base[int64_t(t) * p.o_stride + int64_t(hv) * p.V + row0 + lane] = from_float<Act>(0.0f);
    return;
  }

  bool row_ok[ROWS];
  RSSM_UNROLL
  for (int r = 0; r < ROWS; ++r) row_ok[r] = row0 + r < p.V;

  const int64_t head_elems = int64_t(p.V) * K;
  float *state = p.state + (int64_t(slot) * p.HV + hv) * head_elems + int64_t(row0) * K + kc;
  float s[ROWS][EPL];
  RSSM_UNROLL
  for (int r = 0; r < ROWS; ++r) {
    if (row_ok[r]) {
      load_f32(state + int64_t(r) * K, s[r]);
    } else {
      RSSM_UNROLL
      for (int j = 0; j < EPL; ++j) s[r][j] = 0.0f;
    }
  }

  const Act *q = static_cast<const Act *>(p.q);
  const Act *k = static_cast<const Act *>(p.k);
  const Act *v = static_cast<const Act *>(p.v);
  const bool raw_gate = p.g == nullptr;
  for (int t = 0; t < eos - bos; ++t) {
    const int64_t tok = bos + t;
    float kh[EPL], qh[EPL];
    load_act(k + tok * p.k_stride + int64_t(h) * K + kc, kh);
    load_act(q + tok * p.q_stride + int64_t(h) * K + kc, qh);
    if (p.qk_l2norm) {
      l2_normalize(kh);
      l2_normalize(qh);
    }
    RSSM_UNROLL
    for (int j = 0; j < EPL; ++j) qh[j] = qh[j] * p.scale;

    Decay<EPL, KDA> decay;
    float beta;
    if (raw_gate) {
      const Act *a = static_cast<const Act *>(p.a);
      const Act *b = static_cast<const Act *>(p.b);
      if constexpr (KDA) {
        RSSM_UNROLL
        for (int j = 0; j < EPL; ++j)
          decay.d[j] = expf(gate_log_decay(to_float(a[tok * p.a_stride + int64_t(hv) * K + kc + j]),
                                           p.dt_bias[int64_t(hv) * K + kc + j], p.A_log[hv]));
      } else {
        decay.d[0] = expf(gate_log_decay(to_float(a[tok * p.a_stride + hv]), p.dt_bias[hv], p.A_log[hv]));
      }
      beta = gate_beta(to_float(b[tok * p.b_stride + hv]));
    } else {
      if constexpr (KDA) {
        RSSM_UNROLL
        for (int j = 0; j < EPL; ++j) decay.d[j] = expf(p.g[(tok * p.HV + hv) * K + kc + j]);
      } else {
        decay.d[0] = expf(p.g[tok * p.HV + hv]);
      }
      beta = p.beta[tok * p.HV + hv];
    }

    float vr[ROWS];
    RSSM_UNROLL
    for (int r = 0; r < ROWS; ++r) vr[r] = row_ok[r] ? to_float(v[tok * p.v_stride + int64_t(hv) * p.V + row0 + r]) : 0.0f;

    delta_rule_update<EPL, ROWS, KDA>(s, kh, decay, beta, vr);

    if (p.snapshots) {
      float *snap = p.snapshots + ((int64_t(req) * p.max_seqlen + t) * p.HV + hv) * head_elems + int64_t(row0) * K + kc;
      RSSM_UNROLL
      for (int r = 0; r < ROWS; ++r)
        if (row_ok[r]) store_f32(snap + int64_t(r) * K, s[r]);
    }

    float out[ROWS];
    delta_rule_readout<EPL, ROWS>(s, qh, out);
    RSSM_UNROLL
    for (int r = 0; r < ROWS; ++r)
      if (lane == r && row_ok[r]) o_base[tok * p.o_stride + int64_t(hv) * p.V + row0 + r] = from_float<Act>(out[r]);
  }

  if (p.write_state) {
    RSSM_UNROLL
    for (int r = 0; r < ROWS; ++r)
      if (row_ok[r]) store_f32(state + int64_t(r) * K, s[r]);
  }
}

}  // namespace rssm
