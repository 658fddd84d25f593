// The gated delta rule of design §3, as one warp sees it: the warp owns ROWS value rows of one
// head's state, each lane holds EPL consecutive key channels of every row (K = 32 * EPL).
// Kernels R, P and F all go through these functions; do not write a second copy of the update.
#pragma once

#include "replayssm/device/common.cuh"

namespace rssm {

// design §3 step 1, x = a + dt_bias: the softplus gate g = -exp(A_log) * softplus(x), softplus
// linear above 20; with SAFE_GATE and a nonzero (negative) lower_bound, the safe gate of Kimi's
// KDA, g = lower_bound * sigmoid(exp(A_log) * x) = lower_bound / (1 + exp(-exp(A_log) x)). The two
// forms share one expf so that KDA's hot loops carry one exp per channel, not two; GDN compiles
// the softplus form alone (SAFE_GATE false), exactly as before the safe gate existed.
template <bool SAFE_GATE>
__device__ __forceinline__ float gate_log_decay(float a, float dt_bias, float A_log, float lower_bound) {
  const float x = a + dt_bias;
  if constexpr (!SAFE_GATE) {
    const float softplus = x <= 20.0f ? log1pf(expf(x)) : x;
    return -expf(A_log) * softplus;
  } else {
    const float e = expf(A_log);
    const bool safe = lower_bound != 0.0f;
    const float t = expf(safe ? -(e * x) : x);
    if (safe) return lower_bound * (1.0f / (1.0f + t));
    const float softplus = x <= 20.0f ? log1pf(t) : x;
    return -e * softplus;
  }
}

// design §3 step 2.
__device__ __forceinline__ float gate_beta(float b) { return 1.0f / (1.0f + expf(-b)); }

// design §3 step 3's norm, sqrt(sum x^2 + eps) over the whole key: this lane's EPL channels,
// then the butterfly. Whole warp.
template <int EPL> __device__ __forceinline__ float l2_norm(const float (&x)[EPL]) {
  float ss[1] = {0.0f};
  RSSM_UNROLL
  for (int j = 0; j < EPL; ++j) ss[0] = fmaf(x[j], x[j], ss[0]);
  warp_sum(ss);
  return sqrtf(ss[0] + 1e-6f);
}

// design §3 step 3, division form with eps inside the root. Whole warp.
template <int EPL> __device__ __forceinline__ void l2_normalize(float (&x)[EPL]) {
  const float norm = l2_norm(x);
  RSSM_UNROLL
  for (int j = 0; j < EPL; ++j) x[j] = x[j] / norm;
}

// Decay factors exp(g): one per token and head (GDN) or one per key channel (KDA).
template <int EPL, bool KDA> struct Decay {
  float d[KDA ? EPL : 1];
  __device__ __forceinline__ float operator[](int j) const { return d[KDA ? j : 0]; }
};

// exp of the log decay: the same expression wherever g comes from (gate, ring), so a replay of
// a stored g reproduces the recurrent kernel's decay bit for bit.
template <int EPL, bool KDA> __device__ __forceinline__ Decay<EPL, KDA> decay_from_log(const float (&g)[KDA ? EPL : 1]) {
  Decay<EPL, KDA> d;
  RSSM_UNROLL
  for (int j = 0; j < (KDA ? EPL : 1); ++j) d.d[j] = expf(g[j]);
  return d;
}

// This lane's EPL key channels of one token, normalised when asked (design §3 step 3). Whole warp.
template <int EPL, class Act>
__device__ __forceinline__ void load_key(const Act *__restrict__ lane_k, bool l2norm, float (&k)[EPL]) {
  load_act(lane_k, k);
  if (l2norm) l2_normalize(k);
}

// Where a kernel finds the gate of a token: raw inputs (a, b, A_log, dt_bias) or precomputed
// g/beta (a == nullptr). Strides in elements per token. lower_bound: 0 = softplus gate, else
// (negative, KDA only: checked on the host) the safe gate.
struct GateSource {
  const void *a, *b;
  const float *A_log, *dt_bias, *g, *beta;
  int64_t a_stride, b_stride;
  int HV;
  float lower_bound;

