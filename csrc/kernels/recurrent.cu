// Launch layer of kernel R. Compiled by nvcc (rssm_recurrent) and, against the SIMT emulator,
// by the host compiler (rssm_emu_recurrent). Validates, picks the instantiation, launches.
#include "replayssm/can_implement.h"
#include "replayssm/device/recurrent.cuh"
#include "replayssm/dispatch.h"
#include "replayssm/launcher.h"
#include "replayssm/layout.h"

namespace {

struct LaunchRecurrent {
  const rssm_recurrent_params &p;
  void *stream;
  template <int EPL, class Act, bool KDA> int operator()() const {
    using rssm::RowTiling;
    const dim3 grid((p.base.V + RowTiling::kRowsPerBlock - 1) / RowTiling::kRowsPerBlock, p.base.HV, p.base.batch);
    const auto kernel = &rssm::recurrent_kernel<EPL, Act, KDA>;
    return RSSM_LAUNCH(kernel, grid, dim3(RowTiling::kThreads), 0, stream, p);
  }
};

}  // namespace

extern "C" rssm_status RSSM_ENTRY(recurrent)(const rssm_recurrent_params *params, void *stream) {
  const rssm_status st = rssm::recurrent_can_implement(params, RSSM_VECTOR_ALIGNED);
  if (st != RSSM_OK) return st;
  if (params->num_tokens == 0) return RSSM_OK;
  const int err = rssm::dispatch(params->base, LaunchRecurrent{*params, stream});
  return err == 0 ? RSSM_OK : RSSM_LAUNCH_FAILED;
}
