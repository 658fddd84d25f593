// Launch layer of the deferred fold's pending-table kernel (commit / gather / reset).
#include "replayssm/can_implement.h"
#include "replayssm/device/defer.cuh"
#include "replayssm/launcher.h"
#include "replayssm/layout.h"

extern "C" rssm_status RSSM_ENTRY(defer)(const rssm_defer_params *params, void *stream) {
  const rssm_status st = rssm::defer_can_implement(params);
  if (st != RSSM_OK) return st;
  constexpr int kThreads = 128;
  const int blocks = (params->batch + kThreads - 1) / kThreads;
  const auto kernel = &rssm::defer_kernel<kThreads>;
  const int err = RSSM_LAUNCH(kernel, dim3(blocks), dim3(kThreads), 0, stream, *params);
  return err == 0 ? RSSM_OK : RSSM_LAUNCH_FAILED;
}
