// Kernel VB (buffered speculative verify, design §4 VB) and the cursor bookkeeping between steps.
//
// Per layer and live request, the state the window starts from is the checkpoint S0 followed by
// the request's accepted history (spec-ring positions 0..h-1, h its cursor). With u_j the delta
// rule's correction of record j (S_{j+1} = e^{g_j} S_j + u_j k_j^T), that state is
//   S_h = e^{H} S0 + sum_j u_j (e^{D_j} k_j)^T,   H = sum of the history's log decays,
//                                                D_j = the log decays after record j
// (per channel for KDA). VB never forms it: staged V's streaming pass projects S0 on the window's
// keys and queries with e^{H} folded in, and the history adds, per state row and window position
// i, sum_j u_j[row] (e^{D_j} k_j . k_i) to the key's projection and the same over q_i to the
// query's: a [T][h] matrix per head and h values per row, not h replays of the row. The u_j of
// the history are the ones VB itself computed when their window was verified (written with the
// raw records, ring_u); the window's own u_i go to ring_u at positions h..h+len-1. The outputs
// are V's up to rounding (checked against the f64 reference with V's tolerance); with h = 0 they
// are staged V's bits. The checkpoint is only read: a flush (kernel F's prefix mode on the
// lengths rssm_buffered wrote) replays the raw records into it, bit-identical to R.
//
// One block per (row block, value head, request), staged V's layout (verify_staged.cuh).
#pragma once

#include "replayssm/device/verify_staged.cuh"

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

// VB's history arrays after the staged tiles, from a 16-byte boundary (verify_buffered_smem_floats).
struct HistorySmem {
  float *A;   // [L][TP] e^{G_i + D_j} (k_i . k_j), history record j, window position i
  float *S;   // [L][TP] e^{G_i + D_j} (q_i . k_j)
  float *k;   // [L][K] the history's raw keys
  float *g;   // [L + 1][GW] their log decays; then GDN: D_j at j, KDA: e^{D_j}; row L: H
  float *u;   // [L][RB] the history's u_j of the block's rows
  int TP;
  __device__ __forceinline__ HistorySmem(float *smem, int64_t at, int T, int L, int K, bool kda) {
    TP = (T + 3) / 4 * 4;  // 16-byte rows
    A = smem + (at + 3) / 4 * 4;
    S = A + L * TP;
    k = S + L * TP;
    g = k + L * K;
    u = g + (L + 1) * (kda ? K : 1);
  }
};

// `n_rows` rows of `cols` values from global to shared memory (src[r * src_row + c] to
// dst[r * dst_row + c]): consecutive threads on consecutive columns (min(cols, threads) of them
// per row, the other threads on the next rows), 4 rows loaded per thread before any store; no
// division per element. Whole block.
template <class Src>
__device__ __forceinline__ void stage_rows(const Src *src, int64_t src_row, float *dst, int dst_row, int cols,
                                           int n_rows) {
  constexpr int BATCH = 4;
  const int lanes = cols < int(blockDim.x) ? cols : int(blockDim.x), groups = int(blockDim.x) / lanes;
  if (int(threadIdx.x) >= lanes * groups) return;  // (no barrier inside)
  const int c0 = int(threadIdx.x) % lanes, r00 = int(threadIdx.x) / lanes;
  // Rows outside, columns inside (one trip where cols <= threads): the model's h / 4 weight for
  // the row loop holds at K = 128 and 128 rows; its ceil(T / 4) for the column loop, at T <= 4.
  for (int r0 = r00; r0 < n_rows; r0 += BATCH * groups) {
    for (int c = c0; c < cols; c += lanes) {
      float x[BATCH];
      RSSM_UNROLL
      for (int b = 0; b < BATCH; ++b) {
        const int r = r0 + b * groups;
        x[b] = r < n_rows ? to_float(src[int64_t(r) * src_row + c]) : 0.0f;
      }
      RSSM_UNROLL
      for (int b = 0; b < BATCH; ++b) {
        const int r = r0 + b * groups;
        if (r < n_rows) dst[r * dst_row + c] = x[b];
      }
    }
  }
}

