// Launch layer of kernel D (buffered decode) and its materialise entry.
#include "replayssm/device/decode.cuh"
#include "replayssm/launcher.h"

namespace {

struct LaunchDecode {
  const rssm_decode_params &p;
  void *stream;
  bool materialize;
  template <int EPL, class Act, bool KDA> int operator()() const {
    constexpr int rows = rssm::ReplayTiling<EPL>::kRowsPerBlock;
    if (materialize) {
      const dim3 grid = rssm::row_grid(p.base, rows, p.base.num_layers);
      return rssm::launch_rows(&rssm::decode_materialize_kernel<EPL, KDA>, grid, 0, stream, p);
    }
    const auto kernel = p.base.impl == RSSM_IMPL_PREFETCH ? &rssm::decode_prefetch_kernel<EPL, Act, KDA>
                                                          : &rssm::decode_kernel<EPL, Act, KDA>;
    const size_t smem = sizeof(float) * rssm::decode_smem_floats(32 * EPL, KDA);
    return rssm::launch_rows(kernel, rssm::row_grid(p.base, rows), smem, stream, p);
  }
};

}  // namespace

extern "C" rssm_status RSSM_ENTRY(decode)(const rssm_decode_params *params, void *stream) {
  const rssm_status st = rssm::decode_can_implement(params, RSSM_VECTOR_ALIGNED);
  if (st != RSSM_OK) return st;
  return rssm::launched(rssm::dispatch(params->base, LaunchDecode{*params, stream, false}));
}

extern "C" rssm_status RSSM_ENTRY(decode_materialize)(const rssm_decode_params *params, void *stream) {
  const rssm_status st = rssm::decode_can_implement(params, RSSM_VECTOR_ALIGNED, false);
  if (st != RSSM_OK) return st;
  return rssm::launched(rssm::dispatch(params->base, LaunchDecode{*params, stream, true}));
}
