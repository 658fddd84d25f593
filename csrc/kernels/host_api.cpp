// C entry points that need no device: compiled once, by the host compiler.
#include "replayssm/can_implement.h"

extern "C" rssm_status rssm_recurrent_can_implement(const rssm_recurrent_params *params) {
  return rssm::recurrent_can_implement(params, true);
}
