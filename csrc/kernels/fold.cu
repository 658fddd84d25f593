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
    using rssm::RowTiling;
    const dim3 grid((p.V + RowTiling::kRowsPerBlock - 1) / RowTiling::kRowsPerBlock, p.HV, p.batch * p.num_layers);
    const auto kernel = &rssm::fold_kernel<EPL, Act, KDA>;
    return RSSM_LAUNCH(kernel, grid, dim3(RowTiling::kThreads), 0, stream, p);
  }
};

}  // namespace

extern "C" rssm_status RSSM_ENTRY(fold)(const rssm_fold_params *params, void *stream) {
  const rssm_status st = rssm::fold_can_implement(params, RSSM_VECTOR_ALIGNED);
  if (st != RSSM_OK) return st;
  const int err = rssm::dispatch(params->K, params->dtype, params->variant, LaunchFold{*params, stream});
  return err == 0 ? RSSM_OK : RSSM_LAUNCH_FAILED;
}
