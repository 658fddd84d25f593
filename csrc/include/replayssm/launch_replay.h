// The launch of the two kernels that replay spec-ring records into the checkpoint: F (every layer
// in one grid, `rssm_fold_params`) and P (one layer, `rssm_replay_params`). A row tile per block
// (ReplayTilingOf: 32 rows, 16 at K = 256 and for PREFETCH); PREFETCH stages the window's records
// in dynamic shared memory.
#pragma once

#include <type_traits>

#include "replayssm/device/fold.cuh"
#include "replayssm/launcher.h"

namespace rssm {

template <class Params> struct LaunchRingReplay {
  static constexpr bool kEveryLayer = std::is_same<Params, rssm_fold_params>::value;
  const Params &p;
  void *stream;
  template <int EPL, class Act, bool KDA> int operator()() const {
    return p.base.impl == RSSM_IMPL_PREFETCH ? run<EPL, Act, KDA, true>() : run<EPL, Act, KDA, false>();
  }
  template <int EPL, class Act, bool KDA, bool PREFETCH> int run() const {
    const size_t smem = PREFETCH ? sizeof(float) * replay_prefetch_smem_floats(p.ring.window, p.base.K, KDA) : 0;
    constexpr int rows = ReplayTilingOf<EPL, PREFETCH>::kRowsPerBlock;
    if constexpr (kEveryLayer) {
      const dim3 grid = row_grid(p.base, rows, p.base.num_layers);
      return launch_rows(&fold_kernel<EPL, Act, KDA, PREFETCH>, grid, smem, stream, p);
    } else {
      return launch_rows(&replay_kernel<EPL, Act, KDA, PREFETCH>, row_grid(p.base, rows), smem, stream, p);
    }
  }
};

}  // namespace rssm
