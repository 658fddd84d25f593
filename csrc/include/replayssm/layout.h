// Pins the ABI of every params struct. src/ffi.rs asserts the same numbers on the Rust side.
#pragma once

#include <stddef.h>

#include "replayssm/replayssm.h"

#define RSSM_ASSERT_OFFSET(type, field, off) static_assert(offsetof(type, field) == (off), #type "." #field " moved")

static_assert(sizeof(rssm_recurrent_params) == 224, "rssm_recurrent_params size changed");
RSSM_ASSERT_OFFSET(rssm_recurrent_params, q, 0);
RSSM_ASSERT_OFFSET(rssm_recurrent_params, k, 8);
RSSM_ASSERT_OFFSET(rssm_recurrent_params, v, 16);
RSSM_ASSERT_OFFSET(rssm_recurrent_params, a, 24);
RSSM_ASSERT_OFFSET(rssm_recurrent_params, b, 32);
RSSM_ASSERT_OFFSET(rssm_recurrent_params, A_log, 40);
RSSM_ASSERT_OFFSET(rssm_recurrent_params, dt_bias, 48);
RSSM_ASSERT_OFFSET(rssm_recurrent_params, g, 56);
RSSM_ASSERT_OFFSET(rssm_recurrent_params, beta, 64);
RSSM_ASSERT_OFFSET(rssm_recurrent_params, cu_seqlens, 72);
RSSM_ASSERT_OFFSET(rssm_recurrent_params, slots, 80);
RSSM_ASSERT_OFFSET(rssm_recurrent_params, state, 88);
RSSM_ASSERT_OFFSET(rssm_recurrent_params, snapshots, 96);
RSSM_ASSERT_OFFSET(rssm_recurrent_params, o, 104);
RSSM_ASSERT_OFFSET(rssm_recurrent_params, error_word, 112);
RSSM_ASSERT_OFFSET(rssm_recurrent_params, q_stride, 120);
RSSM_ASSERT_OFFSET(rssm_recurrent_params, k_stride, 128);
RSSM_ASSERT_OFFSET(rssm_recurrent_params, v_stride, 136);
RSSM_ASSERT_OFFSET(rssm_recurrent_params, a_stride, 144);
RSSM_ASSERT_OFFSET(rssm_recurrent_params, b_stride, 152);
RSSM_ASSERT_OFFSET(rssm_recurrent_params, o_stride, 160);
RSSM_ASSERT_OFFSET(rssm_recurrent_params, num_tokens, 168);
RSSM_ASSERT_OFFSET(rssm_recurrent_params, batch, 172);
RSSM_ASSERT_OFFSET(rssm_recurrent_params, max_seqlen, 176);
RSSM_ASSERT_OFFSET(rssm_recurrent_params, num_slots, 180);
RSSM_ASSERT_OFFSET(rssm_recurrent_params, H, 184);
RSSM_ASSERT_OFFSET(rssm_recurrent_params, HV, 188);
RSSM_ASSERT_OFFSET(rssm_recurrent_params, K, 192);
RSSM_ASSERT_OFFSET(rssm_recurrent_params, V, 196);
RSSM_ASSERT_OFFSET(rssm_recurrent_params, scale, 200);
RSSM_ASSERT_OFFSET(rssm_recurrent_params, dtype, 204);
RSSM_ASSERT_OFFSET(rssm_recurrent_params, variant, 208);
RSSM_ASSERT_OFFSET(rssm_recurrent_params, qk_l2norm, 212);
RSSM_ASSERT_OFFSET(rssm_recurrent_params, write_state, 216);
RSSM_ASSERT_OFFSET(rssm_recurrent_params, reserved, 220);
