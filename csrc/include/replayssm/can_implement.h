// The launchers' last line before a kernel (CUTLASS's can_implement), routed to the one definition
// of every host rule: src/checks/params.rs, reached through the C entry points of
// src/checks/can_implement.rs (declared in replayssm.h). The C ABI, the Rust wrappers and Python
// report the same rules with messages; here only the status comes back. The struct is read, no
// array: device-side indices (slots, cu_seqlens) are checked by the kernels themselves.
#pragma once

#include "replayssm/replayssm.h"

namespace rssm {

inline rssm_status recurrent_can_implement(const rssm_recurrent_params *p, bool vector_aligned) {
  return rssm_recurrent_can_implement(p, vector_aligned);
}
inline rssm_status verify_can_implement(const rssm_verify_params *p, bool vector_aligned) {
  return rssm_verify_can_implement(p, vector_aligned);
}
inline rssm_status fold_can_implement(const rssm_fold_params *p, bool vector_aligned) {
  return rssm_fold_can_implement(p, vector_aligned);
}
inline rssm_status replay_can_implement(const rssm_replay_params *p, bool vector_aligned) {
  return rssm_replay_can_implement(p, vector_aligned);
}
// Kernel D and its materialise entry share one struct; `tokens` is false for materialise.
inline rssm_status decode_can_implement(const rssm_decode_params *p, bool vector_aligned, bool tokens = true) {
  return tokens ? rssm_decode_can_implement(p, vector_aligned) : rssm_materialize_can_implement(p, vector_aligned);
}
inline rssm_status cursors_can_implement(const rssm_cursor_params *p) { return rssm_cursors_can_implement(p, false); }
inline rssm_status verify_fold_can_implement(const rssm_verify_fold_params *p, bool vector_aligned) {
  return rssm_verify_fold_can_implement(p, vector_aligned);
}
inline rssm_status defer_can_implement(const rssm_defer_params *p) { return rssm_defer_can_implement(p, false); }
inline rssm_status verify_buffered_can_implement(const rssm_verify_buffered_params *p, bool vector_aligned) {
  return rssm_verify_buffered_can_implement(p, vector_aligned);
}
inline rssm_status buffered_can_implement(const rssm_buffered_params *p) { return rssm_buffered_can_implement(p, false); }

}  // namespace rssm
