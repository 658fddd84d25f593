// Kernel V, RSSM_IMPL_STAGED: the chunked verify of verify.cuh (same window code, same contract,
// checked by the same tolerance) laid out for bandwidth, and the pieces staged VF shares.
//
// One block per (row block of `block_rows` rows, value head, request). The block builds the
// window once (build_window) instead of once per 16 rows, folds the decays into the staged keys
// and queries, stages the block's v tile in shared memory (and writes its ring_v records), and
// then streams its checkpoint rows in passes of 16 rows, two passes ahead of the arithmetic. A
// warp's lanes all hold the same channels of its 4 rows (StreamLanes), so a shared read of a
// position's key or query serves 4 rows, and the projections are reduce-scattered (about one
// shuffle each) into a shared tile; the forward substitution then runs once per row, a thread
// per row. Outputs are staged in shared memory and stored as 16-byte vectors where aligned.
// (Staged VF keeps the 8-lanes-per-row layout of StagedBlock: its rows are F's.)
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
    const float vi = ok ? v_s[i * RB + local] : 0.0f;
    const float out = window_solve(w, T, i, w.anc[i], KDA ? 1.0f : eG[i], vi, d[0], d[1], [&](int j) -> float & { return u[j]; });
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
  // A thread per row; each batch of positions is loaded before any of it is stored (a ring
  // store may alias v as far as the compiler knows, so interleaving would wait one round trip
  // per element).
  constexpr int BATCH = 8;
  for (int r = threadIdx.x; r < rows; r += blockDim.x) {
    for (int i0 = 0; i0 < len; i0 += BATCH) {
      Act x[BATCH];
      RSSM_UNROLL
      for (int b = 0; b < BATCH; ++b)
        x[b] = i0 + b < len ? v[int64_t(bos + i0 + b) * p.tokens.v_stride + r] : from_float<Act>(0.0f);
      RSSM_UNROLL
      for (int b = 0; b < BATCH; ++b) {
        const int i = i0 + b;
        if (i >= len) break;
        v_s[i * RB + r] = to_float(x[b]);
        if (ring_v && ring_base + i < p.ring.window) ring_v[int64_t(ring_base + i) * p.base.V + r] = x[b];
      }
    }
  }
  __syncthreads();
}

// The output tile o_s [len][pitch] of rows rb0.. of value head hv, 16 bytes per store where the
// row allows it. Whole block.
template <class Act>
__device__ __forceinline__ void store_output_tile(const rssm_verify_params &p, const VerifyRequest &rq,
                                                  const float *o_s, int hv, int rb0, int rows, int pitch) {
  constexpr int VEC = 16 / int(sizeof(Act));
  Act *o = static_cast<Act *>(p.tokens.o) + int64_t(hv) * p.base.V + rb0;
  const int chunks = (rows + VEC - 1) / VEC;
  for (int idx = threadIdx.x; idx < rq.len * chunks; idx += blockDim.x) {
    const int i = idx / chunks, r0 = (idx % chunks) * VEC;
    Act *dst = o + int64_t(rq.bos + i) * p.tokens.o_stride + r0;
    const float *src = o_s + i * pitch + r0;
    if (r0 + VEC <= rows && (reinterpret_cast<uintptr_t>(dst) % 16) == 0) {
      store_act16(dst, src);
    } else {
      for (int r = 0; r < VEC && r0 + r < rows; ++r) dst[r] = from_float<Act>(src[r]);
    }
  }
}

// Staged V's streaming layout: per pass a warp owns kRows state rows and every lane holds the
// same channels of all of them, G groups of E consecutive channels, group g at channels
// E * (lane + 32 g) (16-byte coalesced loads; conflict-free 16-byte shared reads). A position's
// decayed key and query, read from shared memory once, then serve kRows rows, and the
// 2 * kChunk * kRows = 32 projections of a chunk of positions are reduce-scattered: each lane
// ends with one of them after 31 shuffles, about one shuffle per projection.
template <int EPL> struct StreamLanes {
  static constexpr int E = EPL < 4 ? EPL : 4;
  static constexpr int G = EPL / E;
  static constexpr int kRows = 4;                                       // per warp and pass
  static constexpr int kChunk = 4;                                      // positions per scatter
  static constexpr int kRowsPerPass = kRows * RowTiling::kWarps;       // 16
  static_assert(2 * kChunk * kRows == kWarpSize, "one projection per lane after the scatter");
};

