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
#include "replayssm/device/verify.cuh"

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

// One resident block is enough (the state rows fill the registers, as in F): without the hint ptxas
// caps some instantiations at 128 registers and spills.
template <int EPL, class Act, bool KDA>
__global__ void __launch_bounds__(RowTiling::kThreads, 1) verify_fold_kernel(const rssm_verify_fold_params vf) {
  const rssm_verify_params &p = vf.verify;
  constexpr int K = kWarpSize * EPL;
  constexpr int ROWS = RowTiling::kRows;
  static_assert(RSSM_MAX_VERIFY_WINDOW <= 32, "ancestor sets are 32-bit masks");
  const int warp = threadIdx.x / kWarpSize;
  const int hv = blockIdx.y, req = blockIdx.z, tile = blockIdx.x;
  const int row0 = (tile * RowTiling::kWarps + warp) * ROWS;
  const int W = p.ring.window / 2;
  const bool reporter = tile == 0 && threadIdx.x == 0;

  VerifyRequest rq;
  if (!verify_request(p, req, reporter, rq)) {
    const int begin = tile * RowTiling::kRowsPerBlock;
    verify_skipped_request<Act>(p, req, hv, begin,
                                begin + RowTiling::kRowsPerBlock < p.base.V ? begin + RowTiling::kRowsPerBlock : p.base.V);
    return;
  }
  // The slot's pending records (uniform over the block: every thread reads the same entry).
  int n = 0, half = 0;
  const int32_t *path = nullptr;
  bool ok = rq.live;
  if (ok) {
    const int32_t *entry = vf.pending + int64_t(rq.slot) * (2 + W);
    const uint32_t bad = pending_entry_error(entry, W);
    if (bad) {
      if (reporter) report_device_error(p.base.error_word, bad);
      ok = false;
    } else {
      n = entry[0];
      half = entry[1];
      path = entry + 2;
    }
  }
  int track_slot = checked_track(p.base.slots, vf.track_slots, vf.track_steps, p.base.batch, p.base.num_slots, req,
                                 ok ? rq.slot : -1, n, p.base.error_word, reporter);
  // A track slot with records pending would keep them under its new snapshot (the next VF on it
  // would replay them onto it): flagged, no snapshot.
  if (track_slot >= 0 && vf.pending[int64_t(track_slot) * (2 + W)] != 0) {
    if (reporter) report_device_error(p.base.error_word, RSSM_DEVERR_TRACK_SLOT);
    track_slot = -1;
  }
  const int track_step = vf.track_steps ? vf.track_steps[req] : -1;

  RSSM_DYNAMIC_SMEM(float, smem);
  const WindowSmem w = window_smem(smem, p.max_seqlen, K, KDA);
  const bool tree_ok = ok && verify_tree_ok(p, rq, w, reporter);
  if (!tree_ok) {  // null, untrusted slot or pending entry, bad tree: zero outputs, nothing else
    const int begin = tile * RowTiling::kRowsPerBlock;
    const int end = begin + RowTiling::kRowsPerBlock < p.base.V ? begin + RowTiling::kRowsPerBlock : p.base.V;
    verify_zero_outputs<Act>(p, rq, hv, begin, end);
    return;
  }
  // The fold's rows are requested first, so their load overlaps the window build.
  const RingGeometry geo = ring_geometry(p.base, p.ring);  // VF writes the checkpoint: the fold
  const ReplayRows<EPL, Act, KDA> rows(geo, tile, p.base.layer, rq.slot, track_slot);
  float s[ROWS][EPL];
  load_rows(rows.state, K, rows.row_ok, s);
  const int64_t layer_slot = int64_t(p.base.layer) * p.base.num_slots + rq.slot;
  build_window<EPL, Act, KDA>(p, rq, w, hv, layer_slot, (1 - half) * W);
  if (row0 >= p.base.V) return;
  replay_steps(rows, n, track_step, path, s);
  if (n > 0) store_rows(rows.state, K, rows.row_ok, s);
  verify_rows<EPL, Act, KDA>(p, rq, w, hv, layer_slot, (1 - half) * W, row0, s);
}

}  // namespace rssm
