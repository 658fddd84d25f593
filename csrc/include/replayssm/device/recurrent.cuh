// Kernel R: the recurrent baseline (design §4 R). One block per (row tile, value head, request);
// each warp keeps ROWS rows of the state in registers across all of the request's tokens, so the
// checkpoint is read once and written once (plus one snapshot per token when asked for).
#pragma once

#include "replayssm/device/delta_rule.cuh"
#include "replayssm/device/tiling.cuh"
#include "replayssm/replayssm.h"

namespace rssm {

// Rec: float, or Act where record_dtype asks for the updates of a rounded decode ring.
template <int EPL, class Act, bool KDA, class Rec = float>
__global__ void __launch_bounds__(RowTiling::kThreads) recurrent_kernel(const rssm_recurrent_params p) {
  constexpr int K = kWarpSize * EPL;
  constexpr int ROWS = RowTiling::kRows;
  const auto [lane, row0] = warp_rows(blockIdx.x);
  if (row0 >= p.base.V) return;  // a whole warp past the last row: no collective needs it
  const int hv = blockIdx.y, req = blockIdx.z;
  const int h = hv / (p.base.HV / p.base.H);
  const int kc = lane * EPL;  // this lane's first key channel

  // Device-side indices are checked here, not trusted: under graph replay the host never saw them.
  const int bos = p.cu_seqlens[req], eos = p.cu_seqlens[req + 1];
  const bool uncovered = seqlens_uncovered(p.cu_seqlens, p.base.batch, p.num_tokens, req);
  if (bos < 0 || eos < bos || eos > p.num_tokens || eos - bos > p.max_seqlen || uncovered) {
    if (row0 == 0 && lane == 0) report_device_error(p.base.error_word, RSSM_DEVERR_BAD_SEQLENS);
    if (uncovered)
      zero_uncovered_tokens<Act>(p.cu_seqlens, p.base.batch, p.num_tokens, req, p.tokens.o, p.tokens.o_stride,
                                 int64_t(hv) * p.base.V + row0, p.base.V - row0 < ROWS ? p.base.V - row0 : ROWS, lane, kWarpSize);
    return;
  }
  const int slot = p.base.slots[req];
  const bool bad_slot = slot < -1 || slot >= p.base.num_slots;
  if (bad_slot && row0 == 0 && lane == 0) report_device_error(p.base.error_word, RSSM_DEVERR_SLOT_OUT_OF_RANGE);
  // A live slot shared with another request: both are skipped (their state writes would race).
  const bool dup = slot >= 0 && !bad_slot && warp_find_other(p.base.slots, p.base.batch, req, slot);
  if (dup && row0 == 0 && lane == 0) report_device_error(p.base.error_word, RSSM_DEVERR_DUPLICATE_SLOT);
  Act *o_base = static_cast<Act *>(p.tokens.o);
  if (slot < 0 || bad_slot || dup) {  // null (or untrusted) slot: zero outputs, nothing else
    for (int t = bos; t < eos; ++t)
      if (lane < ROWS && row0 + lane < p.base.V)
        o_base[int64_t(t) * p.tokens.o_stride + int64_t(hv) * p.base.V + row0 + lane] = from_float<Act>(0.0f);
    return;
  }

  bool row_ok[ROWS];
  RSSM_UNROLL
  for (int r = 0; r < ROWS; ++r) row_ok[r] = row0 + r < p.base.V;

  const int64_t head_elems = int64_t(p.base.V) * K;
  float *state = p.base.state + state_offset(p.base.state_slot_stride, 0, 0, slot, p.base.num_slots, p.base.HV * head_elems) +
                 hv * head_elems + int64_t(row0) * K + kc;
  float s[ROWS][EPL];
  load_rows(state, K, row_ok, s);

  const Act *q = static_cast<const Act *>(p.tokens.q);
  const Act *k = static_cast<const Act *>(p.tokens.k);
  const Act *v = static_cast<const Act *>(p.tokens.v);
  const GateSource gate = GateSource::of(p.tokens, p.base.HV);
  for (int t = 0; t < eos - bos; ++t) {
    const int64_t tok = bos + t;
    float kh[EPL], qh[EPL];
    load_key(k + tok * p.tokens.k_stride + int64_t(h) * K + kc, p.base.qk_l2norm != 0, kh);
    load_key(q + tok * p.tokens.q_stride + int64_t(h) * K + kc, p.base.qk_l2norm != 0, qh);
    RSSM_UNROLL
    for (int j = 0; j < EPL; ++j) qh[j] = qh[j] * p.tokens.scale;

    float g[KDA ? EPL : 1], beta;
    token_gate<EPL, Act, KDA>(gate, tok, hv, kc, g, beta);
    const Decay<EPL, KDA> decay = decay_from_log<EPL, KDA>(g);

    float vr[ROWS];
    RSSM_UNROLL
    for (int r = 0; r < ROWS; ++r) vr[r] = row_ok[r] ? to_float(v[tok * p.tokens.v_stride + int64_t(hv) * p.base.V + row0 + r]) : 0.0f;

    delta_rule_update<EPL, ROWS, KDA, Rec>(s, kh, decay, beta, vr);

    if (p.snapshots)
      store_rows(p.snapshots + ((int64_t(req) * p.max_seqlen + t) * p.base.HV + hv) * head_elems + int64_t(row0) * K + kc, K,
                 row_ok, s);

    float out[ROWS];
    delta_rule_readout<EPL, ROWS>(s, qh, out);
    RSSM_UNROLL
    for (int r = 0; r < ROWS; ++r)
      if (lane == r && row_ok[r]) o_base[tok * p.tokens.o_stride + int64_t(hv) * p.base.V + row0 + r] = from_float<Act>(out[r]);
  }

  if (p.write_state) store_rows(state, K, row_ok, s);
}

}  // namespace rssm