// The kRows rows a warp owns in `pass` (local rows pass * 16 + warp * kRows + r), zero past `rows`
// or for a request that is not live.
template <int EPL>
__device__ __forceinline__ void load_stream_rows(const float *head_state, int rb0, int pass, int rows, bool live,
                                                 int warp, int lane,
                                                 float (&s)[StreamLanes<EPL>::kRows][StreamLanes<EPL>::G][StreamLanes<EPL>::E]) {
  using L = StreamLanes<EPL>;
  constexpr int K = kWarpSize * EPL;
  RSSM_UNROLL
  for (int r = 0; r < L::kRows; ++r) {
    const int local = pass * L::kRowsPerPass + warp * L::kRows + r;
    const float *row = head_state + int64_t(rb0 + local) * K;
    RSSM_UNROLL
    for (int g = 0; g < L::G; ++g) {
      if (live && local < rows) {
        load_f32(row + L::E * (lane + kWarpSize * g), s[r][g]);
      } else {
        RSSM_UNROLL
        for (int e = 0; e < L::E; ++e) s[r][g][e] = 0.0f;
      }
    }
  }
}

// The forward substitution of one state row (row `local` of the block) from its projections
// proj [2 T][pitch] (slot 2 i: on position i's decayed key, 2 i + 1: on its query): per position
// u_i and the output, written over slot i of its own column (read before: see
// verify_staged_smem_floats). One thread per row, after the passes. With `ru` (VB) the row's u_i
// also go to ru[i * ru_stride].
template <bool KDA>
__device__ __forceinline__ void staged_row_solve(const WindowSmem &w, const float *eG, float *proj, int pitch,
                                                 const float *v_s, int T, int len, int RB, int local,
                                                 float *ru = nullptr, int64_t ru_stride = 0) {
  constexpr int TMAX = RSSM_MAX_VERIFY_WINDOW;
  float u[TMAX];
  RSSM_UNROLL
  for (int i = 0; i < TMAX; ++i) {
    if (i >= len) break;
    const float dk = proj[(2 * i) * pitch + local], dq = proj[(2 * i + 1) * pitch + local];
    proj[i * pitch + local] = window_solve(w, T, i, w.anc[i], KDA ? 1.0f : eG[i], v_s[i * RB + local], dk, dq,
                                              [&](int j) -> float & { return u[j]; });
    if (ru) ru[i * ru_stride] = u[i];
  }
}

