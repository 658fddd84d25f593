// Launch layer of kernel D (buffered decode) and its materialise entry.
#include "replayssm/can_implement.h"
#include "replayssm/device/decode.cuh"
#include "replayssm/dispatch.h"
#include "replayssm/launcher.h"
#include "replayssm/layout.h"

namespace {

struct LaunchDecode {
  const rssm_decode_params &p;
  void *stream;
  bool materialize;
  template <int EPL, class Act, bool KDA> int operator()() const {
    using rssm::RowTiling;
    const int rows = (p.base.V + RowTiling::kRowsPerBlock - 1) / RowTiling::kRowsPerBlock;
    if (materialize) {
      const auto kernel = &rssm::decode_materialize_kernel<EPL, KDA>;
      const dim3 grid(unsigned(rows) * unsigned(p.base.num_layers), p.base.HV, p.base.batch);
      return RSSM_LAUNCH(kernel, grid, dim3(RowTiling::kThreads), 0, stream, p);
    }
    const auto kernel = p.base.impl == RSSM_IMPL_PREFETCH ? &rssm::decode_prefetch_kernel<EPL, Act, KDA>
                                                     : &rssm::decode_kernel<EPL, Act, KDA>;
    return RSSM_LAUNCH(kernel, dim3(rows, p.base.HV, p.base.batch), dim3(RowTiling::kThreads), 0, stream, p);
  }
};

}  // namespace

extern "C" rssm_status RSSM_ENTRY(decode)(const rssm_decode_params *params, void *stream) {
  const rssm_status st = rssm::decode_can_implement(params, RSSM_VECTOR_ALIGNED);
  if (st != RSSM_OK) return st;
  const int err = rssm::dispatch(params->base, LaunchDecode{*params, stream, false});
  return err == 0 ? RSSM_OK : RSSM_LAUNCH_FAILED;
}

extern "C" rssm_status RSSM_ENTRY(decode_materialize)(const rssm_decode_params *params, void *stream) {
  const rssm_status st = rssm::decode_can_implement(params, RSSM_VECTOR_ALIGNED, false);
  if (st != RSSM_OK) return st;
  const int err = rssm::dispatch(params->base, LaunchDecode{*params, stream, true});
  return err == 0 ? RSSM_OK : RSSM_LAUNCH_FAILED;
}
