// Dynamic shared memory of the kernels that take it, one formula each, for the launchers, the
// host checks (can_implement.h) and the exported size queries (host_api.cpp).
#pragma once

#include <stdint.h>

#if defined(__CUDACC__)
#define RSSM_HOST_DEVICE __host__ __device__
#else
#define RSSM_HOST_DEVICE
#endif

namespace rssm {

// Kernel V (both implementations): one block's window arrays, in 4-byte words: the float arrays,
// then the tree (parent and ancestor mask per position, one validity flag).
inline RSSM_HOST_DEVICE int64_t verify_smem_floats(int T, int K, bool kda) {
  return int64_t(2) * T * K + int64_t(T) * (kda ? K : 1) + T + int64_t(2) * T * T + 2 * T + 1;
}

// State rows one STAGED verify block covers: block_rows, or the whole head (V rounded up to 16).
inline RSSM_HOST_DEVICE int verify_staged_block_rows(int block_rows, int V) {
  return block_rows > 0 ? block_rows : (V + 15) / 16 * 16;
}

// What every STAGED block (V, VF) stages: the window arrays, exp of the GDN decay sums [T], the
// v tile and the output tile [T][rows].
inline RSSM_HOST_DEVICE int64_t staged_tiles_floats(int T, int K, bool kda, int rows) {
  return verify_smem_floats(T, K, kda) + T + int64_t(2) * T * rows;
}

// Row pitch of staged V's projection and output tiles: 4 words past the rows, so the 8
// (position, key or query) slots a warp's lanes store at once start in different banks.
inline RSSM_HOST_DEVICE int verify_staged_proj_pitch(int rows) { return rows + 4; }

// One STAGED verify block: the window arrays, exp of the GDN decay sums [T], the v tile [T][rows],
// then the rows' projections on every position's decayed key and query [2 T][pitch], which the
// forward substitution reads after the passes and overwrites with the outputs [T][pitch] (a
// thread's output i lands in its own column of slot i, read before: slots 2 i and 2 i + 1 are
// read at position i).
inline RSSM_HOST_DEVICE int64_t verify_staged_smem_floats(int T, int K, bool kda, int rows) {
  return verify_smem_floats(T, K, kda) + T + int64_t(T) * rows + int64_t(2) * T * verify_staged_proj_pitch(rows);
}

// One STAGED VF block: the staged tiles, then per pending record (at most W, one half of the
// ring) its normalised key, decay factors, beta and the v values of the block's rows.
inline RSSM_HOST_DEVICE int64_t verify_fold_staged_smem_floats(int T, int W, int K, bool kda, int rows) {
  return staged_tiles_floats(T, K, kda, rows) + int64_t(W) * (K + (kda ? K : 1) + 1 + rows);
}
// One VB block: staged V's, then from a 16-byte boundary the history of up to L records: the
// [L][TP] matrices on the window's keys and queries (TP = T rounded up to 4), raw keys [L][K], log
// decays [L + 1][GW], the u tile [L][rows] (verify_buffered.cuh's HistorySmem).
inline RSSM_HOST_DEVICE int64_t verify_buffered_smem_floats(int T, int L, int K, bool kda, int rows) {
  const int64_t staged = (verify_staged_smem_floats(T, K, kda, rows) + 3) / 4 * 4;
  return staged + int64_t(2) * L * ((T + 3) / 4 * 4) + int64_t(L) * K + int64_t(L + 1) * (kda ? K : 1) +
         int64_t(L) * rows;
}

// Kernel D (both implementations): the token its block shares (decode.cuh's TokenTile), k^ and
// q^ [K] and, for KDA, g and exp(g) [K].
inline RSSM_HOST_DEVICE int64_t decode_smem_floats(int K, bool kda) { return int64_t(kda ? 4 : 2) * K; }

// RSSM_IMPL_PREFETCH of F and P: per ring record its normalised key, decay factors, beta and the
// v values of the block's 16 rows.
inline RSSM_HOST_DEVICE int64_t replay_prefetch_smem_floats(int window, int K, bool kda) {
  return int64_t(window) * (K + (kda ? K : 1) + 1 + 16);
}

}  // namespace rssm