// The passes of staged V's streaming layout (and VB's) over the block's `rows` checkpoint rows of
// one head: `s` and `s1` hold passes 0 and 1 (requested by the caller before the window was
// built); each pass requests the rows two passes ahead while it projects its rows on the window:
// per chunk of 4 positions, 2 shared reads per position serve the warp's 4 rows and one
// reduce-scatter finishes the 32 projections, stored in proj [2 T][pitch] (slot 2 i: on position
// i's decayed key, 2 i + 1: on its query). Whole block; the caller's barrier follows.
template <int EPL>
__device__ __forceinline__ void stream_projections(const float *head_state, int rb0, int rows, int len,
                                                   const WindowSmem &w, float *proj, int pitch,
                                                   float (&s)[StreamLanes<EPL>::kRows][StreamLanes<EPL>::G][StreamLanes<EPL>::E],
                                                   float (&s1)[StreamLanes<EPL>::kRows][StreamLanes<EPL>::G][StreamLanes<EPL>::E]) {
  constexpr int K = kWarpSize * EPL;
  using L = StreamLanes<EPL>;
  constexpr int R = L::kRows, G = L::G, E = L::E, C = L::kChunk, RPP = L::kRowsPerPass;
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int passes = (rows + RPP - 1) / RPP;
  float s2[R][G][E];
  // Projection index: position in the chunk (bits 4, 3), key 0 / query 1 (bit 2), row (bits 1, 0).
  // A lane keeps its projection j in slot j ^ lane for the position and key/query bits (which
  // position and which of kh / qh it reads are per-lane addresses), so the scatter's first three
  // levels keep the front half and send the back half without selects; the two row levels
  // select (the rows' registers are not addressable). After the scatter lane l holds projection
  // l: position c * C + l / 8, key or query by bit 2, row l % 4 of the warp's.
  const int pos_xor = lane / (2 * R), my_kind = (lane / R) % 2, my_row = warp * R + lane % R;
  const float *k_src = my_kind ? w.qh : w.kh, *q_src = my_kind ? w.kh : w.qh;
  for (int pass = 0; pass < passes; ++pass) {
    // Unconditional (zeros past the last pass): under a branch the compiler rotated the buffers
    // right after the load and waited on it every pass.
    load_stream_rows<EPL>(head_state, rb0, pass + 2, rows, true, warp, lane, s2);
    RSSM_NO_UNROLL
    for (int c = 0; c * C < len; ++c) {
      float x[2 * C * R];  // [position][key, query][row]
      RSSM_UNROLL
      for (int q = 0; q < C; ++q) {
        const int at = c * C + (q ^ pos_xor);
        const int i = at < len ? at : len - 1;  // past the window: computed, not stored
        RSSM_UNROLL
        for (int r = 0; r < 2 * R; ++r) x[q * 2 * R + r] = 0.0f;
        RSSM_UNROLL
        for (int g = 0; g < G; ++g) {
          const int c0 = E * (lane + kWarpSize * g);
          float kq[E], qq[E];
          load_f32(k_src + i * K + c0, kq);
          load_f32(q_src + i * K + c0, qq);
          RSSM_UNROLL
          for (int r = 0; r < R; ++r)
            RSSM_UNROLL
            for (int e = 0; e < E; ++e) {
              x[q * 2 * R + r] = fmaf(s[r][g][e], kq[e], x[q * 2 * R + r]);
              x[q * 2 * R + R + r] = fmaf(s[r][g][e], qq[e], x[q * 2 * R + R + r]);
            }
        }
      }
      warp_scatter_front<2 * C * R, kWarpSize / 2, R>(x, lane);
      const int i = c * C + pos_xor;
      if (i < len) proj[(2 * i + my_kind) * pitch + pass * RPP + my_row] = x[0];
    }
    RSSM_UNROLL
    for (int r = 0; r < R; ++r)
      RSSM_UNROLL
      for (int g = 0; g < G; ++g)
        RSSM_UNROLL
        for (int e = 0; e < E; ++e) {
          s[r][g][e] = s1[r][g][e];
          s1[r][g][e] = s2[r][g][e];
        }
  }
}

// Where a streaming block (staged V, VB) works: rows rb0 .. rb0 + rows of value head hv of
// request req, RB rows per block.
struct StreamBlock {
  int hv, req, RB, rb0, rows;
  bool reporter;
  __device__ __forceinline__ explicit StreamBlock(const rssm_base_params &b) : hv(blockIdx.y), req(blockIdx.z) {
    RB = verify_staged_block_rows(b.block_rows, b.V);
    rb0 = blockIdx.x * RB;
    rows = RB < b.V - rb0 ? RB : b.V - rb0;  // > 0: the grid has ceil(V / RB) row blocks
    reporter = blockIdx.x == 0 && threadIdx.x == 0;
  }
};

// The staged tiles after the window arrays (verify_staged_smem_floats): exp of the GDN decay
// sums eG [T], the v tile v_s [T][RB], the projections proj [2 T][pitch] (then the outputs).
struct StagedTiles {
  float *eG, *v_s, *proj;
  int pitch;
  __device__ __forceinline__ StagedTiles(float *smem, int T, int K, bool kda, int RB) {
    eG = smem + verify_smem_floats(T, K, kda);
    v_s = eG + T;
    proj = v_s + T * RB;
    pitch = verify_staged_proj_pitch(RB);
  }
  __device__ __forceinline__ float *end(int T) const { return proj + 2 * T * pitch; }
};

