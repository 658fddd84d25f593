// Launch layer of kernel V (chunked verify; STAGED or DEFAULT). Compiled by nvcc and against the
// SIMT emulator.
#include "replayssm/device/verify_staged.cuh"
#include "replayssm/launcher.h"

namespace {

struct LaunchVerify {
  const rssm_verify_params &p;
  void *stream;
  template <int EPL, class Act, bool KDA> int operator()() const {
    if (p.base.impl == RSSM_IMPL_STAGED) {
      const auto floats = [&](int rows) { return rssm::verify_staged_smem_floats(p.max_seqlen, p.base.K, KDA, rows); };
      return rssm::launch_staged(&rssm::verify_staged_kernel<EPL, Act, KDA>, p.base, floats, stream, p);
    }
    const size_t smem = sizeof(float) * rssm::verify_smem_floats(p.max_seqlen, p.base.K, KDA);
    return rssm::launch_rows(&rssm::verify_kernel<EPL, Act, KDA>, rssm::row_grid(p.base), smem, stream, p);
  }
};

}  // namespace

extern "C" rssm_status RSSM_ENTRY(verify)(const rssm_verify_params *params, void *stream) {
  const rssm_status st = rssm::verify_can_implement(params, RSSM_VECTOR_ALIGNED);
  if (st != RSSM_OK || params->num_tokens == 0) return st;
  return rssm::launched(rssm::dispatch(params->base, LaunchVerify{*params, stream}));
}
