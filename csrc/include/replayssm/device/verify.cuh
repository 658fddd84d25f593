// Kernel V: chunked verify from the read-only checkpoint (design §4 V), for a linear draft chain
// (strictly-lower causal window mask) or, given per-position parents, a draft tree ("VT": the
// strict-ancestor mask, decays summed along each node's root path).
//
// One block per (row tile, value head, request). Phase 0 builds each position's ancestor set
// (a bit mask; a chain is the tree whose parent of i is i-1, so both run the same code and a
// chain given as parents produces the same bits); phase 1 normalises every window position's
// key and query and computes its gate into shared memory (and writes the raw ring record);
// phase 2 sums the log decays along root paths, G_i = G_parent(i) + g_i; phase 3 forms
//   A[i][j]  = beta_i e^{G_i - G_j} (k_i . k_j)   for j a strict ancestor of i, and
//   Sc[i][j] = e^{G_i - G_j} (q_i . k_j)          for j = i or a strict ancestor of i;
// phase 4, per warp and state row, reads the checkpoint once, solves (I + A) U = R by forward
// substitution (parents precede children, so it stays a forward sweep) and forms the outputs.
// The checkpoint is never written.
#pragma once

#include "replayssm/device/delta_rule.cuh"
#include "replayssm/device/tiling.cuh"
#include "replayssm/replayssm.h"
#include "replayssm/smem.h"

