// Launch layer of kernel F (fold-every-commit, all layers in one launch).
#include "replayssm/launch_replay.h"

extern "C" rssm_status RSSM_ENTRY(fold)(const rssm_fold_params *params, void *stream) {
  const rssm_status st = rssm::fold_can_implement(params, RSSM_VECTOR_ALIGNED);
  if (st != RSSM_OK) return st;
  return rssm::launched(rssm::dispatch(params->base, rssm::LaunchRingReplay<rssm_fold_params>{*params, stream}));
}
