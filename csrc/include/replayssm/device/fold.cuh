// Kernel F (fold-every-commit over all layers, and its path mode FT), SPEC §4: one launch
// replays each live request's accepted ring records into its fp32 checkpoint in every layer,
// through replay.cuh's replay_slot (the same update sequence as kernel R: bit-identical).
#pragma once

#include "replayssm/device/replay.cuh"

namespace rssm {

// Grid: x = (layer, row tile) with the tile fastest, y = value head, z = request; x holds 2^31 - 1
// blocks, so any batch up to RSSM_MAX_BATCH runs at any layer count.
template <int EPL, class Act, bool KDA, bool PREFETCH>
__global__ void __launch_bounds__(RowTiling::kThreads, 1) fold_kernel(const rssm_fold_params p) {
  const int warp = threadIdx.x / kWarpSize;
  const int tiles = (p.V + RowTiling::kRowsPerBlock - 1) / RowTiling::kRowsPerBlock;
  const int tile = int(blockIdx.x % unsigned(tiles)), layer = int(blockIdx.x / unsigned(tiles));
  // (PREFETCH keeps every warp: its records are staged behind a block barrier.)
  if (!PREFETCH && (tile * RowTiling::kWarps + warp) * RowTiling::kRows >= p.V) return;
  const RingGeometry geo{p.state, p.ring_v, p.ring_k, p.ring_g, p.ring_beta, p.error_word,
                         p.num_slots, p.window, p.H, p.HV, p.K, p.V, p.qk_l2norm != 0,
                         p.state_slot_stride, p.state_layer_stride};
  const int b = blockIdx.z;
  const bool reporter = tile == 0 && blockIdx.y == 0 && threadIdx.x == 0 && layer == 0;
  const int32_t *path = p.accept_paths ? p.accept_paths + int64_t(b) * p.path_width : nullptr;
  const int slot = p.slots[b];
  const int n = path ? accepted_path_length(path, p.path_width, p.window) : p.accept_lens[b];
  if (path && n < 0 && slot != -1) {
    if (reporter) report_device_error(p.error_word, RSSM_DEVERR_BAD_TREE);
    return;
  }
  const int track_slot = checked_track(p.slots, p.track_slots, p.track_steps, p.batch, p.num_slots, b, slot, n,
                                       p.error_word, reporter);
  const int track_step = p.track_steps ? p.track_steps[b] : -1;
  if (!replay_indices_ok(geo, p.slots, p.batch, b, slot, n, reporter)) return;
  replay_rows<EPL, Act, KDA, PREFETCH>(geo, tile, layer, slot, n, track_slot, track_step, path);
}

}  // namespace rssm
