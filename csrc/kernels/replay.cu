// Launch layer of kernel P (fp32 checkpoint replay of one layer).
#include "replayssm/launch_replay.h"

extern "C" rssm_status RSSM_ENTRY(replay)(const rssm_replay_params *params, void *stream) {
  const rssm_status st = rssm::replay_can_implement(params, RSSM_VECTOR_ALIGNED);
  if (st != RSSM_OK) return st;
  return rssm::launched(rssm::dispatch(params->base, rssm::LaunchRingReplay<rssm_replay_params>{*params, stream}));
}
