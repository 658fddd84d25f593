// Host-side validation of params structs (CUTLASS's can_implement), shared by every launcher.
// The safe Rust wrappers check the same things first and give typed errors; this is the last
// line for C callers. It checks only what the host can see: device-side indices (slots,
// cu_seqlens) are checked by the kernels themselves.
#pragma once

#include <stdint.h>

#include "replayssm/replayssm.h"
#include "replayssm/smem.h"

namespace rssm {

// Head dims the kernels are compiled for (K = 32 * EPL): the powers of two in RSSM_HEAD_DIMS_MASK.
inline bool supported_head_dim(int32_t k) {
  return k > 0 && (k & (k - 1)) == 0 && (uint32_t(k) & RSSM_HEAD_DIMS_MASK) != 0;
}

inline bool aligned(const void *p, uintptr_t bytes) { return (reinterpret_cast<uintptr_t>(p) % bytes) == 0; }

// The checkpoint pool's pitches (elements; 0 = packed): a slot pitch of at least one slot, a layer
// pitch that keeps the layers apart (all slots of a layer before the next, or every layer inside a
// slot: an engine's page-major pool), both whole float4s (the vector loads), and num_slots slot
// pitches and num_layers layer pitches within 64-bit byte addressing (checks::params, the same rule).
inline bool state_pitches_ok(int64_t slot_stride, int64_t layer_stride, int32_t num_layers, int32_t num_slots,
                             int32_t HV, int32_t V, int32_t K) {
  const int64_t elems = int64_t(HV) * V * K;
  if (slot_stride < 0 || layer_stride < 0 || slot_stride % 4 != 0 || layer_stride % 4 != 0) return false;
  if (slot_stride > (int64_t(1) << 40) || layer_stride > (int64_t(1) << 40)) return false;  // no overflow below
  if (num_slots < 1 || num_layers < 1) return false;
  const int64_t ss = slot_stride ? slot_stride : elems;
  if (ss < elems || ss > INT64_MAX / 4 / num_slots) return false;  // num_slots pitches in byte addressing
  const int64_t ls = layer_stride ? layer_stride : ss * num_slots;
  if (ls > INT64_MAX / 4 / num_layers) return false;
  if (num_layers == 1) return true;
  return ls >= ss * num_slots || (ls >= elems && ss >= ls * num_layers);
}

// The token inputs R, V and D share (same field names in every params struct): pointers present,
// exactly one gate form, strides at least a row, a finite scale. cu_seqlens is checked by the
// callers that have one (D has a fixed token per request).
template <class P> rssm_status token_fields_can_implement(const P *p) {
  if (!p->q || !p->k || !p->v || !p->o || !p->slots || !p->state) return RSSM_ERR_INVALID_ARGUMENT;
  const bool raw = p->a || p->b || p->A_log || p->dt_bias;
  const bool pre = p->g || p->beta;
  if (raw == pre) return RSSM_ERR_INVALID_ARGUMENT;  // exactly one gate form
  if (raw && (!p->a || !p->b || !p->A_log || !p->dt_bias)) return RSSM_ERR_INVALID_ARGUMENT;
  if (pre && (!p->g || !p->beta)) return RSSM_ERR_INVALID_ARGUMENT;
  const int64_t gate_row = p->variant == RSSM_VARIANT_KDA ? int64_t(p->HV) * p->K : p->HV;
  if (p->q_stride < int64_t(p->H) * p->K || p->k_stride < int64_t(p->H) * p->K ||
      p->v_stride < int64_t(p->HV) * p->V || p->o_stride < int64_t(p->HV) * p->V)
    return RSSM_ERR_INVALID_ARGUMENT;
  if (raw && (p->a_stride < gate_row || p->b_stride < p->HV)) return RSSM_ERR_INVALID_ARGUMENT;
  if (!(p->scale == p->scale) || p->scale > 3.4e38f || p->scale < -3.4e38f) return RSSM_ERR_INVALID_ARGUMENT;
  return RSSM_OK;
}

inline rssm_status recurrent_can_implement(const rssm_recurrent_params *p, bool vector_aligned) {
  if (!p) return RSSM_ERR_INVALID_ARGUMENT;
  if (p->batch < 1 || p->num_tokens < 0 || p->max_seqlen < 1 || p->num_slots < 1 || p->H < 1 || p->HV < 1 ||
      p->K < 1 || p->V < 1 || p->V > RSSM_MAX_V || p->HV % p->H != 0 || p->batch > 65535 || p->HV > 65535)
    return RSSM_ERR_INVALID_ARGUMENT;
  if (p->dtype < RSSM_DTYPE_F32 || p->dtype > RSSM_DTYPE_BF16) return RSSM_ERR_INVALID_ARGUMENT;
  if (p->variant != RSSM_VARIANT_GDN && p->variant != RSSM_VARIANT_KDA) return RSSM_ERR_INVALID_ARGUMENT;
  if (!p->cu_seqlens) return RSSM_ERR_INVALID_ARGUMENT;
  const rssm_status tokens = token_fields_can_implement(p);
  if (tokens != RSSM_OK) return tokens;
  if (vector_aligned && (!aligned(p->state, 16) || (p->snapshots && !aligned(p->snapshots, 16))))
    return RSSM_ERR_INVALID_ARGUMENT;
  if (!state_pitches_ok(p->state_slot_stride, 0, 1, p->num_slots, p->HV, p->V, p->K)) return RSSM_ERR_INVALID_ARGUMENT;
  if (!supported_head_dim(p->K)) return RSSM_ERR_UNSUPPORTED;
  return RSSM_OK;
}

}  // namespace rssm

