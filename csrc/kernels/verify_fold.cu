// Launch layer of kernel VF (deferred fold: fold-then-verify of one layer).
#include "replayssm/can_implement.h"
#include "replayssm/device/verify_fold.cuh"
#include "replayssm/dispatch.h"
#include "replayssm/launcher.h"
#include "replayssm/layout.h"

namespace {

struct LaunchVerifyFold {
  const rssm_verify_fold_params &p;
  void *stream;
  template <int EPL, class Act, bool KDA> int operator()() const {
    using rssm::RowTiling;
    const rssm_verify_params &v = p.verify;
    const dim3 grid((v.base.V + RowTiling::kRowsPerBlock - 1) / RowTiling::kRowsPerBlock, v.base.HV, v.base.batch);
    const size_t smem = sizeof(float) * rssm::verify_smem_floats(v.max_seqlen, v.base.K, KDA);
    const auto kernel = &rssm::verify_fold_kernel<EPL, Act, KDA>;
    const int err = RSSM_ALLOW_SMEM(kernel, smem);
    if (err != 0) return err;
    return RSSM_LAUNCH(kernel, grid, dim3(RowTiling::kThreads), smem, stream, p);
  }
};

}  // namespace

extern "C" rssm_status RSSM_ENTRY(verify_fold)(const rssm_verify_fold_params *params, void *stream) {
  const rssm_status st = rssm::verify_fold_can_implement(params, RSSM_VECTOR_ALIGNED);
  if (st != RSSM_OK) return st;
  if (params->verify.num_tokens == 0) return RSSM_OK;
  const rssm_verify_params &v = params->verify;
  const int err = rssm::dispatch(v.base, LaunchVerifyFold{*params, stream});
  return err == 0 ? RSSM_OK : RSSM_LAUNCH_FAILED;
}
