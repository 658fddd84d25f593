// C entry points that need no device: compiled once, by the host compiler.
#include "replayssm/replayssm.h"
#include "replayssm/device/verify.cuh"

extern "C" int64_t rssm_verify_smem_bytes(int32_t max_seqlen, int32_t K, int32_t kda) {
  return int64_t(sizeof(float)) * rssm::verify_smem_floats(max_seqlen, K, kda != 0);
}

extern "C" int64_t rssm_verify_staged_smem_bytes(int32_t max_seqlen, int32_t K, int32_t kda, int32_t block_rows,
                                                 int32_t V) {
  const int rows = rssm::verify_staged_block_rows(block_rows, V);
  return int64_t(sizeof(float)) * rssm::verify_staged_smem_floats(max_seqlen, K, kda != 0, rows);
}

extern "C" int64_t rssm_verify_fold_staged_smem_bytes(int32_t max_seqlen, int32_t ring_window, int32_t K, int32_t kda,
                                                      int32_t block_rows, int32_t V) {
  const int rows = rssm::verify_staged_block_rows(block_rows, V);
  return int64_t(sizeof(float)) * rssm::verify_fold_staged_smem_floats(max_seqlen, ring_window / 2, K, kda != 0, rows);
}

extern "C" int64_t rssm_verify_buffered_smem_bytes(int32_t max_seqlen, int32_t cache_len, int32_t K, int32_t kda,
                                                   int32_t block_rows, int32_t V) {
  const int rows = rssm::verify_staged_block_rows(block_rows, V);
  return int64_t(sizeof(float)) * rssm::verify_buffered_smem_floats(max_seqlen, cache_len, K, kda != 0, rows);
}

extern "C" int64_t rssm_replay_prefetch_smem_bytes(int32_t window, int32_t K, int32_t kda) {
  return int64_t(sizeof(float)) * rssm::replay_prefetch_smem_floats(window, K, kda != 0);
}