namespace rssm {

// Checks shared by the spec kernels (V, F, P): dims, dtype, variant, pool and ring geometry.
inline rssm_status spec_common_can_implement(int32_t batch, int32_t num_slots, int32_t num_layers, int32_t window,
                                             int32_t H, int32_t HV, int32_t K, int32_t V, int32_t dtype,
                                             int32_t variant) {
  if (batch < 1 || batch > RSSM_MAX_BATCH || num_slots < 1 || num_layers < 1 || num_layers > RSSM_MAX_LAYERS || window < 1 || H < 1 || HV < 1 || K < 1 ||
      V < 1 || V > RSSM_MAX_V || HV % H != 0 || HV > 65535)
    return RSSM_ERR_INVALID_ARGUMENT;
  if (dtype < RSSM_DTYPE_F32 || dtype > RSSM_DTYPE_BF16) return RSSM_ERR_INVALID_ARGUMENT;
  if (variant != RSSM_VARIANT_GDN && variant != RSSM_VARIANT_KDA) return RSSM_ERR_INVALID_ARGUMENT;
  if (!supported_head_dim(K)) return RSSM_ERR_UNSUPPORTED;
  return RSSM_OK;
}

// The implementation fields. V: DEFAULT (block_rows 0) or STAGED (block_rows 0 = the whole head, or
// a multiple of 16 up to RSSM_MAX_V). F and P: DEFAULT or PREFETCH (records staged in shared
// memory: windows up to RSSM_MAX_VERIFY_WINDOW), block_rows 0. D: DEFAULT or PREFETCH;
// materialise: DEFAULT.
// STAGED's shared memory (its window, v and output tiles) must fit in RSSM_VERIFY_STAGED_MAX_SMEM.
inline bool verify_impl_ok(int32_t impl, int32_t block_rows, int32_t max_seqlen, int32_t K, int32_t V, bool kda) {
  if (impl == RSSM_IMPL_DEFAULT) return block_rows == 0;
  if (impl != RSSM_IMPL_STAGED || block_rows < 0 || block_rows > RSSM_MAX_V || block_rows % 16 != 0) return false;
  return 4 * verify_staged_smem_floats(max_seqlen, K, kda, verify_staged_block_rows(block_rows, V)) <=
         RSSM_VERIFY_STAGED_MAX_SMEM;
}
inline bool replay_impl_ok(int32_t impl, int32_t block_rows, int32_t window) {
  if (block_rows != 0) return false;
  return impl == RSSM_IMPL_DEFAULT || (impl == RSSM_IMPL_PREFETCH && window <= RSSM_MAX_VERIFY_WINDOW);
}

// F and materialise put (row tile, layer) in gridDim.x, which holds 2^31 - 1 blocks, and the
// request in gridDim.z (RSSM_MAX_BATCH): every batch an engine serves.
inline bool layer_grid_ok(int32_t V, int32_t num_layers) {
  return int64_t((V + 15) / 16) * num_layers <= 2147483647;
}

inline rssm_status verify_can_implement(const rssm_verify_params *p, bool vector_aligned) {
  if (!p) return RSSM_ERR_INVALID_ARGUMENT;
  const rssm_status st = spec_common_can_implement(p->batch, p->num_slots, p->num_layers, p->window, p->H, p->HV, p->K,
                                                   p->V, p->dtype, p->variant);
  if (st != RSSM_OK) return st;
  if (p->num_tokens < 0 || p->max_seqlen < 1 || p->max_seqlen > RSSM_MAX_VERIFY_WINDOW || p->layer < 0 ||
      p->layer >= p->num_layers)
    return RSSM_ERR_INVALID_ARGUMENT;
  if (!p->cu_seqlens) return RSSM_ERR_INVALID_ARGUMENT;
  const rssm_status tokens = token_fields_can_implement(p);
  if (tokens != RSSM_OK) return tokens;
  const int rings = (p->ring_v != nullptr) + (p->ring_k != nullptr) + (p->ring_g != nullptr) + (p->ring_beta != nullptr);
  if (rings != 0 && rings != 4) return RSSM_ERR_INVALID_ARGUMENT;
  if (rings == 4 && p->window < p->max_seqlen) return RSSM_ERR_INVALID_ARGUMENT;  // W >= T
  if (!verify_impl_ok(p->impl, p->block_rows, p->max_seqlen, p->K, p->V, p->variant == RSSM_VARIANT_KDA)) return RSSM_ERR_INVALID_ARGUMENT;
  if (vector_aligned && !aligned(p->state, 16)) return RSSM_ERR_INVALID_ARGUMENT;
  if (!state_pitches_ok(p->state_slot_stride, p->state_layer_stride, p->num_layers, p->num_slots, p->HV, p->V, p->K))
    return RSSM_ERR_INVALID_ARGUMENT;
  return RSSM_OK;
}

inline rssm_status fold_can_implement(const rssm_fold_params *p, bool vector_aligned) {
  if (!p) return RSSM_ERR_INVALID_ARGUMENT;
  const rssm_status st = spec_common_can_implement(p->batch, p->num_slots, p->num_layers, p->window, p->H, p->HV, p->K,
                                                   p->V, p->dtype, p->variant);
  if (st != RSSM_OK) return st;
  if (!layer_grid_ok(p->V, p->num_layers)) return RSSM_ERR_INVALID_ARGUMENT;
  if (!replay_impl_ok(p->impl, p->block_rows, p->window)) return RSSM_ERR_INVALID_ARGUMENT;
  if (!p->state || !p->ring_v || !p->ring_k || !p->ring_g || !p->ring_beta || !p->slots)
    return RSSM_ERR_INVALID_ARGUMENT;
  // Accept lengths (chain) or accept paths (tree), exactly one of them.
  if ((p->accept_lens == nullptr) == (p->accept_paths == nullptr)) return RSSM_ERR_INVALID_ARGUMENT;
  if (p->accept_paths ? (p->path_width < 1 || p->path_width > p->window) : p->path_width != 0)
    return RSSM_ERR_INVALID_ARGUMENT;
  if ((p->track_slots == nullptr) != (p->track_steps == nullptr)) return RSSM_ERR_INVALID_ARGUMENT;
  if (vector_aligned && !aligned(p->state, 16)) return RSSM_ERR_INVALID_ARGUMENT;
  if (!state_pitches_ok(p->state_slot_stride, p->state_layer_stride, p->num_layers, p->num_slots, p->HV, p->V, p->K))
    return RSSM_ERR_INVALID_ARGUMENT;
  return RSSM_OK;
}

inline rssm_status replay_can_implement(const rssm_replay_params *p, bool vector_aligned) {
  if (!p) return RSSM_ERR_INVALID_ARGUMENT;
  const rssm_status st = spec_common_can_implement(p->batch, p->num_slots, p->num_layers, p->window, p->H, p->HV, p->K,
                                                   p->V, p->dtype, p->variant);
  if (st != RSSM_OK) return st;
  if (p->layer < 0 || p->layer >= p->num_layers) return RSSM_ERR_INVALID_ARGUMENT;
  if (!replay_impl_ok(p->impl, p->block_rows, p->window)) return RSSM_ERR_INVALID_ARGUMENT;
  if (!p->state || !p->ring_v || !p->ring_k || !p->ring_g || !p->ring_beta || !p->slots || !p->counts)
    return RSSM_ERR_INVALID_ARGUMENT;
  if (vector_aligned && !aligned(p->state, 16)) return RSSM_ERR_INVALID_ARGUMENT;
  if (!state_pitches_ok(p->state_slot_stride, p->state_layer_stride, p->num_layers, p->num_slots, p->HV, p->V, p->K))
    return RSSM_ERR_INVALID_ARGUMENT;
  return RSSM_OK;
}

// Kernel D and its materialise entry share one struct; `tokens` is false for materialise, which
// reads no token fields.
inline rssm_status decode_can_implement(const rssm_decode_params *p, bool vector_aligned, bool tokens = true) {
  if (!p) return RSSM_ERR_INVALID_ARGUMENT;
  const rssm_status st = spec_common_can_implement(p->batch, p->num_slots, p->num_layers, p->cache_len, p->H, p->HV,
                                                   p->K, p->V, p->dtype, p->variant);
  if (st != RSSM_OK) return st;
  if (p->cache_len > RSSM_MAX_CACHE_LEN) return RSSM_ERR_INVALID_ARGUMENT;
  if (p->layer < 0 || p->layer >= p->num_layers) return RSSM_ERR_INVALID_ARGUMENT;
  if (!p->state || !p->ring_d || !p->ring_k || !p->ring_g || !p->slots || !p->positions)
    return RSSM_ERR_INVALID_ARGUMENT;
  if (!tokens && !layer_grid_ok(p->V, p->num_layers)) return RSSM_ERR_INVALID_ARGUMENT;
  // D: DEFAULT or PREFETCH (token inputs before the record loop); materialise: DEFAULT.
  if (p->block_rows != 0 || (p->impl != RSSM_IMPL_DEFAULT && !(tokens && p->impl == RSSM_IMPL_PREFETCH)))
    return RSSM_ERR_INVALID_ARGUMENT;
  if (tokens) {
    const rssm_status t = token_fields_can_implement(p);
    if (t != RSSM_OK) return t;
  }
  if (vector_aligned && (!aligned(p->state, 16) || !aligned(p->ring_k, 16))) return RSSM_ERR_INVALID_ARGUMENT;
  if (!state_pitches_ok(p->state_slot_stride, p->state_layer_stride, p->num_layers, p->num_slots, p->HV, p->V, p->K))
    return RSSM_ERR_INVALID_ARGUMENT;
  return RSSM_OK;
}

}  // namespace rssm

