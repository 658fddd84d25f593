// Launch layer of the buffered-decode cursor kernel (snapshot / advance / reset).
#include "replayssm/device/cursors.cuh"
#include "replayssm/launcher.h"

extern "C" rssm_status RSSM_ENTRY(decode_cursors)(const rssm_cursor_params *params, void *stream) {
  const rssm_status st = rssm::cursors_can_implement(params);
  if (st != RSSM_OK) return st;
  return rssm::launch_per_row<128>(&rssm::cursors_kernel<128>, stream, *params);
}