namespace rssm {


// Phase 0 (one thread): parent and strict-ancestor mask of every window position. parent == NULL
// is the linear chain. False when a parent is outside -1..i-1 (not topologically ordered).
__device__ __forceinline__ bool build_tree(const int32_t *parent, int bos, int len, int *par, uint32_t *anc) {
  for (int i = 0; i < len; ++i) {
    const int pi = parent ? parent[bos + i] : i - 1;
    if (pi < -1 || pi >= i) return false;
    par[i] = pi;
    anc[i] = pi < 0 ? 0u : anc[pi] | (1u << pi);
  }
  return true;
}

// Request `req` of a verify launch after its device-side checks (every exit they cause is
// uniform over the block).
struct VerifyRequest {
  int bos, len, slot;
  bool live;  // a trusted slot shared with no other request: outputs and ring records are computed
};

// False when the request's window itself cannot be trusted (flagged; the block does nothing).
// Every lane of every warp calls it (the duplicate scan is a warp collective).
__device__ __forceinline__ bool verify_request(const rssm_verify_params &p, int req, bool reporter, VerifyRequest &r) {
  const int bos = p.cu_seqlens[req], eos = p.cu_seqlens[req + 1], slot = p.base.slots[req];
  if (bos < 0 || eos < bos || eos > p.num_tokens || eos - bos > p.max_seqlen || p.max_seqlen > RSSM_MAX_VERIFY_WINDOW ||
      seqlens_uncovered(p.cu_seqlens, p.base.batch, p.num_tokens, req)) {
    if (reporter) report_device_error(p.base.error_word, RSSM_DEVERR_BAD_SEQLENS);
    return false;
  }
  const bool bad_slot = slot < -1 || slot >= p.base.num_slots;
  if (bad_slot && reporter) report_device_error(p.base.error_word, RSSM_DEVERR_SLOT_OUT_OF_RANGE);
  // A live slot shared with another request: both are skipped (their ring writes would race).
  const bool dup = slot >= 0 && !bad_slot && warp_find_other(p.base.slots, p.base.batch, req, slot);
  if (dup && reporter) report_device_error(p.base.error_word, RSSM_DEVERR_DUPLICATE_SLOT);
  r = VerifyRequest{bos, eos - bos, slot, slot >= 0 && !bad_slot && !dup};
  return true;
}

// A DEFAULT block's place in the grid (16-row tile, value head, request), this warp's first row
// and the tile's rows begin..end of the head (VF and VB; every block of a request builds the
// window, block 0 of the head reports and writes the ring's k, g and beta).
struct RowTileBlock {
  int hv, req, tile, row0, begin, end;
  bool reporter;
  __device__ __forceinline__ explicit RowTileBlock(const rssm_base_params &b)
      : hv(blockIdx.y), req(blockIdx.z), tile(blockIdx.x) {
    const int warp = threadIdx.x / kWarpSize;
    row0 = (tile * RowTiling::kWarps + warp) * RowTiling::kRows;
    begin = tile * RowTiling::kRowsPerBlock;
    end = begin + RowTiling::kRowsPerBlock < b.V ? begin + RowTiling::kRowsPerBlock : b.V;
    reporter = tile == 0 && threadIdx.x == 0;
  }
};

// The window's shared arrays (verify_smem_floats words from `smem`).
struct WindowSmem {
  float *kh;      // [T][K] normalised keys (STAGED: then scaled by their decays, KDA)
  float *qh;      // [T][K] normalised, scaled queries (likewise)
  float *G;       // [T][GW] log decays, then their sums along root paths
  float *beta;    // [T]
  float *A;       // [T][T] strict ancestors only
  float *Sc;      // [T][T] ancestors and the diagonal
  int *par;       // [T] parent position, -1 = checkpoint
  uint32_t *anc;  // [T] bit j: j is a strict ancestor
  int *tree_ok;
};

// The forward substitution at window position i for one state row, from the row's projections
// dk = S k_i and dq = S q_i (decays folded in) and its v: u_i = beta_i (v - eg dk) - sum over i's
// strict ancestors j of A_ij u_j, into u(i), and the output eg dq + sum over i and its ancestors of
// Sc_ij u_j, returned. `u(j)` is the row's u_j in the caller's registers (a callable: DEFAULT keeps
// them [position][row], the staged forms per row). Every implementation of V and VF solves
// through it, in this order.
// anc_i is w.anc[i], read once by the caller (DEFAULT's output stores between its rows might
// alias the window, so a read here was repeated per row).
template <class U>
__device__ __forceinline__ float window_solve(const WindowSmem &w, int T, int i, uint32_t anc_i, float eg, float v,
                                             float dk, float dq, U &&u) {
  constexpr int TMAX = RSSM_MAX_VERIFY_WINDOW;
  float acc = w.beta[i] * (v - eg * dk);
  RSSM_UNROLL
  for (int j = 0; j < TMAX; ++j)
    if (j < i && ((anc_i >> j) & 1u)) acc = fmaf(-w.A[i * T + j], u(j), acc);
  u(i) = acc;
  float out = eg * dq;
  RSSM_UNROLL
  for (int j = 0; j < TMAX; ++j)
    if (j == i || (j < i && ((anc_i >> j) & 1u))) out = fmaf(w.Sc[i * T + j], u(j), out);
  return out;
}

__device__ __forceinline__ WindowSmem window_smem(float *smem, int T, int K, bool kda) {
  WindowSmem w;
  w.kh = smem;
  w.qh = w.kh + T * K;
  w.G = w.qh + T * K;
  w.beta = w.G + T * (kda ? K : 1);
  w.A = w.beta + T;
  w.Sc = w.A + T * T;
  w.par = reinterpret_cast<int *>(w.Sc + T * T);
  w.anc = reinterpret_cast<uint32_t *>(w.par + T);
  w.tree_ok = reinterpret_cast<int *>(w.anc + T);
  return w;
}

// Phase 0 for a live request: the tree, once per block. False (flagged) for a bad tree. Whole block.
__device__ __forceinline__ bool verify_tree_ok(const rssm_verify_params &p, const VerifyRequest &r, const WindowSmem &w,
                                               bool reporter) {
  if (threadIdx.x == 0) *w.tree_ok = build_tree(p.parent, r.bos, r.len, w.par, w.anc);
  __syncthreads();
  const bool ok = *w.tree_ok != 0;
  if (!ok && reporter) report_device_error(p.base.error_word, RSSM_DEVERR_BAD_TREE);
  return ok;
}

// Phases 1-3 of a live request's window into shared memory (both implementations of V, and VF, run
// this code, so their window matrices are the same bits). Block 0 of the head writes the raw k, g
// and beta ring records at ring positions ring_base + i (VF: the half its window goes to). Whole
// block (4 warps); ends with a barrier.
template <int EPL, class Act, bool KDA>
__device__ __forceinline__ void build_window(const rssm_verify_params &p, const VerifyRequest &r, const WindowSmem &w,
                                             int hv, int64_t layer_slot, int ring_base = 0) {
  constexpr int K = kWarpSize * EPL;
  constexpr int GW = KDA ? K : 1;
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int group = p.base.HV / p.base.H, h = hv / group;
  const int kc = lane * EPL;
  const int T = p.max_seqlen;
  const bool ring = p.ring.v != nullptr;
  const Act *q = static_cast<const Act *>(p.tokens.q);
  const Act *k = static_cast<const Act *>(p.tokens.k);
  const GateSource gate = GateSource::of(p.tokens, p.base.HV);

  // Phase 1: per position (one warp each, round robin).
  for (int i = warp; i < r.len; i += RowTiling::kWarps) {
    const int64_t tok = r.bos + i;
    const Act *k_in = k + tok * p.tokens.k_stride + int64_t(h) * K + kc;
    float kv[EPL], qv[EPL];
    load_key(k_in, p.base.qk_l2norm != 0, kv);
    load_key(q + tok * p.tokens.q_stride + int64_t(h) * K + kc, p.base.qk_l2norm != 0, qv);
    float g[GW == 1 ? 1 : EPL], b;
    token_gate<EPL, Act, KDA>(gate, tok, hv, kc, g, b);
    RSSM_UNROLL
    for (int j = 0; j < EPL; ++j) {
      w.kh[i * K + kc + j] = kv[j];
      w.qh[i * K + kc + j] = qv[j] * p.tokens.scale;
    }
    if constexpr (KDA) {
      RSSM_UNROLL
      for (int j = 0; j < EPL; ++j) w.G[i * K + kc + j] = g[j];
    } else if (lane == 0) {
      w.G[i] = g[0];
    }
    if (lane == 0) w.beta[i] = b;
    // Raw ring record of position i (k once per key head, gate once per value head).
    if (ring && ring_base + i < p.ring.window && blockIdx.x == 0) {
      const int64_t gate_at = (layer_slot * p.base.HV + hv) * p.ring.window + ring_base + i;
      if constexpr (KDA) {
        RSSM_UNROLL
        for (int j = 0; j < EPL; ++j) p.ring.g[gate_at * K + kc + j] = g[j];
      } else if (lane == 0) {
        p.ring.g[gate_at] = g[0];
      }
      if (lane == 0) p.ring.beta[gate_at] = b;
      if (hv % group == 0) {
        Act *rk = static_cast<Act *>(p.ring.k) + ((layer_slot * p.base.H + h) * p.ring.window + ring_base + i) * K + kc;
        Act raw[EPL];  // loaded before any store: rk may alias k_in as far as the compiler knows
        RSSM_UNROLL
        for (int j = 0; j < EPL; ++j) raw[j] = k_in[j];
        RSSM_UNROLL
        for (int j = 0; j < EPL; ++j) rk[j] = raw[j];
      }
    }
  }
  __syncthreads();

  // Phase 2: G_i = G_parent(i) + g_i (a chain: the prefix sum), per channel for KDA.
  for (int c = threadIdx.x; c < GW; c += blockDim.x)
    for (int i = 1; i < r.len; ++i)
      if (w.par[i] >= 0) w.G[i * GW + c] = w.G[w.par[i] * GW + c] + w.G[i * GW + c];
  __syncthreads();

  // Phase 3: the window matrices, one (i, j) pair per warp, round robin.
  for (int i = 0, pair = 0; i < r.len; ++i) {
    for (int j = 0; j <= i; ++j, ++pair) {
      if (pair % RowTiling::kWarps != warp) continue;
      if (j < i && !((w.anc[i] >> j) & 1u)) {  // not on i's root path: outside the mask
        if (lane == 0) w.A[i * T + j] = w.Sc[i * T + j] = 0.0f;
        continue;
      }
      float d[2] = {0.0f, 0.0f};  // k_i . k_j and q_i . k_j, decayed per channel for KDA
      RSSM_UNROLL
      for (int e = 0; e < EPL; ++e) {
        const int c = kc + e;
        float kj = w.kh[j * K + c];
        if constexpr (KDA) kj = kj * expf(w.G[i * K + c] - w.G[j * K + c]);
        d[0] = fmaf(w.kh[i * K + c], kj, d[0]);
        d[1] = fmaf(w.qh[i * K + c], kj, d[1]);
      }
      warp_sum(d);
      if (lane == 0) {
        const float decay = KDA ? 1.0f : expf(w.G[i] - w.G[j]);
        w.A[i * T + j] = j < i ? w.beta[i] * (decay * d[0]) : 0.0f;
        w.Sc[i * T + j] = decay * d[1];
      }
    }
  }
  __syncthreads();
}

// Zero outputs for rows row_begin..row_end of a request whose slot is null, untrusted or whose
// tree is bad (nothing else is written). Whole block.
template <class Act>
__device__ __forceinline__ void verify_zero_outputs(const rssm_verify_params &p, const VerifyRequest &r, int hv,
                                                    int row_begin, int row_end) {
  Act *o = static_cast<Act *>(p.tokens.o);
  const int rows = row_end - row_begin;
  for (int idx = threadIdx.x; idx < r.len * rows; idx += blockDim.x) {
    const int i = idx / rows, row = row_begin + idx % rows;
    o[int64_t(r.bos + i) * p.tokens.o_stride + int64_t(hv) * p.base.V + row] = from_float<Act>(0.0f);
  }
}

// A request verify_request refused: when cu_seqlens leaves tokens uncovered, zero_uncovered_tokens
// for rows row_begin..row_end of value head hv. Whole block.
template <class Act>
__device__ __forceinline__ void verify_skipped_request(const rssm_verify_params &p, int req, int hv, int row_begin,
                                                       int row_end) {
  if (seqlens_uncovered(p.cu_seqlens, p.base.batch, p.num_tokens, req))
    zero_uncovered_tokens<Act>(p.cu_seqlens, p.base.batch, p.num_tokens, req, p.tokens.o, p.tokens.o_stride,
                               int64_t(hv) * p.base.V + row_begin, row_end - row_begin, threadIdx.x, blockDim.x);
}

// Phase 4 of DEFAULT (and of VF), per warp: the outputs of the window from this warp's state rows
// `s` (rows row0..row0+3 of value head hv, this lane's EPL channels), by forward substitution,
// and the raw v ring records at ring positions ring_base + i. Whole warp.
template <int EPL, class Act, bool KDA>
__device__ __forceinline__ void verify_rows(const rssm_verify_params &p, const VerifyRequest &rq, const WindowSmem &w,
                                            int hv, int64_t layer_slot, int ring_base, int row0,
                                            const float (&s)[RowTiling::kRows][EPL]) {
  constexpr int K = kWarpSize * EPL;
  constexpr int ROWS = RowTiling::kRows;
  constexpr int TMAX = RSSM_MAX_VERIFY_WINDOW;
  constexpr int GW = KDA ? K : 1;
  const int lane = threadIdx.x % kWarpSize;
  const int kc = lane * EPL;
  const int T = p.max_seqlen;
  const int bos = rq.bos, len = rq.len;
  const bool ring = p.ring.v != nullptr;
  Act *o = static_cast<Act *>(p.tokens.o);
  bool row_ok[ROWS];
  RSSM_UNROLL
  for (int r = 0; r < ROWS; ++r) row_ok[r] = row0 + r < p.base.V;
  const Act *v = static_cast<const Act *>(p.tokens.v);
  Act *ring_v = ring && len > 0 ? static_cast<Act *>(p.ring.v) +
                                      ((layer_slot * p.base.HV + hv) * int64_t(p.ring.window) + ring_base) * p.base.V + row0
                                : nullptr;
  float u[TMAX][ROWS];
  RSSM_UNROLL
  for (int i = 0; i < TMAX; ++i) {
    if (i >= len) break;
    const int64_t tok = bos + i;
    float kd[EPL], qd[EPL];
    RSSM_UNROLL
    for (int e = 0; e < EPL; ++e) {
      const float decay = KDA ? expf(w.G[i * GW + kc + e]) : 1.0f;
      kd[e] = w.kh[i * K + kc + e] * decay;
      qd[e] = w.qh[i * K + kc + e] * decay;
    }
    float dk[ROWS], dq[ROWS];
    RSSM_UNROLL
    for (int r = 0; r < ROWS; ++r) {
      dk[r] = 0.0f;
      dq[r] = 0.0f;
      RSSM_UNROLL
      for (int e = 0; e < EPL; ++e) {
        dk[r] = fmaf(s[r][e], kd[e], dk[r]);
        dq[r] = fmaf(s[r][e], qd[e], dq[r]);
      }
    }
    warp_sum(dk);
    warp_sum(dq);
    const float eG = KDA ? 1.0f : expf(w.G[i]);
    const uint32_t anc_i = w.anc[i];  // a chain: every j < i
    RSSM_UNROLL
    for (int r = 0; r < ROWS; ++r) {
      const Act v_raw = row_ok[r] ? v[tok * p.tokens.v_stride + int64_t(hv) * p.base.V + row0 + r] : from_float<Act>(0.0f);
      const float out = window_solve(w, T, i, anc_i, eG, to_float(v_raw), dk[r], dq[r], [&](int j) -> float & { return u[j][r]; });
      if (lane == r && row_ok[r]) {
        o[tok * p.tokens.o_stride + int64_t(hv) * p.base.V + row0 + r] = from_float<Act>(out);
        if (ring_v && ring_base + i < p.ring.window) ring_v[int64_t(i) * p.base.V + r] = v_raw;
      }
    }
  }
}

// RSSM_IMPL_DEFAULT: one block per (16-row tile, value head, request); every block builds the
// window, then each warp reads its 4 checkpoint rows and solves with whole-warp reductions.
template <int EPL, class Act, bool KDA>
__global__ void __launch_bounds__(RowTiling::kThreads) verify_kernel(const rssm_verify_params p) {
  constexpr int K = kWarpSize * EPL;
  constexpr int ROWS = RowTiling::kRows;
  static_assert(RSSM_MAX_VERIFY_WINDOW <= 32, "ancestor sets are 32-bit masks");
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int hv = blockIdx.y, req = blockIdx.z;
  const int row0 = (blockIdx.x * RowTiling::kWarps + warp) * ROWS;
  const int kc = lane * EPL;
  const int T = p.max_seqlen;
  const bool reporter = blockIdx.x == 0 && threadIdx.x == 0;

  const int begin = blockIdx.x * RowTiling::kRowsPerBlock;
  const int end = begin + RowTiling::kRowsPerBlock < p.base.V ? begin + RowTiling::kRowsPerBlock : p.base.V;
  VerifyRequest rq;
  if (!verify_request(p, req, reporter, rq)) {
    verify_skipped_request<Act>(p, req, hv, begin, end);
    return;
  }
  RSSM_DYNAMIC_SMEM(float, smem);
  const WindowSmem w = window_smem(smem, T, K, KDA);
  const bool tree_ok = rq.live && verify_tree_ok(p, rq, w, reporter);
  if (!tree_ok) {  // null, untrusted slot or bad tree: zero outputs, no ring writes
    verify_zero_outputs<Act>(p, rq, hv, begin, end);
    return;
  }
  const int64_t layer_slot = int64_t(p.base.layer) * p.base.num_slots + rq.slot;
  build_window<EPL, Act, KDA>(p, rq, w, hv, layer_slot);

  // Phase 4: per warp, its rows of the checkpoint (read only) and the forward substitution.
  if (row0 >= p.base.V) return;
  bool row_ok[ROWS];
  RSSM_UNROLL
  for (int r = 0; r < ROWS; ++r) row_ok[r] = row0 + r < p.base.V;
  float s[ROWS][EPL];
  const int64_t head = int64_t(p.base.V) * K;
  load_rows(p.base.state + state_offset(p.base.state_slot_stride, p.base.state_layer_stride, p.base.layer, rq.slot, p.base.num_slots, p.base.HV * head) +
                hv * head + int64_t(row0) * K + kc,
            K, row_ok, s);
  verify_rows<EPL, Act, KDA>(p, rq, w, hv, layer_slot, 0, row0, s);
}

}  // namespace rssm