  __device__ __forceinline__ static GateSource of(const rssm_token_params &t, int HV) {
    return GateSource{t.a, t.b, t.A_log, t.dt_bias, t.g, t.beta, t.a_stride, t.b_stride, HV, t.lower_bound};
  }
};

// KDA's gate for the N channels c[i] of token `tok`, value head `hv` (raw or precomputed), its inputs
// loaded apart from the gate so that kernel D can issue them first of all (token_gate, for the
// token loops of R, V and F, loads and computes in one go). The second input is dt_bias (raw) or
// the precomputed g itself, and A_log is read from whichever array that is (then dropped): read
// under the form's condition, ptxas issued them after the form's branch, one round trip late. The
// float operations are token_gate's, so the bits are.
template <int N, class Act> struct KdaGateInputs {
  float a_raw[N], dt_or_g[N], A_log;

  __device__ __forceinline__ void load(const GateSource &src, int64_t tok, int hv, int K, const int (&c)[N]) {
    const int64_t head = int64_t(hv) * K;
    const bool raw = src.g == nullptr;
    const Act *a = raw ? static_cast<const Act *>(src.a) + tok * src.a_stride + head : nullptr;
    const float *second = raw ? src.dt_bias + head : src.g + tok * src.HV * K + head;
    RSSM_UNROLL
    for (int i = 0; i < N; ++i) {
      if (raw) a_raw[i] = to_float(a[c[i]]);
      dt_or_g[i] = second[c[i]];
    }
    A_log = *(raw ? src.A_log + hv : second);
  }

  // g of the channels: the gate of the loaded raw inputs, or the precomputed values.
  __device__ __forceinline__ void gate(const GateSource &src, float (&g)[N]) const {
    RSSM_UNROLL
    for (int i = 0; i < N; ++i)
      g[i] = src.g == nullptr ? gate_log_decay<true>(a_raw[i], dt_or_g[i], A_log, src.lower_bound) : dt_or_g[i];
  }
};

// The input of beta for token `tok`, value head `hv`: the raw b, or the precomputed beta. Apart
// from token_beta so that a caller issues its load before the gate's branches.
template <class Act> __device__ __forceinline__ float beta_input(const GateSource &src, int64_t tok, int hv) {
  if (src.g == nullptr) return to_float(static_cast<const Act *>(src.b)[tok * src.b_stride + hv]);
  return src.beta[tok * src.HV + hv];
}

// design §3 step 2 on beta_input's value (a precomputed beta passes through).
__device__ __forceinline__ float token_beta(const GateSource &src, float input) {
  return src.g == nullptr ? gate_beta(input) : input;
}

// Log decay g (one value, or this lane's EPL channels for KDA) and beta of token `tok`, value
// head `hv` (design §3 steps 1-2). These exact values are what the spec ring stores.
template <int EPL, class Act, bool KDA>
__device__ __forceinline__ void token_gate(const GateSource &src, int64_t tok, int hv, int kc,
                                           float (&g)[KDA ? EPL : 1], float &beta) {
  constexpr int K = kWarpSize * EPL;
  if (src.g == nullptr) {
    const Act *a = static_cast<const Act *>(src.a);
    const Act *b = static_cast<const Act *>(src.b);
    const float b_raw = to_float(b[tok * src.b_stride + hv]);
    if constexpr (KDA) {
      // Every channel's inputs loaded before any is used: the gate branches per channel, and
      // loads written between the branches waited one round trip per channel.
      float a_raw[EPL], dt_bias[EPL];
      RSSM_UNROLL
      for (int j = 0; j < EPL; ++j) {
        a_raw[j] = to_float(a[tok * src.a_stride + int64_t(hv) * K + kc + j]);
        dt_bias[j] = src.dt_bias[int64_t(hv) * K + kc + j];
      }
      const float A_log = src.A_log[hv];
      RSSM_UNROLL
      for (int j = 0; j < EPL; ++j) g[j] = gate_log_decay<true>(a_raw[j], dt_bias[j], A_log, src.lower_bound);
    } else {
      // The safe gate is KDA's (refused for GDN on the host): GDN's loops keep one form.
      g[0] = gate_log_decay<false>(to_float(a[tok * src.a_stride + hv]), src.dt_bias[hv], src.A_log[hv], 0.0f);
    }
    beta = gate_beta(b_raw);
  } else {
    if constexpr (KDA) {
      RSSM_UNROLL
      for (int j = 0; j < EPL; ++j) g[j] = src.g[(tok * src.HV + hv) * K + kc + j];
    } else {
      g[0] = src.g[tok * src.HV + hv];
    }
    beta = src.beta[tok * src.HV + hv];
  }
}

// What a decode ring of element type Rec holds for x: x itself (f32), else x rounded to nearest
// even. (float: the identity, no instruction.)
template <class Rec> __device__ __forceinline__ float ring_value(float x) { return to_float(from_float<Rec>(x)); }

// design §3 steps 4-7 for ROWS rows: S *= exp(g); u = (v - S k) * beta; S += u k^T. Whole warp.
// Every lane gets every row's corrected delta in `u` (kernel D stores it in its ring). Rec is the
// element type of the decode ring whose records the update must reproduce: for f16/bf16, u and
// the k of the rank-1 term are rounded to it first (S k stays f32), so kernel D replaying its
// rounded records and kernel R with record_dtype = Rec update S with the same values.
template <int EPL, int ROWS, bool KDA, class Rec = float>
__device__ __forceinline__ void delta_rule_update(float (&s)[ROWS][EPL], const float (&k)[EPL],
                                                  const Decay<EPL, KDA> &decay, float beta, const float (&v)[ROWS],
                                                  float (&u)[ROWS]) {
  float kr[EPL];
  RSSM_UNROLL
  for (int j = 0; j < EPL; ++j) kr[j] = ring_value<Rec>(k[j]);
  float dot[ROWS];
  RSSM_UNROLL
  for (int r = 0; r < ROWS; ++r) {
    dot[r] = 0.0f;
    RSSM_UNROLL
    for (int j = 0; j < EPL; ++j) {
      s[r][j] = s[r][j] * decay[j];
      dot[r] = fmaf(s[r][j], k[j], dot[r]);
    }
  }
  warp_sum(dot);
  RSSM_UNROLL
  for (int r = 0; r < ROWS; ++r) {
    u[r] = ring_value<Rec>((v[r] - dot[r]) * beta);
    RSSM_UNROLL
    for (int j = 0; j < EPL; ++j) s[r][j] = fmaf(u[r], kr[j], s[r][j]);
  }
}

template <int EPL, int ROWS, bool KDA, class Rec = float>
__device__ __forceinline__ void delta_rule_update(float (&s)[ROWS][EPL], const float (&k)[EPL],
                                                  const Decay<EPL, KDA> &decay, float beta, const float (&v)[ROWS]) {
  float u[ROWS];
  delta_rule_update<EPL, ROWS, KDA, Rec>(s, k, decay, beta, v, u);
}

// delta_rule_update for one state row held by 8 lanes (staged VF): lane l8 holds, as group g,
// the EPL channels lane l8 + 8 g holds in the warp layout. The same float operations in the same
// order: each group's partial dot as that lane's, the butterfly's first two levels in registers
// (xor 16 pairs groups 0 and 2, 1 and 3; xor 8 adds the two sums; float addition commutes, so
// every lane of the warp layout holds these bits), then its last three levels across the 8
// lanes. The row's bits are delta_rule_update's. Every lane of the warp calls it.
template <int EPL, bool KDA>
__device__ __forceinline__ void delta_rule_update_row8(float (&s)[4][EPL], const float (&k)[4][EPL],
                                                       const Decay<EPL, KDA> (&decay)[4], float beta, float v) {
  float part[4];
  RSSM_UNROLL
  for (int g = 0; g < 4; ++g) {
    part[g] = 0.0f;
    RSSM_UNROLL
    for (int j = 0; j < EPL; ++j) {
      s[g][j] = s[g][j] * decay[g][j];
      part[g] = fmaf(s[g][j], k[g][j], part[g]);
    }
  }
  float dot = (part[0] + part[2]) + (part[1] + part[3]);
  RSSM_UNROLL
  for (int offset = 4; offset > 0; offset >>= 1) dot += __shfl_xor_sync(kFullMask, dot, offset);
  const float u = (v - dot) * beta;
  RSSM_UNROLL
  for (int g = 0; g < 4; ++g) {
    RSSM_UNROLL
    for (int j = 0; j < EPL; ++j) s[g][j] = fmaf(u, k[g][j], s[g][j]);
  }
}

// Steps 4 and 7 with a known corrected delta u (replaying a buffered-decode record): exactly the
// float operations delta_rule_update performs on S, so the replayed state is R's bit for bit.
template <int EPL, int ROWS, bool KDA>
__device__ __forceinline__ void delta_rule_apply(float (&s)[ROWS][EPL], const float (&k)[EPL],
                                                 const Decay<EPL, KDA> &decay, const float (&u)[ROWS]) {
  RSSM_UNROLL
  for (int r = 0; r < ROWS; ++r) {
    RSSM_UNROLL
    for (int j = 0; j < EPL; ++j) s[r][j] = fmaf(u[r], k[j], s[r][j] * decay[j]);
  }
}

// design §3 step 8: o = S q for ROWS rows. Whole warp; every lane gets every row's output.
template <int EPL, int ROWS>
__device__ __forceinline__ void delta_rule_readout(const float (&s)[ROWS][EPL], const float (&q)[EPL],
                                                   float (&o)[ROWS]) {
  RSSM_UNROLL
  for (int r = 0; r < ROWS; ++r) {
    o[r] = 0.0f;
    RSSM_UNROLL
    for (int j = 0; j < EPL; ++j) o[r] = fmaf(s[r][j], q[j], o[r]);
  }
  warp_sum(o);
}

// ROWS state rows of this warp: `base` points at row 0, this lane's first channel; rows past V
// (row_ok false) read as zeros and are never stored.
template <int EPL, int ROWS>
__device__ __forceinline__ void load_rows(const float *base, int64_t row_stride, const bool (&row_ok)[ROWS],
                                          float (&s)[ROWS][EPL]) {
  RSSM_UNROLL
  for (int r = 0; r < ROWS; ++r) {
    if (row_ok[r]) {
      load_f32(base + r * row_stride, s[r]);
    } else {
      RSSM_UNROLL
      for (int j = 0; j < EPL; ++j) s[r][j] = 0.0f;
    }
  }
}

template <int EPL, int ROWS>
__device__ __forceinline__ void store_rows(float *base, int64_t row_stride, const bool (&row_ok)[ROWS],
                                           const float (&s)[ROWS][EPL]) {
  RSSM_UNROLL
  for (int r = 0; r < ROWS; ++r)
    if (row_ok[r]) store_f32(base + r * row_stride, s[r]);
}

}  // namespace rssm
