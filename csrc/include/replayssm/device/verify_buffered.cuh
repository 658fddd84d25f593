// Kernel VB (buffered speculative verify, design §4 VB) and the cursor bookkeeping between steps.
// Per layer, each live request's accepted history (ring positions 0..h-1) is replayed onto its
// checkpoint in registers with F's loop, the new window verified from that state with DEFAULT V's
// phase 4, and the window's raw records written after the history (positions h..h+len-1). The
// checkpoint is only read: a flush (kernel F's prefix mode on the lengths rssm_buffered wrote)
// rewrites it once the history leaves no room for the next window. One block per (16-row tile,
// value head, request), VF's tiling: the replay's rows are the verify's rows.
#pragma once

#include "replayssm/device/replay.cuh"
#include "replayssm/device/verify.cuh"

namespace rssm {

// The request's history length h from the cursors, or -1 when it cannot be trusted (flagged): h
// must leave room for the window after it (h + len <= L), so no record of the history is
// overwritten and every write stays inside the slot's ring.
__device__ __forceinline__ int buffered_history(const rssm_verify_buffered_params &vb, const VerifyRequest &rq,
                                                bool reporter) {
  if (!rq.live) return -1;
  const int h = vb.cursors[rq.slot];
  if (h < 0 || h > vb.verify.ring.window - rq.len) {
    if (reporter) report_device_error(vb.verify.base.error_word, RSSM_DEVERR_BAD_LENGTH);
    return -1;
  }
  return h;
}

// One resident block (the state rows fill the registers, as in F and VF).
template <int EPL, class Act, bool KDA>
__global__ void __launch_bounds__(RowTiling::kThreads, 1) verify_buffered_kernel(const rssm_verify_buffered_params vb) {
  const rssm_verify_params &p = vb.verify;
  constexpr int K = kWarpSize * EPL;
  constexpr int ROWS = RowTiling::kRows;
  static_assert(RSSM_MAX_VERIFY_WINDOW <= 32, "ancestor sets are 32-bit masks");
  const RowTileBlock at(p.base);
  const int hv = at.hv, req = at.req, tile = at.tile, row0 = at.row0, begin = at.begin, end = at.end;
  const bool reporter = at.reporter;

  VerifyRequest rq;
  if (!verify_request(p, req, reporter, rq)) {
    verify_skipped_request<Act>(p, req, hv, begin, end);
    return;
  }
  const int h = buffered_history(vb, rq, reporter);
  if (h < 0) {  // null, untrusted slot or cursor: zero outputs, nothing else
    verify_zero_outputs<Act>(p, rq, hv, begin, end);
    return;
  }
  RSSM_DYNAMIC_SMEM(float, smem);
  const WindowSmem w = window_smem(smem, p.max_seqlen, K, KDA);
  verify_tree_ok(p, rq, w, reporter);  // a chain (no parent: can_implement): the mask, always ok
  // The checkpoint rows are requested first, so their load overlaps the window build.
  const ReplayRows<EPL, Act, KDA> rows(ring_geometry(p.base, p.ring), tile, p.base.layer, rq.slot, -1);
  float s[ROWS][EPL];
  load_rows(rows.state, K, rows.row_ok, s);
  const int64_t layer_slot = int64_t(p.base.layer) * p.base.num_slots + rq.slot;
  build_window<EPL, Act, KDA>(p, rq, w, hv, layer_slot, h);
  if (row0 >= p.base.V) return;
  replay_steps(rows, h, -1, nullptr, s);
  verify_rows<EPL, Act, KDA>(p, rq, w, hv, layer_slot, h, row0, s);
}

// rssm_buffered: one thread per row (it runs once per step, not per layer).
template <int THREADS> __global__ void __launch_bounds__(THREADS) buffered_kernel(const rssm_buffered_params p) {
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= p.batch) return;
  if (p.flush_lens) p.flush_lens[b] = 0;
  const int32_t slot = bookkeeping_slot(p.slots, p.batch, b, p.num_slots, p.error_word);
  if (slot < 0) return;
  if (p.op == RSSM_BUFFERED_RESET) {
    p.cursors[slot] = 0;
    return;
  }
  const int32_t h = p.cursors[slot];
  if (h < 0 || h > p.cache_len - p.window) {  // VB skipped the row as well: its cursor stays
    report_device_error(p.error_word, RSSM_DEVERR_BAD_LENGTH);
    return;
  }
  if (p.op == RSSM_BUFFERED_FLUSH) {
    p.flush_lens[b] = h;
    p.cursors[slot] = 0;
    return;
  }
  // RSSM_BUFFERED_COMMIT (can_implement refuses other ops)
  const int32_t a = p.accept_lens[b];
  if (a < 0 || a > p.window) {
    report_device_error(p.error_word, RSSM_DEVERR_BAD_LENGTH);
    return;
  }
  const int32_t next = h + a;
  if (next > p.cache_len - p.window) {
    p.flush_lens[b] = next;
    p.cursors[slot] = 0;
  } else {
    p.cursors[slot] = next;
  }
}

}  // namespace rssm
