/* Self-test kernels of the SIMT emulator (tests/emulator.rs). Host pointers; each returns 0 or
 * RSSM_ERR_EMULATOR with the message in rssm_emu_last_error(). */
#ifndef REPLAYSSM_EMU_SELFTEST_H
#define REPLAYSSM_EMU_SELFTEST_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* out[i] = 2 * in[(i + 1) % n] within each block of n threads, through dynamic shared memory;
 * with_barrier = 0 removes the __syncthreads between the write and the read. */
int32_t rssm_emu_selftest_rotate(const float *in, float *out, int32_t n, int32_t blocks, int32_t with_barrier);
/* out[block] = sum of the block's n inputs by a tree reduction in static shared memory;
 * skip_barrier = s >= 0 removes the barrier after step s of the tree. */
int32_t rssm_emu_selftest_block_sum(const float *in, float *out, int32_t n, int32_t blocks, int32_t skip_barrier);
/* For one warp of lanes with inputs in[32]: each out_* gets the per-lane result of the named
 * intrinsic with argument arg and width width (ballot/any/all use pred = in[lane] & 1). */
int32_t rssm_emu_selftest_shuffles(const int32_t *in, int32_t arg, int32_t width, int32_t *out_shfl,
                                   int32_t *out_xor, int32_t *out_down, int32_t *out_up, uint32_t *out_ballot,
                                   int32_t *out_any, int32_t *out_all);
/* out[w] = rssm::warp_sum over warp w's 32 inputs (the reduction every kernel uses). */
int32_t rssm_emu_selftest_warp_sum(const float *in, float *out, int32_t warps);
/* Each of blocks x threads threads adds 1 to *counter and ORs (1 << (thread % 32)) into *bits. */
int32_t rssm_emu_selftest_atomics(int32_t *counter, uint32_t *bits, int32_t blocks, int32_t threads);
/* Launches an empty kernel with the given configuration (to test launch validation). */
int32_t rssm_emu_selftest_launch(uint32_t grid_x, uint32_t block_x, uint32_t block_y, uint64_t dynamic_smem);
/* A kernel whose lanes 0..15 shuffle while 16..31 do not: must be reported, not hang. */
int32_t rssm_emu_selftest_divergent(void);
/* Half of each warp waits at __syncthreads, the other half at a shuffle: a deadlock report. */
int32_t rssm_emu_selftest_deadlock(void);
/* bf16/f16 round trip of n floats through the emulator's conversions (out_* are floats). */
void rssm_emu_selftest_convert(const float *in, float *out_bf16, float *out_f16, int32_t n);

#ifdef __cplusplus
}
#endif

#endif
