// Launch layer of kernel VF (deferred fold: fold-then-verify of one layer; STAGED or DEFAULT).
#include "replayssm/device/verify_fold.cuh"
#include "replayssm/launcher.h"

namespace {

struct LaunchVerifyFold {
  const rssm_verify_fold_params &p;
  void *stream;
  template <int EPL, class Act, bool KDA> int operator()() const {
    const rssm_verify_params &v = p.verify;
    if (v.base.impl == RSSM_IMPL_STAGED) {
      const auto floats = [&](int rows) {
        return rssm::verify_fold_staged_smem_floats(v.max_seqlen, v.ring.window / 2, v.base.K, KDA, rows);
      };
      return rssm::launch_staged(&rssm::verify_fold_staged_kernel<EPL, Act, KDA>, v.base, floats, stream, p);
    }
    const size_t smem = sizeof(float) * rssm::verify_smem_floats(v.max_seqlen, v.base.K, KDA);
    return rssm::launch_rows(&rssm::verify_fold_kernel<EPL, Act, KDA>, rssm::row_grid(v.base), smem, stream, p);
  }
};

}  // namespace

extern "C" rssm_status RSSM_ENTRY(verify_fold)(const rssm_verify_fold_params *params, void *stream) {
  const rssm_status st = rssm::verify_fold_can_implement(params, RSSM_VECTOR_ALIGNED);
  if (st != RSSM_OK || params->verify.num_tokens == 0) return st;
  return rssm::launched(rssm::dispatch(params->verify.base, LaunchVerifyFold{*params, stream}));
}
