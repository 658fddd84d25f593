// Launch layer of kernel R. Compiled by nvcc (rssm_recurrent) and, against the SIMT emulator,
// by the host compiler (rssm_emu_recurrent). Validates, picks the instantiation, launches.
#include "replayssm/can_implement.h"
#include "replayssm/device/recurrent.cuh"
#include "replayssm/launcher.h"
#include "replayssm/layout.h"

namespace rssm {
namespace {

template <int EPL, class Act, bool KDA> int launch_recurrent(const rssm_recurrent_params &p, void *stream) {
  const dim3 grid((p.V + RecurrentConfig::kRowsPerBlock - 1) / RecurrentConfig::kRowsPerBlock, p.HV, p.batch);
  const auto kernel = &recurrent_kernel<EPL, Act, KDA>;
  return RSSM_LAUNCH(kernel, grid, dim3(RecurrentConfig::kThreads), 0, stream, p);
}

template <int EPL, class Act> int dispatch_variant(const rssm_recurrent_params &p, void *stream) {
  return p.variant == RSSM_VARIANT_KDA ? launch_recurrent<EPL, Act, true>(p, stream)
                                       : launch_recurrent<EPL, Act, false>(p, stream);
}

template <int EPL> int dispatch_dtype(const rssm_recurrent_params &p, void *stream) {
  switch (p.dtype) {
    case RSSM_DTYPE_F16: return dispatch_variant<EPL, __half>(p, stream);
    case RSSM_DTYPE_BF16: return dispatch_variant<EPL, __nv_bfloat16>(p, stream);
    default: return dispatch_variant<EPL, float>(p, stream);
  }
}

}  // namespace
}  // namespace rssm

extern "C" rssm_status RSSM_ENTRY(recurrent)(const rssm_recurrent_params *params, void *stream) {
  const rssm_status st = rssm::recurrent_can_implement(params, RSSM_VECTOR_ALIGNED);
  if (st != RSSM_OK) return st;
  if (params->num_tokens == 0) return RSSM_OK;
  int err = 0;
  switch (params->K) {
    case 32: err = rssm::dispatch_dtype<1>(*params, stream); break;
    case 64: err = rssm::dispatch_dtype<2>(*params, stream); break;
    case 128: err = rssm::dispatch_dtype<4>(*params, stream); break;
    default: err = rssm::dispatch_dtype<8>(*params, stream); break;
  }
  return err == 0 ? RSSM_OK : RSSM_LAUNCH_FAILED;
}
