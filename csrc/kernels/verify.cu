// Launch layer of kernel V (chunked verify). Compiled by nvcc and against the SIMT emulator.
#include "replayssm/can_implement.h"
#include "replayssm/device/verify_staged.cuh"
#include "replayssm/dispatch.h"
#include "replayssm/launcher.h"
#include "replayssm/layout.h"

namespace {

struct LaunchVerify {
  const rssm_verify_params &p;
  void *stream;
  template <int EPL, class Act, bool KDA> int operator()() const {
    using rssm::RowTiling;
    if (p.base.impl == RSSM_IMPL_STAGED) {
      const int rows = rssm::verify_staged_block_rows(p.base.block_rows, p.base.V);
      const dim3 grid((p.base.V + rows - 1) / rows, p.base.HV, p.base.batch);
      const size_t smem = sizeof(float) * rssm::verify_staged_smem_floats(p.max_seqlen, p.base.K, KDA, rows);
      const auto kernel = &rssm::verify_staged_kernel<EPL, Act, KDA>;
      const int err = RSSM_ALLOW_SMEM(kernel, smem);
      if (err != 0) return err;
      return RSSM_LAUNCH(kernel, grid, dim3(RowTiling::kThreads), smem, stream, p);
    }
    const dim3 grid((p.base.V + RowTiling::kRowsPerBlock - 1) / RowTiling::kRowsPerBlock, p.base.HV, p.base.batch);
    const size_t smem = sizeof(float) * rssm::verify_smem_floats(p.max_seqlen, p.base.K, KDA);
    const auto kernel = &rssm::verify_kernel<EPL, Act, KDA>;
    const int err = RSSM_ALLOW_SMEM(kernel, smem);
    if (err != 0) return err;
    return RSSM_LAUNCH(kernel, grid, dim3(RowTiling::kThreads), smem, stream, p);
  }
};

}  // namespace

extern "C" rssm_status RSSM_ENTRY(verify)(const rssm_verify_params *params, void *stream) {
  const rssm_status st = rssm::verify_can_implement(params, RSSM_VECTOR_ALIGNED);
  if (st != RSSM_OK) return st;
  if (params->num_tokens == 0) return RSSM_OK;
  const int err = rssm::dispatch(params->base, LaunchVerify{*params, stream});
  return err == 0 ? RSSM_OK : RSSM_LAUNCH_FAILED;
}
