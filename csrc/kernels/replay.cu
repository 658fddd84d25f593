// Launch layer of kernel P (fp32 checkpoint replay of one layer).
#include "replayssm/can_implement.h"
#include "replayssm/device/replay.cuh"
#include "replayssm/dispatch.h"
#include "replayssm/launcher.h"
#include "replayssm/layout.h"

namespace {

struct LaunchReplay {
  const rssm_replay_params &p;
  void *stream;
  template <int EPL, class Act, bool KDA> int operator()() const {
    return p.base.impl == RSSM_IMPL_PREFETCH ? run<EPL, Act, KDA, true>() : run<EPL, Act, KDA, false>();
  }
  template <int EPL, class Act, bool KDA, bool PREFETCH> int run() const {
    using rssm::RowTiling;
    const dim3 grid((p.base.V + RowTiling::kRowsPerBlock - 1) / RowTiling::kRowsPerBlock, p.base.HV, p.base.batch);
    const size_t smem = PREFETCH ? sizeof(float) * rssm::replay_prefetch_smem_floats(p.ring.window, p.base.K, KDA) : 0;
    const auto kernel = &rssm::replay_kernel<EPL, Act, KDA, PREFETCH>;
    const int err = RSSM_ALLOW_SMEM(kernel, smem);
    if (err != 0) return err;
    return RSSM_LAUNCH(kernel, grid, dim3(RowTiling::kThreads), smem, stream, p);
  }
};

}  // namespace

extern "C" rssm_status RSSM_ENTRY(replay)(const rssm_replay_params *params, void *stream) {
  const rssm_status st = rssm::replay_can_implement(params, RSSM_VECTOR_ALIGNED);
  if (st != RSSM_OK) return st;
  const int err = rssm::dispatch(params->base, LaunchReplay{*params, stream});
  return err == 0 ? RSSM_OK : RSSM_LAUNCH_FAILED;
}
