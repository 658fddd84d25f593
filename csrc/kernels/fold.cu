// Launch layer of kernel F (fold-every-commit, all layers in one launch).
#include "replayssm/can_implement.h"
#include "replayssm/device/fold.cuh"
#include "replayssm/dispatch.h"
#include "replayssm/launcher.h"
#include "replayssm/layout.h"

namespace {

struct LaunchFold {
  const rssm_fold_params &p;
  void *stream;
  template <int EPL, class Act, bool KDA> int operator()() const {
    return p.base.impl == RSSM_IMPL_PREFETCH ? run<EPL, Act, KDA, true>() : run<EPL, Act, KDA, false>();
  }
  template <int EPL, class Act, bool KDA, bool PREFETCH> int run() const {
    using rssm::RowTiling;
    const unsigned tiles = unsigned(p.base.V + RowTiling::kRowsPerBlock - 1) / RowTiling::kRowsPerBlock;
    const dim3 grid(tiles * unsigned(p.base.num_layers), p.base.HV, p.base.batch);
    const size_t smem = PREFETCH ? sizeof(float) * rssm::replay_prefetch_smem_floats(p.ring.window, p.base.K, KDA) : 0;
    const auto kernel = &rssm::fold_kernel<EPL, Act, KDA, PREFETCH>;
    const int err = RSSM_ALLOW_SMEM(kernel, smem);
    if (err != 0) return err;
    return RSSM_LAUNCH(kernel, grid, dim3(RowTiling::kThreads), smem, stream, p);
  }
};

}  // namespace

extern "C" rssm_status RSSM_ENTRY(fold)(const rssm_fold_params *params, void *stream) {
  const rssm_status st = rssm::fold_can_implement(params, RSSM_VECTOR_ALIGNED);
  if (st != RSSM_OK) return st;
  const int err = rssm::dispatch(params->base, LaunchFold{*params, stream});
  return err == 0 ? RSSM_OK : RSSM_LAUNCH_FAILED;
}
