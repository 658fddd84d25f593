// Launch layer of kernel VB (buffered speculative verify of one layer) and of the cursor
// bookkeeping between steps (commit / flush / reset).
#include "replayssm/device/verify_buffered.cuh"
#include "replayssm/launcher.h"

namespace {
// The one implementation: staged V's launch, the history's arrays after its tiles.
struct LaunchVerifyBuffered {
  const rssm_verify_buffered_params &p;
  void *stream;
  template <int EPL, class Act, bool KDA> int operator()() const {
    const rssm_verify_params &v = p.verify;
    const auto floats = [&](int rows) {
      return rssm::verify_buffered_smem_floats(v.max_seqlen, v.ring.window, v.base.K, KDA, rows);
    };
    return rssm::launch_staged(&rssm::verify_buffered_kernel<EPL, Act, KDA>, v.base, floats, stream, p);
  }
};
}  // namespace

extern "C" rssm_status RSSM_ENTRY(verify_buffered)(const rssm_verify_buffered_params *params, void *stream) {
  const rssm_status st = rssm::verify_buffered_can_implement(params, RSSM_VECTOR_ALIGNED);
  if (st != RSSM_OK || params->verify.num_tokens == 0) return st;
  const LaunchVerifyBuffered launch{*params, stream};
  return rssm::launched(rssm::dispatch(params->verify.base, launch));
}

extern "C" rssm_status RSSM_ENTRY(buffered)(const rssm_buffered_params *params, void *stream) {
  const rssm_status st = rssm::buffered_can_implement(params);
  if (st != RSSM_OK) return st;
  return rssm::launch_per_row<128>(&rssm::buffered_kernel<128>, stream, *params);
}
