// Kernel V, RSSM_IMPL_STAGED: the chunked verify of verify.cuh (same window code, same contract,
// checked by the same tolerance) laid out for bandwidth.
//
// One block per (row block of `block_rows` rows, value head, request). The block builds the
// window once (build_window) instead of once per 16 rows, folds the decays into the staged keys
// and queries, stages the block's v tile in shared memory (and writes its ring_v records), and
// then streams its checkpoint rows in passes of 16 rows: the first pass's rows are loaded before
// the window is built, each later pass's while the previous one computes. Within a pass a state
// row belongs to 8 lanes (4 rows per warp), each lane holding 4 * EPL channels as float4 chunks
// strided by 32 channels (coalesced global loads, conflict-free shared reads), so a position's two
// dot products per row need a 3-level butterfly instead of DEFAULT's 5 levels over 4 rows.
// Outputs are staged in shared memory and stored as 16-byte vectors where aligned.
#pragma once

#include "replayssm/device/verify.cuh"

namespace rssm {

// Where a staged block (V, VF) works: rows rb0 .. rb0 + rows of value head hv of request req, in
// passes of 16 (4 warps of 4 row groups of 8 lanes); `my` is this lane group's row in a pass.
struct StagedBlock {
  static constexpr int kLanesPerRow = 8;
  static constexpr int kRowsPerPass = kWarpSize / kLanesPerRow * RowTiling::kWarps;  // 16
  int l8, my, hv, req, RB, rb0, rows, passes;
  __device__ __forceinline__ explicit StagedBlock(const rssm_base_params &b) {
    const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
    l8 = lane % kLanesPerRow;
    my = warp * (kWarpSize / kLanesPerRow) + lane / kLanesPerRow;
    hv = blockIdx.y;
    req = blockIdx.z;
    RB = verify_staged_block_rows(b.block_rows, b.V);
    rb0 = blockIdx.x * RB;
    rows = RB < b.V - rb0 ? RB : b.V - rb0;  // > 0: the grid has ceil(V / RB) row blocks
    passes = (rows + kRowsPerPass - 1) / kRowsPerPass;
  }
};

// One state row in the 8-lane layout: lane l8 holds G groups of E consecutive channels, group g
// at channels E * (l8 + 8 g) (staged V: G = EPL groups of 4; staged VF: 4 groups of EPL, the
// channels lanes l8, l8 + 8, l8 + 16, l8 + 24 hold in F's warp layout). Coalesced either way.
template <int G, int E>
__device__ __forceinline__ void load_staged_row(const float *row, bool ok, int l8, float (&s)[G][E]) {
  RSSM_UNROLL
  for (int g = 0; g < G; ++g) {
    if (ok) {
      load_f32(row + E * (l8 + 8 * g), s[g]);
    } else {
      RSSM_UNROLL
      for (int c = 0; c < E; ++c) s[g][c] = 0.0f;
    }
  }
}

template <int G, int E>
__device__ __forceinline__ void store_staged_row(float *row, int l8, const float (&s)[G][E]) {
  RSSM_UNROLL
  for (int g = 0; g < G; ++g) store_f32(row + E * (l8 + 8 * g), s[g]);
}

// The window's outputs of one state row held in the 8-lane layout (staged V and staged VF): per
// position i, the row's projections on the decayed k_i and q_i, the forward substitution for
// u_i and the output, stored in o_s[i][local] by lane 0 of the row's group. Every lane of the
// warp calls it (3-level butterflies). `u` is the caller's scratch (kept out of the pass loop).
template <int G, int E, bool KDA>
__device__ __forceinline__ void staged_row_outputs(const float (&s)[G][E], const WindowSmem &w, const float *eG,
                                                   const float *v_s, float *o_s, int T, int len, int RB, int local,
                                                   bool ok, int l8, float (&u)[RSSM_MAX_VERIFY_WINDOW]) {
  constexpr int TMAX = RSSM_MAX_VERIFY_WINDOW;
  constexpr int LPR = 8;
  constexpr int K = LPR * G * E;
  static_assert(TMAX <= 32, "ancestor sets are 32-bit masks");
  RSSM_UNROLL
  for (int i = 0; i < TMAX; ++i) {
    if (i >= len) break;
    float d[2] = {0.0f, 0.0f};  // S k_i and S q_i of this row (decays folded in)
    RSSM_UNROLL
    for (int g = 0; g < G; ++g) {
      const int c0 = E * (l8 + LPR * g);
      float kq[E], qq[E];
      load_f32(w.kh + i * K + c0, kq);
      load_f32(w.qh + i * K + c0, qq);
      RSSM_UNROLL
      for (int c = 0; c < E; ++c) {
        d[0] = fmaf(s[g][c], kq[c], d[0]);
        d[1] = fmaf(s[g][c], qq[c], d[1]);
      }
    }
    RSSM_UNROLL
    for (int off = LPR / 2; off > 0; off >>= 1) {
      d[0] += __shfl_xor_sync(kFullMask, d[0], off);
      d[1] += __shfl_xor_sync(kFullMask, d[1], off);
    }
    const float eg = KDA ? 1.0f : eG[i];
    const uint32_t anc_i = w.anc[i];  // a chain: every j < i
    const float vi = ok ? v_s[i * RB + local] : 0.0f;
    float acc = w.beta[i] * (vi - eg * d[0]);
    RSSM_UNROLL
    for (int j = 0; j < TMAX; ++j)
      if (j < i && ((anc_i >> j) & 1u)) acc = fmaf(-w.A[i * T + j], u[j], acc);
    u[i] = acc;
    float out = eg * d[1];
    RSSM_UNROLL
    for (int j = 0; j < TMAX; ++j)
      if (j == i || (j < i && ((anc_i >> j) & 1u))) out = fmaf(w.Sc[i * T + j], u[j], out);
    if (l8 == 0 && ok) o_s[i * RB + local] = out;
  }
}

// Once per block, after build_window: the decays folded into the staged keys and queries (KDA)
// or exp of the decay sums into eG (GDN); the block's v tile staged in v_s [T][RB] and, with a
// ring, its raw values written at ring positions ring_base + i. Whole block; ends with a barrier.
template <int EPL, class Act, bool KDA>
__device__ __forceinline__ void stage_window_tile(const rssm_verify_params &p, const VerifyRequest &rq,
                                                  const WindowSmem &w, float *eG, float *v_s, int hv, int rb0,
                                                  int rows, int RB, int ring_base) {
  constexpr int K = kWarpSize * EPL;
  const int bos = rq.bos, len = rq.len;
  if constexpr (KDA) {
    for (int idx = threadIdx.x; idx < len * K; idx += blockDim.x) {
      const float decay = expf(w.G[idx]);
      w.kh[idx] = w.kh[idx] * decay;
      w.qh[idx] = w.qh[idx] * decay;
    }
  } else {
    for (int i = threadIdx.x; i < len; i += blockDim.x) eG[i] = expf(w.G[i]);
  }
  const Act *v = static_cast<const Act *>(p.tokens.v) + int64_t(hv) * p.base.V + rb0;
  const int64_t layer_slot = int64_t(p.base.layer) * p.base.num_slots + rq.slot;  // (a live request's)
  Act *ring_v = p.ring.v ? static_cast<Act *>(p.ring.v) +
                               (layer_slot * p.base.HV + hv) * int64_t(p.ring.window) * p.base.V + rb0
                         : nullptr;
  for (int idx = threadIdx.x; idx < len * rows; idx += blockDim.x) {
    const int i = idx / rows, r = idx % rows;
    const Act x = v[int64_t(bos + i) * p.tokens.v_stride + r];
    v_s[i * RB + r] = to_float(x);
    if (ring_v && ring_base + i < p.ring.window) ring_v[int64_t(ring_base + i) * p.base.V + r] = x;
  }
  __syncthreads();
}

// The output tile o_s [len][RB] of rows rb0.. of value head hv, 16 bytes per store where the row
// allows it. Whole block.
template <class Act>
__device__ __forceinline__ void store_output_tile(const rssm_verify_params &p, const VerifyRequest &rq,
                                                  const float *o_s, int hv, int rb0, int rows, int RB) {
  constexpr int VEC = 16 / int(sizeof(Act));
  Act *o = static_cast<Act *>(p.tokens.o) + int64_t(hv) * p.base.V + rb0;
  const int chunks = (rows + VEC - 1) / VEC;
  for (int idx = threadIdx.x; idx < rq.len * chunks; idx += blockDim.x) {
    const int i = idx / chunks, r0 = (idx % chunks) * VEC;
    Act *dst = o + int64_t(rq.bos + i) * p.tokens.o_stride + r0;
    const float *src = o_s + i * RB + r0;
    if (r0 + VEC <= rows && (reinterpret_cast<uintptr_t>(dst) % 16) == 0) {
      store_act16(dst, src);
    } else {
      for (int r = 0; r < VEC && r0 + r < rows; ++r) dst[r] = from_float<Act>(src[r]);
    }
  }
}

// (Min-blocks hint: 4 blocks per SM at K = 128 (at most 128 registers: at the 96 that 5 blocks
// allow, ptxas spilled 8 bytes of a row pointer in the prologue, for GDN or KDA depending on
// unrelated code shape; the model ranks it MIO-bound either way), 5 at K = 32 and 64 (which lifts
// the heuristic cap that spilled 8 bytes at K = 64, KDA), 1 at K = 256, whose two state buffers
// need ~128. tests/resources.rs guards it.)
template <int EPL, class Act, bool KDA>
__global__ void __launch_bounds__(RowTiling::kThreads, EPL >= 8 ? 1 : EPL == 4 ? 4 : 5) verify_staged_kernel(const rssm_verify_params p) {
  constexpr int K = kWarpSize * EPL;
  constexpr int RPP = StagedBlock::kRowsPerPass;
  constexpr int CH = K / (4 * StagedBlock::kLanesPerRow);  // float4 chunks per lane and row (= EPL)
  const StagedBlock sb(p.base);
  const int l8 = sb.l8, my = sb.my, hv = sb.hv, req = sb.req, RB = sb.RB, rb0 = sb.rb0, rows = sb.rows;
  const int passes = sb.passes, T = p.max_seqlen;
  const bool reporter = blockIdx.x == 0 && threadIdx.x == 0;

  VerifyRequest rq;
  if (!verify_request(p, req, reporter, rq)) {
    verify_skipped_request<Act>(p, req, hv, rb0, rb0 + rows);
    return;
  }
  RSSM_DYNAMIC_SMEM(float, smem);
  const WindowSmem w = window_smem(smem, T, K, KDA);
  float *eG = smem + verify_smem_floats(T, K, KDA);  // [T]
  float *v_s = eG + T;                               // [T][RB]
  float *o_s = v_s + T * RB;                         // [T][RB]

  // The first pass's checkpoint rows, in flight while the window is built.
  const int64_t layer_slot = int64_t(p.base.layer) * p.base.num_slots + (rq.live ? rq.slot : 0);
  const int64_t head = int64_t(p.base.V) * K;
  const float *head_state = p.base.state +
                            state_offset(p.base.state_slot_stride, p.base.state_layer_stride, p.base.layer, rq.live ? rq.slot : 0,
                                         p.base.num_slots, p.base.HV * head) +
                            hv * head;
  float s[CH][4];
  load_staged_row(head_state + int64_t(rb0 + my) * K, rq.live && my < rows, l8, s);

  const bool tree_ok = rq.live && verify_tree_ok(p, rq, w, reporter);
  if (!tree_ok) {  // null, untrusted slot or bad tree: zero outputs, no ring writes
    verify_zero_outputs<Act>(p, rq, hv, rb0, rb0 + rows);
    return;
  }
  build_window<EPL, Act, KDA>(p, rq, w, hv, layer_slot);

  stage_window_tile<EPL, Act, KDA>(p, rq, w, eG, v_s, hv, rb0, rows, RB, 0);

  float u[RSSM_MAX_VERIFY_WINDOW];
  for (int pass = 0; pass < passes; ++pass) {
    const int local = pass * RPP + my;
    const bool ok = local < rows;
    float next[CH][4];
    const bool more = pass + 1 < passes;
    if (more) load_staged_row(head_state + int64_t(rb0 + local + RPP) * K, local + RPP < rows, l8, next);
    staged_row_outputs<CH, 4, KDA>(s, w, eG, v_s, o_s, T, rq.len, RB, local, ok, l8, u);
    if (more) {
      RSSM_UNROLL
      for (int m = 0; m < CH; ++m)
        RSSM_UNROLL
        for (int c = 0; c < 4; ++c) s[m][c] = next[m][c];
    }
  }
  __syncthreads();
  store_output_tile<Act>(p, rq, o_s, hv, rb0, rows, RB);
}

}  // namespace rssm
