// The pending table of the deferred fold (rssm_defer_params): COMMIT after a step's last VF,
// GATHER before a flush through kernel F's path mode, RESET after it (or when a slot is handed to
// a new request). One thread per row; it runs once per step, not per layer.
#pragma once

#include "replayssm/device/replay.cuh"
#include "replayssm/device/verify_fold.cuh"

namespace rssm {

template <int THREADS> __global__ void __launch_bounds__(THREADS) defer_kernel(const rssm_defer_params p) {
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= p.batch) return;
  const int W = p.window, width = 2 + W;
  int32_t *out = p.op == RSSM_DEFER_GATHER ? p.paths + int64_t(b) * W : nullptr;
  if (out)
    for (int i = 0; i < W; ++i) out[i] = -1;
  const int32_t slot = bookkeeping_slot(p.slots, p.batch, b, p.num_slots, p.error_word);
  if (slot < 0) return;
  int32_t *entry = p.pending + int64_t(slot) * width;
  switch (p.op) {
    case RSSM_DEFER_COMMIT: {
      // The whole entry, as the host checks it: a garbage entry was skipped by VF (flagged
      // there), and committing over it would hide that the slot's checkpoint missed its records.
      if (const uint32_t bad = pending_entry_error(entry, W)) {
        report_device_error(p.error_word, bad);
        return;
      }
      const int32_t half = entry[1];
      const int32_t *path = p.accept_paths ? p.accept_paths + int64_t(b) * p.path_width : nullptr;
      const int n = path ? accepted_path_length(path, p.path_width, W) : p.accept_lens[b];
      if (path && n < 0) {
        report_device_error(p.error_word, RSSM_DEVERR_BAD_TREE);
        return;
      }
      if (n < 0 || n > W) {
        report_device_error(p.error_word, RSSM_DEVERR_BAD_LENGTH);
        return;
      }
      const int32_t next = 1 - half;
      entry[0] = n;
      entry[1] = next;
      for (int i = 0; i < W; ++i) entry[2 + i] = i < n ? next * W + (path ? path[i] : i) : -1;
      break;
    }
    case RSSM_DEFER_GATHER: {
      if (const uint32_t bad = pending_entry_error(entry, W)) {
        report_device_error(p.error_word, bad);
        return;
      }
      for (int i = 0; i < entry[0]; ++i) out[i] = entry[2 + i];
      break;
    }
    default:  // RSSM_DEFER_RESET (can_implement refuses other ops)
      entry[0] = 0;
      if (entry[1] != 0 && entry[1] != 1) entry[1] = 0;
      break;
  }
}

}  // namespace rssm
