// Launch layer of kernel D (buffered decode) and its materialise entry.
#include <type_traits>

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
      switch (p.ring_dtype) {  // any record type: the params carry no activations
        case RSSM_DTYPE_F16: return rssm::launch_rows(&rssm::decode_materialize_kernel<EPL, KDA, __half>, grid, 0, stream, p);
        case RSSM_DTYPE_BF16:
          return rssm::launch_rows(&rssm::decode_materialize_kernel<EPL, KDA, __nv_bfloat16>, grid, 0, stream, p);
        default: return rssm::launch_rows(&rssm::decode_materialize_kernel<EPL, KDA>, grid, 0, stream, p);
      }
    }
    // ring_dtype is F32 or the activations' dtype (checked): f32 activations have one form.
    if constexpr (!std::is_same_v<Act, float>)
      if (p.ring_dtype != RSSM_DTYPE_F32) return launch<EPL, Act, KDA, Act>();
    return launch<EPL, Act, KDA, float>();
  }

  template <int EPL, class Act, bool KDA, class Rec> int launch() const {
    constexpr int rows = rssm::ReplayTiling<EPL>::kRowsPerBlock;
    const auto kernel = p.base.impl == RSSM_IMPL_PREFETCH ? &rssm::decode_prefetch_kernel<EPL, Act, KDA, Rec>
                                                          : &rssm::decode_kernel<EPL, Act, KDA, Rec>;
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
