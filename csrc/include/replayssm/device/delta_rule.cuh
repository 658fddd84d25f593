// The gated delta rule of SPEC §3, as one warp sees it: the warp owns ROWS value rows of one
// head's state, each lane holds EPL consecutive key channels of every row (K = 32 * EPL).
// Kernels R, P and F all go through these functions; do not write a second copy of the update.
#pragma once

#include "replayssm/device/common.cuh"

namespace rssm {

// SPEC §3 step 1: g = -exp(A_log) * softplus(a + dt_bias), softplus linear above 20.
__device__ __forceinline__ float gate_log_decay(float a, float dt_bias, float A_log) {
  const float x = a + dt_bias;
  const float softplus = x <= 20.0f ? log1pf(expf(x)) : x;
  return -expf(A_log) * softplus;
}

// SPEC §3 step 2.
__device__ __forceinline__ float gate_beta(float b) { return 1.0f / (1.0f + expf(-b)); }

// SPEC §3 step 3, division form with eps inside the root. Whole warp.
template <int EPL> __device__ __forceinline__ void l2_normalize(float (&x)[EPL]) {
  float ss[1] = {0.0f};
  RSSM_UNROLL
  for (int j = 0; j < EPL; ++j) ss[0] = fmaf(x[j], x[j], ss[0]);
  warp_sum(ss);
  const float norm = sqrtf(ss[0] + 1e-6f);
  RSSM_UNROLL
  for (int j = 0; j < EPL; ++j) x[j] = x[j] / norm;
}

// Decay factors exp(g): one per token and head (GDN) or one per key channel (KDA).
template <int EPL, bool KDA> struct Decay {
  float d[KDA ? EPL : 1];
  __device__ __forceinline__ float operator[](int j) const { return d[KDA ? j : 0]; }
};

// SPEC §3 steps 4-7 for ROWS rows: S *= exp(g); u = (v - S k) * beta; S += u k^T. Whole warp.
template <int EPL, int ROWS, bool KDA>
__device__ __forceinline__ void delta_rule_update(float (&s)[ROWS][EPL], const float (&k)[EPL],
                                                  const Decay<EPL, KDA> &decay, float beta, const float (&v)[ROWS]) {
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
    const float u = (v[r] - dot[r]) * beta;
    RSSM_UNROLL
    for (int j = 0; j < EPL; ++j) s[r][j] = fmaf(u, k[j], s[r][j]);
  }
}

// SPEC §3 step 8: o = S q for ROWS rows. Whole warp; every lane gets every row's output.
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

}  // namespace rssm