// The history's terms, once per block, after stage_window_tile (the window's keys and queries
// decayed by their own G_i for KDA, eG = e^{G_i} for GDN): the history's raw keys, log decays
// and corrections staged, its decays summed from the end, its [h][T] matrices formed, then e^{H}
// folded into what the streaming pass projects S0 on (KDA: the staged keys and queries; GDN:
// eG). Whole block; ends with a barrier.
template <int EPL, class Act, bool KDA>
__device__ __forceinline__ void buffered_history_terms(const rssm_verify_buffered_params &vb, const VerifyRequest &rq,
                                                       const WindowSmem &w, const HistorySmem &hs, float *eG, int h,
                                                       int hv, int64_t layer_slot, int rb0, int rows, int RB) {
  const rssm_verify_params &p = vb.verify;
  constexpr int K = kWarpSize * EPL;
  constexpr int GW = KDA ? K : 1;
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int kc = lane * EPL, L = p.ring.window, len = rq.len;
  const int64_t head_pos = (layer_slot * p.base.HV + hv) * int64_t(L);  // ring position 0 of this head
  const Act *rk = static_cast<const Act *>(p.ring.k) + (layer_slot * p.base.H + hv / (p.base.HV / p.base.H)) * int64_t(L) * K;
  stage_rows(rk, K, hs.k, K, K, h);
  stage_rows(p.ring.g + head_pos * GW, GW, hs.g, GW, GW, h);
  stage_rows(vb.ring_u + head_pos * p.base.V + rb0, p.base.V, hs.u, RB, rows, h);
  __syncthreads();

  // The decays after each record, summed from the end (GDN: one thread; KDA: one per channel).
  for (int c = threadIdx.x; c < GW; c += blockDim.x) {
    float d = 0.0f;
    for (int j = h - 1; j >= 0; --j) {
      const float gj = hs.g[j * GW + c];
      hs.g[j * GW + c] = KDA ? expf(d) : d;
      d += gj;
    }
    hs.g[L * GW + c] = d;
  }
  __syncthreads();

  // A warp per record j: its key (normalised, decayed by e^{D_j}) against the window's keys and
  // queries, 4 positions per butterfly.
  for (int j = warp; j < h; j += RowTiling::kWarps) {
    float kj[EPL];
    RSSM_UNROLL
    for (int e = 0; e < EPL; ++e) kj[e] = hs.k[j * K + kc + e];
    if (p.base.qk_l2norm) l2_normalize(kj);
    if constexpr (KDA) {
      RSSM_UNROLL
      for (int e = 0; e < EPL; ++e) kj[e] = kj[e] * hs.g[j * K + kc + e];
    }
    const float dj = KDA ? 0.0f : hs.g[j];
    RSSM_NO_UNROLL
    for (int i0 = 0; i0 < len; i0 += 4) {
      float d[8];
      RSSM_UNROLL
      for (int q = 0; q < 4; ++q) {
        const int i = i0 + q < len ? i0 + q : len - 1;
        d[2 * q] = 0.0f;
        d[2 * q + 1] = 0.0f;
        RSSM_UNROLL
        for (int e = 0; e < EPL; ++e) {
          d[2 * q] = fmaf(w.kh[i * K + kc + e], kj[e], d[2 * q]);
          d[2 * q + 1] = fmaf(w.qh[i * K + kc + e], kj[e], d[2 * q + 1]);
        }
      }
      warp_sum(d);
      if (lane < 4 && i0 + lane < len) {
        const int i = i0 + lane;
        float dk = d[0], dq = d[1];  // the lane's own position, selected without dynamic indexing
        RSSM_UNROLL
        for (int q = 1; q < 4; ++q)
          if (lane == q) dk = d[2 * q], dq = d[2 * q + 1];
        const float decay = KDA ? 1.0f : expf(w.G[i] + dj);
        hs.A[j * hs.TP + i] = decay * dk;
        hs.S[j * hs.TP + i] = decay * dq;
      }
    }
  }
  __syncthreads();

  // e^{H} into what S0 is projected on.
  if constexpr (KDA) {
    for (int idx = threadIdx.x; idx < len * K; idx += blockDim.x) {
      const float decay = expf(hs.g[L * K + idx % K]);
      w.kh[idx] = w.kh[idx] * decay;
      w.qh[idx] = w.qh[idx] * decay;
    }
  } else {
    for (int i = threadIdx.x; i < len; i += blockDim.x) eG[i] = expf(w.G[i] + hs.g[L]);
  }
  __syncthreads();
}

