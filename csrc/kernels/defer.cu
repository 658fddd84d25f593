// Launch layer of the deferred fold's pending-table kernel (commit / gather / reset).
#include "replayssm/device/defer.cuh"
#include "replayssm/launcher.h"

extern "C" rssm_status RSSM_ENTRY(defer)(const rssm_defer_params *params, void *stream) {
  const rssm_status st = rssm::defer_can_implement(params);
  if (st != RSSM_OK) return st;
  return rssm::launch_per_row<128>(&rssm::defer_kernel<128>, stream, *params);
}
