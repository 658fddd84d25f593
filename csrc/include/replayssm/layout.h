// Generated from src/ffi.rs's layout table by tests/header.rs; do not edit (regenerate with
// `REPLAYSSM_BLESS=1 cargo test --test header`). Pins the ABI of every params struct on the
// C++ side with the numbers the Rust side asserts.
#pragma once

#include <stddef.h>

#include "replayssm/replayssm.h"

#define RSSM_ASSERT_OFFSET(type, field, off) static_assert(offsetof(type, field) == (off), #type "." #field " moved")

static_assert(sizeof(rssm_base_params) == 96, "rssm_base_params size changed");
RSSM_ASSERT_OFFSET(rssm_base_params, state, 0);
RSSM_ASSERT_OFFSET(rssm_base_params, slots, 8);
RSSM_ASSERT_OFFSET(rssm_base_params, error_word, 16);
RSSM_ASSERT_OFFSET(rssm_base_params, state_slot_stride, 24);
RSSM_ASSERT_OFFSET(rssm_base_params, state_layer_stride, 32);
RSSM_ASSERT_OFFSET(rssm_base_params, batch, 40);
RSSM_ASSERT_OFFSET(rssm_base_params, num_slots, 44);
RSSM_ASSERT_OFFSET(rssm_base_params, num_layers, 48);
RSSM_ASSERT_OFFSET(rssm_base_params, layer, 52);
RSSM_ASSERT_OFFSET(rssm_base_params, H, 56);
RSSM_ASSERT_OFFSET(rssm_base_params, HV, 60);
RSSM_ASSERT_OFFSET(rssm_base_params, K, 64);
RSSM_ASSERT_OFFSET(rssm_base_params, V, 68);
RSSM_ASSERT_OFFSET(rssm_base_params, dtype, 72);
RSSM_ASSERT_OFFSET(rssm_base_params, variant, 76);
RSSM_ASSERT_OFFSET(rssm_base_params, qk_l2norm, 80);
RSSM_ASSERT_OFFSET(rssm_base_params, impl, 84);
RSSM_ASSERT_OFFSET(rssm_base_params, block_rows, 88);
RSSM_ASSERT_OFFSET(rssm_base_params, reserved, 92);

static_assert(sizeof(rssm_token_params) == 136, "rssm_token_params size changed");
RSSM_ASSERT_OFFSET(rssm_token_params, q, 0);
RSSM_ASSERT_OFFSET(rssm_token_params, k, 8);
RSSM_ASSERT_OFFSET(rssm_token_params, v, 16);
RSSM_ASSERT_OFFSET(rssm_token_params, a, 24);
RSSM_ASSERT_OFFSET(rssm_token_params, b, 32);
RSSM_ASSERT_OFFSET(rssm_token_params, A_log, 40);
RSSM_ASSERT_OFFSET(rssm_token_params, dt_bias, 48);
RSSM_ASSERT_OFFSET(rssm_token_params, g, 56);
RSSM_ASSERT_OFFSET(rssm_token_params, beta, 64);
RSSM_ASSERT_OFFSET(rssm_token_params, o, 72);
RSSM_ASSERT_OFFSET(rssm_token_params, q_stride, 80);
RSSM_ASSERT_OFFSET(rssm_token_params, k_stride, 88);
RSSM_ASSERT_OFFSET(rssm_token_params, v_stride, 96);
RSSM_ASSERT_OFFSET(rssm_token_params, a_stride, 104);
RSSM_ASSERT_OFFSET(rssm_token_params, b_stride, 112);
RSSM_ASSERT_OFFSET(rssm_token_params, o_stride, 120);
RSSM_ASSERT_OFFSET(rssm_token_params, scale, 128);
RSSM_ASSERT_OFFSET(rssm_token_params, lower_bound, 132);

