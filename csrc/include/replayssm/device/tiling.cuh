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
