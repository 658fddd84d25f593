// Kernel F (fold-every-commit over all layers, and its path mode FT), design §4 F, FT: one launch
// replays each live request's accepted ring records into its fp32 checkpoint in every layer,
// through replay.cuh's replay_slot (the same update sequence as kernel R: bit-identical).
#pragma once

#include "replayssm/device/replay.cuh"

namespace rssm {

// Grid: x = (layer, row tile) with the tile fastest, y = value head, z = request; x holds 2^31 - 1
// blocks, so any batch up to RSSM_MAX_BATCH runs at any layer count.
template <int EPL, class Act, bool KDA, bool PREFETCH>
__global__ void __launch_bounds__(RowTiling::kThreads, 1) fold_kernel(const rssm_fold_params p) {
  using Tiling = ReplayTilingOf<EPL, PREFETCH>;
  const int warp = threadIdx.x / kWarpSize;
  const int tiles = (p.base.V + Tiling::kRowsPerBlock - 1) / Tiling::kRowsPerBlock;
  const int tile = int(blockIdx.x % unsigned(tiles)), layer = int(blockIdx.x / unsigned(tiles));
  // (PREFETCH keeps every warp: its records are staged behind a block barrier.)
  if (!PREFETCH && (tile * Tiling::kWarps + warp) * Tiling::kRows >= p.base.V) return;
  const RingGeometry geo = ring_geometry(p.base, p.ring);
  const int b = blockIdx.z;
  const bool reporter = tile == 0 && blockIdx.y == 0 && threadIdx.x == 0 && layer == 0;
  const int32_t *path = p.accept_paths ? p.accept_paths + int64_t(b) * p.path_width : nullptr;
  const int slot = p.base.slots[b];
  const int n = path ? accepted_path_length(path, p.path_width, p.ring.window) : p.accept_lens[b];
  if (path && n < 0 && slot != -1) {
    if (reporter) report_device_error(p.base.error_word, RSSM_DEVERR_BAD_TREE);
    return;
  }
  const int track_slot = checked_track(p.base.slots, p.track_slots, p.track_steps, p.base.batch, p.base.num_slots, b, slot, n,
                                       p.base.error_word, reporter);
  const int track_step = p.track_steps ? p.track_steps[b] : -1;
  if (!replay_indices_ok(geo, p.base.slots, p.base.batch, b, slot, n, reporter)) return;
  replay_rows<EPL, Act, KDA, PREFETCH>(geo, tile, layer, slot, n, track_slot, track_step, path);
}

}  // namespace rssm
