// What every launch layer (.cu) shares: the two compilations' differences (the exported name,
// whether 16-byte vector loads require aligned bases, which status a failed launch maps to),
// the row-tiled grid and the launch helpers. An entry checks first (can_implement reads a null
// params pointer safely), then dereferences.
#pragma once

#include <stddef.h>

#include "replayssm/can_implement.h"
#include "replayssm/device/tiling.cuh"
#include "replayssm/dispatch.h"
#include "replayssm/layout.h"
#include "replayssm/smem.h"

#if defined(RSSM_EMULATION)
#define RSSM_ENTRY(name) rssm_emu_##name
#define RSSM_VECTOR_ALIGNED false
#define RSSM_LAUNCH_FAILED RSSM_ERR_EMULATOR
#else
#define RSSM_ENTRY(name) rssm_##name
#define RSSM_VECTOR_ALIGNED true
#define RSSM_LAUNCH_FAILED RSSM_ERR_LAUNCH
#endif

namespace rssm {

// One block per `rows` state rows of a value head (times `layers` where one launch covers every
// layer), per value head, per request.
inline dim3 row_grid(const rssm_base_params &b, int rows = RowTiling::kRowsPerBlock, int layers = 1) {
  return dim3(unsigned((b.V + rows - 1) / rows) * unsigned(layers), unsigned(b.HV), unsigned(b.batch));
}

// Launches a RowTiling kernel on the caller's stream with `smem` bytes of dynamic shared memory
// (opted in above 48 KB); the launch's error as int.
template <class Kernel, class Params>
int launch_rows(Kernel kernel, dim3 grid, size_t smem, void *stream, const Params &p) {
  const int err = RSSM_ALLOW_SMEM(kernel, smem);
  if (err != 0) return err;
  return RSSM_LAUNCH(kernel, grid, dim3(RowTiling::kThreads), smem, stream, p);
}

// A STAGED launch (V, VF): one block per `block_rows` rows of each head (the whole head for 0),
// `floats(rows)` 4-byte words of dynamic shared memory.
template <class Kernel, class Params, class Floats>
int launch_staged(Kernel kernel, const rssm_base_params &b, Floats floats, void *stream, const Params &p) {
  const int rows = verify_staged_block_rows(b.block_rows, b.V);
  return launch_rows(kernel, row_grid(b, rows), sizeof(float) * size_t(floats(rows)), stream, p);
}

// V's part of a verify launch's params (VF nests a whole V).
inline const rssm_verify_params &verify_part(const rssm_verify_params &p) { return p; }
inline const rssm_verify_params &verify_part(const rssm_verify_fold_params &p) { return p.verify; }

// Dynamic shared memory of a STAGED block of `rows` rows; VF's also holds the pending records
// (up to one half of the ring).
inline int64_t staged_smem_floats(const rssm_verify_params &p, bool kda, int rows) {
  return verify_staged_smem_floats(p.max_seqlen, p.base.K, kda, rows);
}
inline int64_t staged_smem_floats(const rssm_verify_fold_params &p, bool kda, int rows) {
  const rssm_verify_params &v = p.verify;
  return verify_fold_staged_smem_floats(v.max_seqlen, v.ring.window / 2, v.base.K, kda, rows);
}

// The launch of V or VF by the params' implementation: STAGED (above) or DEFAULT (a row tile
// per warp, the window in shared memory). `Kernels<EPL, Act, KDA>::staged` and `::rows` name
// the two kernels of one params type.
template <template <int, class, bool> class Kernels, class Params> struct LaunchVerifyImpl {
  const Params &p;
  void *stream;
  template <int EPL, class Act, bool KDA> int operator()() const {
    using K = Kernels<EPL, Act, KDA>;
    const rssm_verify_params &v = verify_part(p);
    if (v.base.impl == RSSM_IMPL_STAGED) {
      const auto floats = [&](int rows) { return staged_smem_floats(p, KDA, rows); };
      return launch_staged(K::staged, v.base, floats, stream, p);
    }
    const size_t smem = sizeof(float) * verify_smem_floats(v.max_seqlen, v.base.K, KDA);
    return launch_rows(K::rows, row_grid(v.base), smem, stream, p);
  }
};

// A launch's error as this compilation's status.
inline rssm_status launched(int err) { return err == 0 ? RSSM_OK : RSSM_LAUNCH_FAILED; }

// A bookkeeping kernel (cursors, defer): one thread per row of the batch.
template <int kThreads, class Kernel, class Params> rssm_status launch_per_row(Kernel kernel, void *stream, const Params &p) {
  const dim3 blocks(unsigned((p.batch + kThreads - 1) / kThreads));
  return launched(RSSM_LAUNCH(kernel, blocks, dim3(kThreads), 0, stream, p));
}

}  // namespace rssm