namespace rssm {

// The cursor kernel: every array it touches present, sizes in range, a known op.
inline rssm_status cursors_can_implement(const rssm_cursor_params *p) {
  if (!p || !p->cursors || !p->slots) return RSSM_ERR_INVALID_ARGUMENT;
  if (p->batch < 1 || p->num_slots < 1 || p->cache_len < 1 || p->cache_len > RSSM_MAX_CACHE_LEN)
    return RSSM_ERR_INVALID_ARGUMENT;
  if (p->op != RSSM_CURSOR_SNAPSHOT && p->op != RSSM_CURSOR_ADVANCE && p->op != RSSM_CURSOR_RESET)
    return RSSM_ERR_INVALID_ARGUMENT;
  if (p->op != RSSM_CURSOR_RESET && !p->positions) return RSSM_ERR_INVALID_ARGUMENT;
  return RSSM_OK;
}

}  // namespace rssm

namespace rssm {

// VF: a verify with its ring (two halves: an even window of 2W, max_seqlen <= W), DEFAULT only, and
// the pending table.
inline rssm_status verify_fold_can_implement(const rssm_verify_fold_params *p, bool vector_aligned) {
  if (!p) return RSSM_ERR_INVALID_ARGUMENT;
  const rssm_verify_params &v = p->verify;
  const rssm_status st = verify_can_implement(&v, vector_aligned);
  if (st != RSSM_OK) return st;
  if (!v.ring_v || !p->pending) return RSSM_ERR_INVALID_ARGUMENT;
  if (v.window % 2 != 0 || v.max_seqlen > v.window / 2 || v.window / 2 > RSSM_MAX_VERIFY_WINDOW)
    return RSSM_ERR_INVALID_ARGUMENT;
  if (v.impl != RSSM_IMPL_DEFAULT) return RSSM_ERR_INVALID_ARGUMENT;
  if ((p->track_slots == nullptr) != (p->track_steps == nullptr)) return RSSM_ERR_INVALID_ARGUMENT;
  return RSSM_OK;
}

// The pending-table kernel: its arrays for the op, sizes in range, a known op.
inline rssm_status defer_can_implement(const rssm_defer_params *p) {
  if (!p || !p->pending || !p->slots) return RSSM_ERR_INVALID_ARGUMENT;
  if (p->batch < 1 || p->batch > RSSM_MAX_BATCH || p->num_slots < 1 || p->window < 1 ||
      p->window > RSSM_MAX_VERIFY_WINDOW)
    return RSSM_ERR_INVALID_ARGUMENT;
  switch (p->op) {
    case RSSM_DEFER_COMMIT:
      if ((p->accept_lens == nullptr) == (p->accept_paths == nullptr)) return RSSM_ERR_INVALID_ARGUMENT;
      if (p->accept_paths ? (p->path_width < 1 || p->path_width > p->window) : p->path_width != 0)
        return RSSM_ERR_INVALID_ARGUMENT;
      return RSSM_OK;
    case RSSM_DEFER_GATHER: return p->paths ? RSSM_OK : RSSM_ERR_INVALID_ARGUMENT;
    case RSSM_DEFER_RESET: return RSSM_OK;
    default: return RSSM_ERR_INVALID_ARGUMENT;
  }
}

}  // namespace rssm
