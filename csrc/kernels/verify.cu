// Launch layer of kernel V (chunked verify; STAGED or DEFAULT). Compiled by nvcc and against the
// SIMT emulator.
#include "replayssm/device/verify_kernels.cuh"
#include "replayssm/launcher.h"

extern "C" rssm_status RSSM_ENTRY(verify)(const rssm_verify_params *params, void *stream) {
  const rssm_status st = rssm::verify_can_implement(params, RSSM_VECTOR_ALIGNED);
  if (st != RSSM_OK || params->num_tokens == 0) return st;
  const rssm::LaunchVerifyImpl<rssm::VerifyKernels, rssm_verify_params> launch{*params, stream};
  return rssm::launched(rssm::dispatch(params->base, launch));
}
