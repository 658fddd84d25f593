// Buffered-decode cursor protocol on the device (design §4 cursors): snapshot, advance, reset. The
// cursors live in device memory so that a captured CUDA graph replays the whole decode step
// (snapshot, every layer's D, advance) with no host round trip. One thread per row.
#pragma once

#include "replayssm/device/common.cuh"

namespace rssm {

// A template (on its block size) like every kernel here: the header is compiled into both the CUDA
// and the emulator library, and template instantiations do not collide at link time.
template <int THREADS> __global__ void __launch_bounds__(THREADS) cursors_kernel(const rssm_cursor_params p) {
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= p.batch) return;
  const int32_t slot = p.slots[b];
  if (slot == -1) {
    if (p.op == RSSM_CURSOR_SNAPSHOT) p.positions[b] = 0;
    return;
  }
  if (slot < -1 || slot >= p.num_slots) {  // garbage, not a null row: flagged
    report_device_error(p.error_word, RSSM_DEVERR_SLOT_OUT_OF_RANGE);
    if (p.op == RSSM_CURSOR_SNAPSHOT) p.positions[b] = 0;
    return;
  }
  // A live slot shared with another row: both rows are skipped (ADVANCE would race on the cursor).
  // SNAPSHOT hands them position -1, so kernel D and ADVANCE skip them as well. (One thread per
  // row here: each scans the row list itself; the kernel runs twice per decode step, not per layer.)
  if (thread_find_other(p.slots, p.batch, b, slot)) {
    report_device_error(p.error_word, RSSM_DEVERR_DUPLICATE_SLOT);
    if (p.op == RSSM_CURSOR_SNAPSHOT) p.positions[b] = -1;
    return;
  }
  switch (p.op) {
    case RSSM_CURSOR_SNAPSHOT: {
      // A cursor outside 0..L-1 is copied as is: kernel D then flags and skips the row instead of
      // silently dropping its pending records.
      const int32_t m = p.cursors[slot];
      if (m < 0 || m >= p.cache_len) report_device_error(p.error_word, RSSM_DEVERR_BAD_LENGTH);
      p.positions[b] = m;
      break;
    }
    case RSSM_CURSOR_ADVANCE: {
      const int32_t m = p.positions[b];
      if (m < 0 || m >= p.cache_len) {
        report_device_error(p.error_word, RSSM_DEVERR_BAD_LENGTH);
        break;  // the cursor keeps its value; the row was skipped by D as well
      }
      const bool flush = m == p.cache_len - 1 || (p.force_flush && p.force_flush[b] != 0);
      p.cursors[slot] = flush ? 0 : m + 1;
      break;
    }
    default:  // RSSM_CURSOR_RESET (can_implement refuses other ops)
      p.cursors[slot] = 0;
      break;
  }
}

}  // namespace rssm
