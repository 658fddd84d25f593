// The row tiling every state-streaming kernel shares (R, V, P, F, D): which warp of which block
// owns which rows of a value head's [V, K] state. Its own header so that a kernel needs only the
// update path (delta_rule.cuh) and this, not another kernel.
#pragma once

#include "replayssm/device/common.cuh"

namespace rssm {

// R, P, F and V share one tiling: 4 warps per block, 4 state rows per warp.
struct RowTiling {
  static constexpr int kWarps = 4;
  static constexpr int kRows = 4;  // state rows per warp
  static constexpr int kThreads = kWarps * kWarpSize;
  static constexpr int kRowsPerBlock = kWarps * kRows;
};

// The tiling of the kernels that replay records into state rows, P and F (default
// implementation) and D: 8 state rows per warp where they fit the registers (K <= 128), so that
// each record's per-warp work (the key load, normalisation where asked, the gate, beta, the
// addresses) is spread over twice RowTiling's state; RowTiling's 4 at K = 256. P's and F's
// prefetch implementation keeps RowTiling (its staged v tile is 16 rows). Per row the float
// operations are the same whatever the rows per warp, so the bits are too.
template <int EPL> struct ReplayTiling {
  static constexpr int kWarps = RowTiling::kWarps;
  static constexpr int kRows = EPL >= 8 ? RowTiling::kRows : 2 * RowTiling::kRows;
  static constexpr int kThreads = RowTiling::kThreads;
  static constexpr int kRowsPerBlock = kWarps * kRows;
};

// Where a thread of a row-tiled block works: its lane, and its warp's first state row in row
// tile `tile` (of its value head).
struct WarpRows {
  int lane, row0;
};
__device__ __forceinline__ WarpRows warp_rows(int tile) {
  const int warp = int(threadIdx.x) / kWarpSize;
  return {int(threadIdx.x) % kWarpSize, (tile * RowTiling::kWarps + warp) * RowTiling::kRows};
}

}  // namespace rssm
