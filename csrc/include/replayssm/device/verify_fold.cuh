// Kernel VF (deferred fold, design §4 VF: V and F fused): per layer, each live request's pending records
// of the previous step are replayed into its checkpoint, the checkpoint stored, and the new window
// verified from the state still in registers. A step then moves the state once read and once
// written instead of V's read plus F's read and write.
//
// One block per (16-row tile, value head, request), DEFAULT's tiling: a warp's rows are the same
// rows in the replay (replay.cuh's ReplayRows) and in the verify (verify.cuh's verify_rows), so the
// state never changes layout. The replay is replay_steps, F's loop (bit-identical committed
// checkpoints); the verify is DEFAULT V's phase 4 on those bits (the same outputs as V after F).
// The ring holds two windows: pending records are read from half h, the new window written to half
// 1 - h, so no block's ring write can overwrite a record another block still replays.
#pragma once

#include "replayssm/device/replay.cuh"
#include "replayssm/device/verify_staged.cuh"

namespace rssm {

// A slot's pending entry (see rssm_verify_fold_params): 0 when it can be trusted, else the error
// bit. W is one half of the ring.
__device__ __forceinline__ uint32_t pending_entry_error(const int32_t *entry, int W) {
  const int n = entry[0], half = entry[1];
  if (n < 0 || n > W || (half != 0 && half != 1)) return RSSM_DEVERR_BAD_LENGTH;
  const int32_t *pos = entry + 2;
  for (int i = 0; i < n; ++i)
    if (pos[i] < half * W || pos[i] >= half * W + W || (i > 0 && pos[i] <= pos[i - 1])) return RSSM_DEVERR_BAD_TREE;
  return 0;
}

// A live request's pending records and track, after their device-side checks (uniform over the
// block: every thread reads the same entry). `ok` false: skip the request (flagged).
struct PendingFold {
  int n, half;
  const int32_t *path;
  bool ok;
  int track_slot, track_step;
};

// Every lane of every warp calls it (the track's duplicate scans are warp collectives).
__device__ __forceinline__ PendingFold pending_fold(const rssm_verify_fold_params &vf, const VerifyRequest &rq,
                                                    bool reporter) {
  const rssm_verify_params &p = vf.verify;
  const int W = p.ring.window / 2;
  PendingFold f{0, 0, nullptr, rq.live, -1, -1};
  if (f.ok) {
    const int32_t *entry = vf.pending + int64_t(rq.slot) * (2 + W);
    const uint32_t bad = pending_entry_error(entry, W);
    if (bad) {
      if (reporter) report_device_error(p.base.error_word, bad);
      f.ok = false;
    } else {
      f.n = entry[0];
      f.half = entry[1];
      f.path = entry + 2;
    }
  }
  f.track_slot = checked_track(p.base.slots, vf.track_slots, vf.track_steps, p.base.batch, p.base.num_slots,
                               blockIdx.z, f.ok ? rq.slot : -1, f.n, p.base.error_word, reporter);
  // A track slot with records pending would keep them under its new snapshot (the next VF on it
  // would replay them onto it): flagged, no snapshot.
  if (f.track_slot >= 0 && vf.pending[int64_t(f.track_slot) * (2 + W)] != 0) {
    if (reporter) report_device_error(p.base.error_word, RSSM_DEVERR_TRACK_SLOT);
    f.track_slot = -1;
  }
  f.track_step = vf.track_steps ? vf.track_steps[blockIdx.z] : -1;
  return f;
}

// One resident block is enough (the state rows fill the registers, as in F): without the hint ptxas
// caps some instantiations at 128 registers and spills.
template <int EPL, class Act, bool KDA>
__global__ void __launch_bounds__(RowTiling::kThreads, 1) verify_fold_kernel(const rssm_verify_fold_params vf) {
  const rssm_verify_params &p = vf.verify;
  constexpr int K = kWarpSize * EPL;
  constexpr int ROWS = RowTiling::kRows;
  static_assert(RSSM_MAX_VERIFY_WINDOW <= 32, "ancestor sets are 32-bit masks");
  const RowTileBlock at(p.base);
  const int hv = at.hv, req = at.req, tile = at.tile, row0 = at.row0;
  const int W = p.ring.window / 2;
  const bool reporter = at.reporter;

  VerifyRequest rq;
  if (!verify_request(p, req, reporter, rq)) {
    verify_skipped_request<Act>(p, req, hv, at.begin, at.end);
    return;
  }
  const PendingFold pf = pending_fold(vf, rq, reporter);

  RSSM_DYNAMIC_SMEM(float, smem);
  const WindowSmem w = window_smem(smem, p.max_seqlen, K, KDA);
  const bool tree_ok = pf.ok && verify_tree_ok(p, rq, w, reporter);
  if (!tree_ok) {  // null, untrusted slot or pending entry, bad tree: zero outputs, nothing else
    verify_zero_outputs<Act>(p, rq, hv, at.begin, at.end);
    return;
  }
  // The fold's rows are requested first, so their load overlaps the window build.
  const RingGeometry geo = ring_geometry(p.base, p.ring);  // VF writes the checkpoint: the fold
  const ReplayRows<EPL, Act, KDA> rows(geo, tile, p.base.layer, rq.slot, pf.track_slot);
  float s[ROWS][EPL];
  load_rows(rows.state, K, rows.row_ok, s);
  const int64_t layer_slot = int64_t(p.base.layer) * p.base.num_slots + rq.slot;
  build_window<EPL, Act, KDA>(p, rq, w, hv, layer_slot, (1 - pf.half) * W);
  if (row0 >= p.base.V) return;
  replay_steps(rows, pf.n, pf.track_step, pf.path, s);
  if (pf.n > 0) store_rows(rows.state, K, rows.row_ok, s);
  verify_rows<EPL, Act, KDA>(p, rq, w, hv, layer_slot, (1 - pf.half) * W, row0, s);
}

// RSSM_IMPL_STAGED of VF: staged V's design with F's fold in front. One block per (row block of
// `block_rows` rows, value head, request): the block builds the new window and stages the pending
// records once (keys normalised in F's warp layout, so their bits are F's), then streams its
// checkpoint rows in passes of 16 (the next pass's rows loaded while one computes). Per pass each
// row is folded through delta_rule_update_row8 (F's float operations in F's order: bit-identical
// committed checkpoints), stored, and verified from the registers with staged V's row code.
// Rows are held in the 8-lane layout whose groups are F's lanes (load_staged_row<4, EPL>).
// (Min-blocks hint as staged V's; tests/resources.rs guards the spills.)
template <int EPL, class Act, bool KDA>
__global__ void __launch_bounds__(RowTiling::kThreads, EPL >= 8 ? 1 : 4)
    verify_fold_staged_kernel(const rssm_verify_fold_params vf) {
  const rssm_verify_params &p = vf.verify;
  constexpr int K = kWarpSize * EPL;
  constexpr int LPR = StagedBlock::kLanesPerRow, RPP = StagedBlock::kRowsPerPass;
  constexpr int G = 4;  // channel groups per lane: F's lanes l8 + 8 g
  constexpr int GW = KDA ? K : 1;
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const StagedBlock sb(p.base);
  const int l8 = sb.l8, my = sb.my, hv = sb.hv, req = sb.req, RB = sb.RB, rb0 = sb.rb0, rows = sb.rows;
  const int passes = sb.passes, T = p.max_seqlen, W = p.ring.window / 2;
  const bool reporter = blockIdx.x == 0 && threadIdx.x == 0;

  VerifyRequest rq;
  if (!verify_request(p, req, reporter, rq)) {
    verify_skipped_request<Act>(p, req, hv, rb0, rb0 + rows);
    return;
  }
  const PendingFold pf = pending_fold(vf, rq, reporter);
  RSSM_DYNAMIC_SMEM(float, smem);
  const WindowSmem w = window_smem(smem, T, K, KDA);
  float *eG = smem + verify_smem_floats(T, K, KDA);  // [T]
  float *v_s = eG + T;                               // [T][RB]
  float *o_s = v_s + T * RB;                         // [T][RB]
  float *key_s = o_s + T * RB;                       // [W][K] pending records' normalised keys
  float *decay_s = key_s + W * K;                    // [W][GW]
  float *beta_s = decay_s + W * GW;                  // [W]
  float *rv_s = beta_s + W;                          // [W][RB]
  const bool tree_ok = pf.ok && verify_tree_ok(p, rq, w, reporter);
  if (!tree_ok) {  // null, untrusted slot or pending entry, bad tree: zero outputs, nothing else
    verify_zero_outputs<Act>(p, rq, hv, rb0, rb0 + rows);
    return;
  }

  // The first pass's checkpoint rows, in flight while the window and the records are staged.
  const int64_t head = int64_t(p.base.V) * K, slot_elems = p.base.HV * head;
  const auto head_of = [&](int slot) {
    return p.base.state +
           state_offset(p.base.state_slot_stride, p.base.state_layer_stride, p.base.layer, slot, p.base.num_slots,
                        slot_elems) +
           hv * head;
  };
  float *head_state = head_of(rq.slot);
  float *head_track = pf.track_slot >= 0 ? head_of(pf.track_slot) : nullptr;
  float s[G][EPL];
  load_staged_row(head_state + int64_t(rb0 + my) * K, my < rows, l8, s);

  const int64_t layer_slot = int64_t(p.base.layer) * p.base.num_slots + rq.slot;
  const int ring_base = (1 - pf.half) * W;
  build_window<EPL, Act, KDA>(p, rq, w, hv, layer_slot, ring_base);
  // The pending records, once per block: each warp normalises its share of the keys in the warp
  // layout (ReplayRows::record, F's code), so a key's bits do not depend on the warp.
  const ReplayRows<EPL, Act, KDA> rec(ring_geometry(p.base, p.ring), 0, p.base.layer, rq.slot, -1);
  for (int step = warp; step < pf.n; step += RowTiling::kWarps) {
    const int t = pf.path[step];
    float kh[EPL];
    Decay<EPL, KDA> decay;
    rec.record(t, kh, decay);
    RSSM_UNROLL
    for (int j = 0; j < EPL; ++j) key_s[step * K + rec.kc + j] = kh[j];
    if constexpr (KDA) {
      RSSM_UNROLL
      for (int j = 0; j < EPL; ++j) decay_s[step * K + rec.kc + j] = decay.d[j];
    } else if (lane == 0) {
      decay_s[step] = decay.d[0];
    }
    if (lane == 0) beta_s[step] = rec.rb[t];
  }
  const Act *rv = static_cast<const Act *>(p.ring.v) + (layer_slot * p.base.HV + hv) * int64_t(p.ring.window) * p.base.V + rb0;
  for (int idx = threadIdx.x; idx < pf.n * rows; idx += blockDim.x) {
    const int step = idx / rows, r = idx % rows;
    rv_s[step * RB + r] = to_float(rv[int64_t(pf.path[step]) * p.base.V + r]);
  }
  stage_window_tile<EPL, Act, KDA>(p, rq, w, eG, v_s, hv, rb0, rows, RB, ring_base);  // (barrier)

  float u[RSSM_MAX_VERIFY_WINDOW];
  for (int pass = 0; pass < passes; ++pass) {
    const int local = pass * RPP + my;
    const bool ok = local < rows;
    float next[G][EPL];
    const bool more = pass + 1 < passes;
    if (more) load_staged_row(head_state + int64_t(rb0 + local + RPP) * K, local + RPP < rows, l8, next);
    for (int step = 0; step < pf.n; ++step) {
      float k[G][EPL];
      Decay<EPL, KDA> decay[G];
      RSSM_UNROLL
      for (int g = 0; g < G; ++g) {
        const int c0 = EPL * (l8 + LPR * g);
        load_f32(key_s + step * K + c0, k[g]);
        if constexpr (KDA)
          load_f32(decay_s + step * K + c0, decay[g].d);
        else
          decay[g].d[0] = decay_s[step];
      }
      delta_rule_update_row8<EPL, KDA>(s, k, decay, beta_s[step], rv_s[step * RB + (ok ? local : 0)]);
      if (head_track && step == pf.track_step && ok) store_staged_row(head_track + int64_t(rb0 + local) * K, l8, s);
    }
    if (pf.n > 0 && ok) store_staged_row(head_state + int64_t(rb0 + local) * K, l8, s);
    staged_row_outputs<G, EPL, KDA>(s, w, eG, v_s, o_s, T, rq.len, RB, local, ok, l8, u);
    if (more) {
      RSSM_UNROLL
      for (int g = 0; g < G; ++g)
        RSSM_UNROLL
        for (int j = 0; j < EPL; ++j) s[g][j] = next[g][j];
    }
  }
  __syncthreads();
  store_output_tile<Act>(p, rq, o_s, hv, rb0, rows, RB);
}

}  // namespace rssm
