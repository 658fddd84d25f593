// Launch layer of kernel VF (deferred fold: fold-then-verify of one layer; STAGED or DEFAULT).
#include "replayssm/device/verify_kernels.cuh"
#include "replayssm/launcher.h"

extern "C" rssm_status RSSM_ENTRY(verify_fold)(const rssm_verify_fold_params *params, void *stream) {
  const rssm_status st = rssm::verify_fold_can_implement(params, RSSM_VECTOR_ALIGNED);
  if (st != RSSM_OK || params->verify.num_tokens == 0) return st;
  const rssm::LaunchVerifyImpl<rssm::VerifyFoldKernels, rssm_verify_fold_params> launch{*params, stream};
  return rssm::launched(rssm::dispatch(params->verify.base, launch));
}
