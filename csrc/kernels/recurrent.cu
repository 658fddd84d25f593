// Launch layer of kernel R. Compiled by nvcc (rssm_recurrent) and, against the SIMT emulator,
// by the host compiler (rssm_emu_recurrent). Validates, picks the instantiation, launches.
#include <type_traits>

#include "replayssm/device/recurrent.cuh"
#include "replayssm/launcher.h"

namespace {

struct LaunchRecurrent {
  const rssm_recurrent_params &p;
  void *stream;
  template <int EPL, class Act, bool KDA> int operator()() const {
    // record_dtype is F32 or the activations' dtype (checked): f32 activations have one form.
    if constexpr (!std::is_same_v<Act, float>)
      if (p.record_dtype != RSSM_DTYPE_F32)
        return rssm::launch_rows(&rssm::recurrent_kernel<EPL, Act, KDA, Act>, rssm::row_grid(p.base), 0, stream, p);
    return rssm::launch_rows(&rssm::recurrent_kernel<EPL, Act, KDA>, rssm::row_grid(p.base), 0, stream, p);
  }
};

}  // namespace

extern "C" rssm_status RSSM_ENTRY(recurrent)(const rssm_recurrent_params *params, void *stream) {
  const rssm_status st = rssm::recurrent_can_implement(params, RSSM_VECTOR_ALIGNED);
  if (st != RSSM_OK || params->num_tokens == 0) return st;
  return rssm::launched(rssm::dispatch(params->base, LaunchRecurrent{*params, stream}));
}
