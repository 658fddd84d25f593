// C entry points that need no device: compiled once, by the host compiler.
#include "replayssm/can_implement.h"
#include "replayssm/device/verify.cuh"

extern "C" rssm_status rssm_recurrent_can_implement(const rssm_recurrent_params *params) {
  return rssm::recurrent_can_implement(params, true);
}

extern "C" rssm_status rssm_verify_can_implement(const rssm_verify_params *params) {
  return rssm::verify_can_implement(params, true);
}

extern "C" rssm_status rssm_fold_can_implement(const rssm_fold_params *params) {
  return rssm::fold_can_implement(params, true);
}

extern "C" rssm_status rssm_replay_can_implement(const rssm_replay_params *params) {
  return rssm::replay_can_implement(params, true);
}

extern "C" rssm_status rssm_decode_can_implement(const rssm_decode_params *params) {
  return rssm::decode_can_implement(params, true);
}

extern "C" rssm_status rssm_cursors_can_implement(const rssm_cursor_params *params) {
  return rssm::cursors_can_implement(params);
}

extern "C" rssm_status rssm_verify_fold_can_implement(const rssm_verify_fold_params *params) {
  return rssm::verify_fold_can_implement(params, true);
}

extern "C" rssm_status rssm_defer_can_implement(const rssm_defer_params *params) {
  return rssm::defer_can_implement(params);
}

extern "C" int64_t rssm_verify_smem_bytes(int32_t max_seqlen, int32_t K, int32_t kda) {
  return int64_t(sizeof(float)) * rssm::verify_smem_floats(max_seqlen, K, kda != 0);
}

extern "C" int64_t rssm_verify_staged_smem_bytes(int32_t max_seqlen, int32_t K, int32_t kda, int32_t block_rows,
                                                 int32_t V) {
  const int rows = rssm::verify_staged_block_rows(block_rows, V);
  return int64_t(sizeof(float)) * rssm::verify_staged_smem_floats(max_seqlen, K, kda != 0, rows);
}

extern "C" int64_t rssm_replay_prefetch_smem_bytes(int32_t window, int32_t K, int32_t kda) {
  return int64_t(sizeof(float)) * rssm::replay_prefetch_smem_floats(window, K, kda != 0);
}