static_assert(sizeof(rssm_ring_params) == 40, "rssm_ring_params size changed");
RSSM_ASSERT_OFFSET(rssm_ring_params, v, 0);
RSSM_ASSERT_OFFSET(rssm_ring_params, k, 8);
RSSM_ASSERT_OFFSET(rssm_ring_params, g, 16);
RSSM_ASSERT_OFFSET(rssm_ring_params, beta, 24);
RSSM_ASSERT_OFFSET(rssm_ring_params, window, 32);
RSSM_ASSERT_OFFSET(rssm_ring_params, reserved, 36);

static_assert(sizeof(rssm_recurrent_params) == 264, "rssm_recurrent_params size changed");
RSSM_ASSERT_OFFSET(rssm_recurrent_params, base, 0);
RSSM_ASSERT_OFFSET(rssm_recurrent_params, tokens, 96);
RSSM_ASSERT_OFFSET(rssm_recurrent_params, cu_seqlens, 232);
RSSM_ASSERT_OFFSET(rssm_recurrent_params, snapshots, 240);
RSSM_ASSERT_OFFSET(rssm_recurrent_params, num_tokens, 248);
RSSM_ASSERT_OFFSET(rssm_recurrent_params, max_seqlen, 252);
RSSM_ASSERT_OFFSET(rssm_recurrent_params, write_state, 256);
RSSM_ASSERT_OFFSET(rssm_recurrent_params, record_dtype, 260);

static_assert(sizeof(rssm_verify_params) == 296, "rssm_verify_params size changed");
RSSM_ASSERT_OFFSET(rssm_verify_params, base, 0);
RSSM_ASSERT_OFFSET(rssm_verify_params, tokens, 96);
RSSM_ASSERT_OFFSET(rssm_verify_params, ring, 232);
RSSM_ASSERT_OFFSET(rssm_verify_params, cu_seqlens, 272);
RSSM_ASSERT_OFFSET(rssm_verify_params, parent, 280);
RSSM_ASSERT_OFFSET(rssm_verify_params, num_tokens, 288);
RSSM_ASSERT_OFFSET(rssm_verify_params, max_seqlen, 292);

static_assert(sizeof(rssm_fold_params) == 176, "rssm_fold_params size changed");
RSSM_ASSERT_OFFSET(rssm_fold_params, base, 0);
RSSM_ASSERT_OFFSET(rssm_fold_params, ring, 96);
RSSM_ASSERT_OFFSET(rssm_fold_params, accept_lens, 136);
RSSM_ASSERT_OFFSET(rssm_fold_params, track_slots, 144);
RSSM_ASSERT_OFFSET(rssm_fold_params, track_steps, 152);
RSSM_ASSERT_OFFSET(rssm_fold_params, accept_paths, 160);
RSSM_ASSERT_OFFSET(rssm_fold_params, path_width, 168);
RSSM_ASSERT_OFFSET(rssm_fold_params, reserved, 172);

static_assert(sizeof(rssm_replay_params) == 144, "rssm_replay_params size changed");
RSSM_ASSERT_OFFSET(rssm_replay_params, base, 0);
RSSM_ASSERT_OFFSET(rssm_replay_params, ring, 96);
RSSM_ASSERT_OFFSET(rssm_replay_params, counts, 136);

static_assert(sizeof(rssm_decode_params) == 280, "rssm_decode_params size changed");
RSSM_ASSERT_OFFSET(rssm_decode_params, base, 0);
RSSM_ASSERT_OFFSET(rssm_decode_params, tokens, 96);
RSSM_ASSERT_OFFSET(rssm_decode_params, positions, 232);
RSSM_ASSERT_OFFSET(rssm_decode_params, force_flush, 240);
RSSM_ASSERT_OFFSET(rssm_decode_params, ring_d, 248);
RSSM_ASSERT_OFFSET(rssm_decode_params, ring_k, 256);
RSSM_ASSERT_OFFSET(rssm_decode_params, ring_g, 264);
RSSM_ASSERT_OFFSET(rssm_decode_params, cache_len, 272);
RSSM_ASSERT_OFFSET(rssm_decode_params, ring_dtype, 276);