// The history's terms of one state row (row `local` of the block) added to its projections after
// the passes: slot 2 i becomes e^{G_i} (S0 k_i) + sum_j A_ji u_j[row] = S_h k_i decayed, slot 2 i + 1
// the same over q_i (GDN's e^{G_i} taken in here, so the solve runs with eg = 1, as KDA's).
// Positions in chunks of 4, a record at a time (its u_j read once per chunk). Accumulators start
// at -0, the identity of addition: with no history the slots are e^{G_i} times the projections,
// bit for bit, and the solve is staged V's.
template <bool KDA>
__device__ __forceinline__ void buffered_row_history(const HistorySmem &hs, const StagedTiles &t, int len, int RB,
                                                     int local, int h) {
  RSSM_NO_UNROLL
  for (int i0 = 0; i0 < len; i0 += 4) {
    float hk[4] = {-0.0f, -0.0f, -0.0f, -0.0f}, hq[4] = {-0.0f, -0.0f, -0.0f, -0.0f};
    RSSM_NO_UNROLL
    for (int j = 0; j < h; ++j) {
      const float uj = hs.u[j * RB + local];
      float a[4], s[4];  // positions past the window: computed, not stored
      load_f32(hs.A + j * hs.TP + i0, a);
      load_f32(hs.S + j * hs.TP + i0, s);
      RSSM_UNROLL
      for (int q = 0; q < 4; ++q) {
        hk[q] = fmaf(a[q], uj, hk[q]);
        hq[q] = fmaf(s[q], uj, hq[q]);
      }
    }
    RSSM_UNROLL
    for (int q = 0; q < 4; ++q) {
      const int i = i0 + q;
      if (i >= len) break;
      const float eg = KDA ? 1.0f : t.eG[i];
      float *dk = t.proj + (2 * i) * t.pitch + local, *dq = dk + t.pitch;
      *dk = eg * *dk + hk[q];
      *dq = eg * *dq + hq[q];
    }
  }
}

// Staged V's kernel with the history's terms. Min-blocks hint as staged V's, except at EPL 3,
// whose f32 GDN instantiation spills at 5 blocks' 96 registers: 4 blocks, as at EPL 4
// (tests/resources.rs).
template <int EPL, class Act, bool KDA>
__global__ void __launch_bounds__(RowTiling::kThreads, EPL >= 8 ? 1 : EPL >= 3 ? 4 : 5)
    verify_buffered_kernel(const rssm_verify_buffered_params vb) {
  const rssm_verify_params &p = vb.verify;
  constexpr int K = kWarpSize * EPL;
  using SL = StreamLanes<EPL>;
  static_assert(RSSM_MAX_VERIFY_WINDOW <= 32, "ancestor sets are 32-bit masks");
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const StreamBlock at(p.base);
  const int hv = at.hv, RB = at.RB, rb0 = at.rb0, rows = at.rows, T = p.max_seqlen, L = p.ring.window;

  VerifyRequest rq;
  if (!staged_request<Act>(p, at, rq)) return;
  RSSM_DYNAMIC_SMEM(float, smem);
  const WindowSmem w = window_smem(smem, T, K, KDA);
  const StagedTiles tiles(smem, T, K, KDA, RB);
  const HistorySmem hs(smem, tiles.end(T) - smem, T, L, K, KDA);

  // The first two passes' checkpoint rows, in flight while the window and the history are staged.
  const int slot = rq.live ? rq.slot : 0;
  const int64_t layer_slot = int64_t(p.base.layer) * p.base.num_slots + slot;
  const float *head_state = checkpoint_head<K>(p.base, slot, hv);
  float s[SL::kRows][SL::G][SL::E], s1[SL::kRows][SL::G][SL::E];
  load_stream_rows<EPL>(head_state, rb0, 0, rows, rq.live, warp, lane, s);
  load_stream_rows<EPL>(head_state, rb0, 1, rows, rq.live, warp, lane, s1);

  const int h = buffered_history(vb, rq, at.reporter);
  if (h < 0) {  // null, untrusted slot or cursor: zero outputs, nothing else
    verify_zero_outputs<Act>(p, rq, hv, rb0, rb0 + rows);
    return;
  }
  verify_tree_ok(p, rq, w, at.reporter);  // a chain (no parent: can_implement): the mask, always ok
  build_window<EPL, Act, KDA>(p, rq, w, hv, layer_slot, h);
  stage_window_tile<EPL, Act, KDA>(p, rq, w, tiles.eG, tiles.v_s, hv, rb0, rows, RB, h);
  buffered_history_terms<EPL, Act, KDA>(vb, rq, w, hs, tiles.eG, h, hv, layer_slot, rb0, rows, RB);

  stream_projections<EPL>(head_state, rb0, rows, rq.len, w, tiles.proj, tiles.pitch, s, s1);
  __syncthreads();
  float *ru = vb.ring_u + ((layer_slot * p.base.HV + hv) * int64_t(L) + h) * p.base.V + rb0;
  // Two row loops (a thread keeps its rows in both): the history's pass, then the solve with
  // eg = 1 (GDN's decays went into the projections). The model tells them apart by this order.
  for (int local = threadIdx.x; local < rows; local += blockDim.x)
    buffered_row_history<KDA>(hs, tiles, rq.len, RB, local, h);
  for (int local = threadIdx.x; local < rows; local += blockDim.x)
    staged_row_solve<true>(w, tiles.eG, tiles.proj, tiles.pitch, tiles.v_s, T, rq.len, RB, local, ru + local, p.base.V);
  __syncthreads();
  store_output_tile<Act>(p, rq, tiles.proj, hv, rb0, rows, tiles.pitch);
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