// Value head hv's checkpoint of `slot` at the params' layer.
template <int K>
__device__ __forceinline__ const float *checkpoint_head(const rssm_base_params &b, int slot, int hv) {
  const int64_t head = int64_t(b.V) * K;
  return b.state + state_offset(b.state_slot_stride, b.state_layer_stride, b.layer, slot, b.num_slots, b.HV * head) +
         hv * head;
}

// The request of a staged block (staged V's, VB's); a skipped one gets its rows' outputs zeroed
// and false.
template <class Act>
__device__ __forceinline__ bool staged_request(const rssm_verify_params &p, const StreamBlock &at, VerifyRequest &rq) {
  if (verify_request(p, at.req, at.reporter, rq)) return true;
  verify_skipped_request<Act>(p, at.req, at.hv, at.rb0, at.rb0 + at.rows);
  return false;
}

// One block per (row block of `block_rows` rows, value head, request). The first two passes'
// checkpoint rows are requested before the window is built (4 KB per warp in flight at K = 128
// before the first wait), then each pass requests the rows two passes ahead while it
// projects its rows on the window: per chunk of 4 positions, 2 shared reads per position serve
// the warp's 4 rows and one reduce-scatter finishes the 32 projections, which go to shared
// memory. The forward substitution runs once per row after the passes (a thread per row), and
// the output tile is stored as vectors.
// (Min-blocks hint: 4 blocks per SM at K = 128 (three 4-row buffers and 32 projections take
// about 120 registers), 5 at K = 32 and 64, 1 at K = 256, whose buffers hold twice the channels.
// tests/resources.rs guards it.)
template <int EPL, class Act, bool KDA>
__global__ void __launch_bounds__(RowTiling::kThreads, EPL >= 8 ? 1 : EPL == 4 ? 4 : 5) verify_staged_kernel(const rssm_verify_params p) {
  constexpr int K = kWarpSize * EPL;
  using L = StreamLanes<EPL>;
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const StreamBlock at(p.base);
  const int hv = at.hv, RB = at.RB, rb0 = at.rb0, rows = at.rows, T = p.max_seqlen;

  VerifyRequest rq;
  if (!staged_request<Act>(p, at, rq)) return;
  RSSM_DYNAMIC_SMEM(float, smem);
  const WindowSmem w = window_smem(smem, T, K, KDA);
  const StagedTiles tiles(smem, T, K, KDA, RB);

  // The first two passes' checkpoint rows, in flight while the window is built.
  const int64_t layer_slot = int64_t(p.base.layer) * p.base.num_slots + (rq.live ? rq.slot : 0);
  const float *head_state = checkpoint_head<K>(p.base, rq.live ? rq.slot : 0, hv);
  float s[L::kRows][L::G][L::E], s1[L::kRows][L::G][L::E];
  load_stream_rows<EPL>(head_state, rb0, 0, rows, rq.live, warp, lane, s);
  load_stream_rows<EPL>(head_state, rb0, 1, rows, rq.live, warp, lane, s1);

  const bool tree_ok = rq.live && verify_tree_ok(p, rq, w, at.reporter);
  if (!tree_ok) {  // null, untrusted slot or bad tree: zero outputs, no ring writes
    verify_zero_outputs<Act>(p, rq, hv, rb0, rb0 + rows);
    return;
  }
  build_window<EPL, Act, KDA>(p, rq, w, hv, layer_slot);
  stage_window_tile<EPL, Act, KDA>(p, rq, w, tiles.eG, tiles.v_s, hv, rb0, rows, RB, 0);

  stream_projections<EPL>(head_state, rb0, rows, rq.len, w, tiles.proj, tiles.pitch, s, s1);
  __syncthreads();
  for (int local = threadIdx.x; local < rows; local += blockDim.x)
    staged_row_solve<KDA>(w, tiles.eG, tiles.proj, tiles.pitch, tiles.v_s, T, rq.len, RB, local);
  __syncthreads();
  store_output_tile<Act>(p, rq, tiles.proj, hv, rb0, rows, tiles.pitch);
}

}  // namespace rssm