static_assert(sizeof(rssm_cursor_params) == 56, "rssm_cursor_params size changed");
RSSM_ASSERT_OFFSET(rssm_cursor_params, cursors, 0);
RSSM_ASSERT_OFFSET(rssm_cursor_params, slots, 8);
RSSM_ASSERT_OFFSET(rssm_cursor_params, positions, 16);
RSSM_ASSERT_OFFSET(rssm_cursor_params, force_flush, 24);
RSSM_ASSERT_OFFSET(rssm_cursor_params, error_word, 32);
RSSM_ASSERT_OFFSET(rssm_cursor_params, batch, 40);
RSSM_ASSERT_OFFSET(rssm_cursor_params, num_slots, 44);
RSSM_ASSERT_OFFSET(rssm_cursor_params, cache_len, 48);
RSSM_ASSERT_OFFSET(rssm_cursor_params, op, 52);

static_assert(sizeof(rssm_verify_fold_params) == 320, "rssm_verify_fold_params size changed");
RSSM_ASSERT_OFFSET(rssm_verify_fold_params, verify, 0);
RSSM_ASSERT_OFFSET(rssm_verify_fold_params, pending, 296);
RSSM_ASSERT_OFFSET(rssm_verify_fold_params, track_slots, 304);
RSSM_ASSERT_OFFSET(rssm_verify_fold_params, track_steps, 312);

static_assert(sizeof(rssm_defer_params) == 72, "rssm_defer_params size changed");
RSSM_ASSERT_OFFSET(rssm_defer_params, pending, 0);
RSSM_ASSERT_OFFSET(rssm_defer_params, slots, 8);
RSSM_ASSERT_OFFSET(rssm_defer_params, accept_lens, 16);
RSSM_ASSERT_OFFSET(rssm_defer_params, accept_paths, 24);
RSSM_ASSERT_OFFSET(rssm_defer_params, paths, 32);
RSSM_ASSERT_OFFSET(rssm_defer_params, error_word, 40);
RSSM_ASSERT_OFFSET(rssm_defer_params, batch, 48);
RSSM_ASSERT_OFFSET(rssm_defer_params, num_slots, 52);
RSSM_ASSERT_OFFSET(rssm_defer_params, window, 56);
RSSM_ASSERT_OFFSET(rssm_defer_params, path_width, 60);
RSSM_ASSERT_OFFSET(rssm_defer_params, op, 64);
RSSM_ASSERT_OFFSET(rssm_defer_params, reserved, 68);

static_assert(sizeof(rssm_verify_buffered_params) == 312, "rssm_verify_buffered_params size changed");
RSSM_ASSERT_OFFSET(rssm_verify_buffered_params, verify, 0);
RSSM_ASSERT_OFFSET(rssm_verify_buffered_params, cursors, 296);
RSSM_ASSERT_OFFSET(rssm_verify_buffered_params, ring_u, 304);

static_assert(sizeof(rssm_buffered_params) == 64, "rssm_buffered_params size changed");
RSSM_ASSERT_OFFSET(rssm_buffered_params, cursors, 0);
RSSM_ASSERT_OFFSET(rssm_buffered_params, slots, 8);
RSSM_ASSERT_OFFSET(rssm_buffered_params, accept_lens, 16);
RSSM_ASSERT_OFFSET(rssm_buffered_params, flush_lens, 24);
RSSM_ASSERT_OFFSET(rssm_buffered_params, error_word, 32);
RSSM_ASSERT_OFFSET(rssm_buffered_params, batch, 40);
RSSM_ASSERT_OFFSET(rssm_buffered_params, num_slots, 44);
RSSM_ASSERT_OFFSET(rssm_buffered_params, cache_len, 48);
RSSM_ASSERT_OFFSET(rssm_buffered_params, window, 52);
RSSM_ASSERT_OFFSET(rssm_buffered_params, op, 56);
RSSM_ASSERT_OFFSET(rssm_buffered_params, reserved, 60);
