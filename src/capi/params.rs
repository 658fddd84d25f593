//! The params structs of the C ABI (`include/replayssm.h`), one per entry point, composed as the
//! kernel layer's `rssm_*_params` are (the comments of `csrc/include/replayssm/replayssm.h`
//! apply): an 8-byte header, `struct_size` (= `sizeof` the struct the caller compiled against)
//! and `flags` (reserved, 0); then the params base [`replayssm_base_params`] (pool, rows, heads),
//! the token part [`replayssm_token_params`] (R, V, D) and the spec ring [`replayssm_ring_params`]
//! (V, F, P); then the kernel's own fields. VF and VB hold a whole [`replayssm_verify_params`]. The
//! implementation fields of the kernel layer's base (`impl`, `block_rows`) are not part of the
//! ABI: the library picks them per call (src/tuning.rs). ABI 3 accepts exactly its own sizes.
#![allow(non_camel_case_types, non_snake_case)]

use std::ffi::c_void;

use crate::ffi;

/// The params base every kernel over the checkpoint pool takes: the pool
/// (`[num_layers, num_slots, HV, V, K]` f32, K contiguous; slot s of layer l at
/// `l * state_layer_stride + s * state_slot_stride` elements, 0 = packed), the rows (`slots[b]`,
/// -1 = null row), the heads and the device error word.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct replayssm_base_params {
    /// The pool; kernel V only reads it.
    pub state: *mut f32,
    pub slots: *const i32,
    pub error_word: *mut u32,
    /// Elements from one slot's checkpoint to the next; 0 = packed (`HV*V*K`). An engine's
    /// page-major pool (one slot holds every layer) sets it and `state_layer_stride`.
    pub state_slot_stride: i64,
    /// Elements from one layer's checkpoints to the next; 0 = packed (`num_slots` slot pitches).
    pub state_layer_stride: i64,
    pub batch: i32,
    pub num_slots: i32,
    /// Kernel R: 1 (its pool has one layer).
    pub num_layers: i32,
    /// The layer a launch works on (R, F and materialise: 0).
    pub layer: i32,
    pub H: i32,
    pub HV: i32,
    pub K: i32,
    pub V: i32,
    pub dtype: i32,
    pub variant: i32,
    pub qk_l2norm: i32,
    pub reserved: i32,
}

/// The token inputs and outputs of R, V and D. Gate: raw (`a`, `b`, `A_log`, `dt_bias`; `g`,
/// `beta` NULL) or precomputed (`g`, `beta`). Strides count elements per token (D: per row).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct replayssm_token_params {
    pub q: *const c_void,
    pub k: *const c_void,
    pub v: *const c_void,
    pub a: *const c_void,
    pub b: *const c_void,
    pub A_log: *const f32,
    pub dt_bias: *const f32,
    pub g: *const f32,
    pub beta: *const f32,
    pub o: *mut c_void,
    pub q_stride: i64,
    pub k_stride: i64,
    pub v_stride: i64,
    pub a_stride: i64,
    pub b_stride: i64,
    pub o_stride: i64,
    pub scale: f32,
    /// The raw gate's form: 0 = softplus (`g = -exp(A_log) softplus(a + dt_bias)`), finite and
    /// negative = the safe gate (`g = lower_bound sigmoid(exp(A_log) (a + dt_bias))`, Kimi's KDA;
    /// SGLang's and vLLM's `lower_bound`). 0 with a precomputed gate. (ABI 3 before this field
    /// had it reserved, 0.)
    pub lower_bound: f32,
}

/// The spec ring (`[num_layers, num_slots, ..., window, ...]`, packed): raw v and k (act dtype),
/// log decay g and beta (f32). V writes it (all four set, or all NULL); F and P read it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct replayssm_ring_params {
    pub v: *mut c_void,
    pub k: *mut c_void,
    pub g: *mut f32,
    pub beta: *mut f32,
    pub window: i32,
    pub reserved: i32,
}

/// Kernel R (recurrent baseline) of `replayssm_recurrent`.
///
/// Tokens of request r are `cu_seqlens[r]..cu_seqlens[r+1]`; checkpoints `state[slots[r]]`
/// (`[num_slots, HV, V, K]` f32, K contiguous); slot -1 = null row. Gate: raw (`a`, `b`, `A_log`,
/// `dt_bias`; `g`, `beta` NULL) or precomputed (`g`, `beta`). Strides count elements per token.
/// R's pool is one layer: `base.num_layers = 1`, `base.layer = 0`, `base.state_layer_stride = 0`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct replayssm_recurrent_params {
    pub struct_size: u32,
    pub flags: u32,
    pub base: replayssm_base_params,
    pub tokens: replayssm_token_params,
    pub cu_seqlens: *const i32,
    pub snapshots: *mut f32,
    pub num_tokens: i32,
    pub max_seqlen: i32,
    pub write_state: i32,
    /// `REPLAYSSM_DTYPE_F32` (0): the f32 update. The activations' f16/bf16: each token's
    /// corrected delta `u` and key are rounded to it before the rank-1 update, as a decode ring
    /// of that dtype holds them, so the state is the one `replayssm_decode` with such a ring
    /// flushes, bit for bit. (Reserved and required to be 0 before this field existed: an older
    /// library refuses a nonzero value with `reserved = …: it must be 0`.)
    pub record_dtype: i32,
}

/// Kernel V (chunked verify) of `replayssm_verify`; `parent` non-NULL selects tree verify (VT).
///
/// Reads the checkpoint of layer `layer` (never writes it), writes every window position's output
/// and, when the four ring pointers are set, the raw inputs of positions below `window`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct replayssm_verify_params {
    pub struct_size: u32,
    pub flags: u32,
    pub base: replayssm_base_params,
    pub tokens: replayssm_token_params,
    /// `window` = W, ring positions per slot (1 without a ring).
    pub ring: replayssm_ring_params,
    pub cu_seqlens: *const i32,
    pub parent: *const i32,
    pub num_tokens: i32,
    pub max_seqlen: i32,
}

/// Kernel F (fold-every-commit, all layers) of `replayssm_fold`; `accept_paths` instead of
/// `accept_lens` selects the path fold (FT). `accept_lens` counts the bonus token.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct replayssm_fold_params {
    pub struct_size: u32,
    pub flags: u32,
    pub base: replayssm_base_params,
    pub ring: replayssm_ring_params,
    pub accept_lens: *const i32,
    pub track_slots: *const i32,
    pub track_steps: *const i32,
    pub accept_paths: *const i32,
    pub path_width: i32,
    pub reserved: i32,
}

/// Kernel P (fp32 checkpoint replay of one layer) of `replayssm_replay`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct replayssm_replay_params {
    pub struct_size: u32,
    pub flags: u32,
    pub base: replayssm_base_params,
    pub ring: replayssm_ring_params,
    pub counts: *const i32,
}

/// Kernel D (buffered decode of one layer, one token per row) of `replayssm_decode`, and of
/// `replayssm_decode_materialize` (which reads only state, the ring, slots, positions and sizes).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct replayssm_decode_params {
    pub struct_size: u32,
    pub flags: u32,
    pub base: replayssm_base_params,
    pub tokens: replayssm_token_params,
    pub positions: *const i32,
    pub force_flush: *const i32,
    /// `[NL, NS, HV, L, V]` of `ring_dtype`.
    pub ring_d: *mut c_void,
    /// `[NL, NS, H, L, K]` of `ring_dtype`.
    pub ring_k: *mut c_void,
    /// `[NL, NS, HV, L]` (KDA `[.., K]`) f32.
    pub ring_g: *mut f32,
    pub cache_len: i32,
    /// `replayssm_dtype` of `ring_d` and `ring_k`: `REPLAYSSM_DTYPE_F32` (0), or the activations'
    /// f16/bf16 (records rounded to nearest even; the flush is then the state of
    /// `replayssm_recurrent` with `record_dtype` set alike). The materialise entry takes any.
    /// (Reserved and required to be 0 before this field existed: an older library refuses a
    /// nonzero value with `reserved = …: it must be 0`.)
    pub ring_dtype: i32,
}

/// The buffered-decode cursors of `replayssm_decode_cursors`: `op` is a `replayssm_cursor_op`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct replayssm_cursor_params {
    pub struct_size: u32,
    pub flags: u32,
    pub cursors: *mut i32,
    pub slots: *const i32,
    pub positions: *mut i32,
    pub force_flush: *const i32,
    pub error_word: *mut u32,
    pub batch: i32,
    pub num_slots: i32,
    pub cache_len: i32,
    pub op: i32,
}

/// What `replayssm_decode_cursors` does to each row (see the kernel layer's `rssm_cursor_op`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum replayssm_cursor_op {
    /// `positions[b] = cursors[slots[b]]`, before the step's first layer.
    REPLAYSSM_CURSOR_SNAPSHOT = 0,
    /// After the step's last layer: flushed rows back to 0, the others `positions[b] + 1`.
    REPLAYSSM_CURSOR_ADVANCE = 1,
    /// `cursors[slots[b]] = 0`: the slot was (re)allocated or freed.
    REPLAYSSM_CURSOR_RESET = 2,
}

/// Kernel VF (deferred fold: fold-then-verify of one layer) of `replayssm_verify_fold`: a whole
/// `replayssm_verify_params` (the verify of the new window; the ring is required, its `window` is
/// 2 W: two halves), then the pending table `[num_slots, 2 + W]` and F's track arrays (optional).
/// The base's `state` is written: the fold.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct replayssm_verify_fold_params {
    pub struct_size: u32,
    pub flags: u32,
    /// The verify of the new window (its own header included); the ring is required and its
    /// `window` is 2 W.
    pub verify: replayssm_verify_params,
    pub pending: *const i32,
    pub track_slots: *const i32,
    pub track_steps: *const i32,
}

/// The deferred fold's pending table of `replayssm_defer`: `op` is a `replayssm_defer_op`;
/// `window` is W (one half of the ring).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct replayssm_defer_params {
    pub struct_size: u32,
    pub flags: u32,
    pub pending: *mut i32,
    pub slots: *const i32,
    pub accept_lens: *const i32,
    pub accept_paths: *const i32,
    pub paths: *mut i32,
    pub error_word: *mut u32,
    pub batch: i32,
    pub num_slots: i32,
    pub window: i32,
    pub path_width: i32,
    pub op: i32,
    pub reserved: i32,
}

/// What `replayssm_defer` does to each row (see the kernel layer's `rssm_defer_op`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum replayssm_defer_op {
    /// Once per step, after the step's last layer's VF: the accepted records of the window VF wrote
    /// are pending.
    REPLAYSSM_DEFER_COMMIT = 0,
    /// `paths[b]` = the slot's pending ring positions, for `replayssm_fold`'s path mode (a flush).
    REPLAYSSM_DEFER_GATHER = 1,
    /// The slot has nothing pending (after a flush, or handed to a new request).
    REPLAYSSM_DEFER_RESET = 2,
}

/// Kernel VB (buffered speculative verify of one layer) of `replayssm_verify_buffered`: a whole
/// `replayssm_verify_params` (the verify of the new window, as VF's; the ring is required, its
/// `window` is the cache length L (at most `REPLAYSSM_MAX_BUFFERED_CACHE_LEN`), `parent` NULL: a
/// linear chain), then the cursors `[num_slots]` (each slot's history length h, shared by all
/// layers, written only by `replayssm_buffered`) and the corrections `ring_u`
/// (`[num_layers, num_slots, HV, L, V]` f32, written and read by VB only). The base's `state` is
/// only read.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct replayssm_verify_buffered_params {
    pub struct_size: u32,
    pub flags: u32,
    /// The verify of the new window (its own header included); the ring is required and its
    /// `window` is L.
    pub verify: replayssm_verify_params,
    pub cursors: *const i32,
    pub ring_u: *mut f32,
}

/// The buffered speculative mode's cursors of `replayssm_buffered`: `op` is a
/// `replayssm_buffered_op`; `cache_len` is L (ring positions per slot), `window` T (the step's
/// longest draft window). COMMIT and FLUSH write every row's `flush_lens[b]`: kernel F's
/// `accept_lens` (`replayssm_fold` on the L ring) folds exactly the rows that flush.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct replayssm_buffered_params {
    pub struct_size: u32,
    pub flags: u32,
    pub cursors: *mut i32,
    pub slots: *const i32,
    /// COMMIT: `[batch]`; NULL otherwise.
    pub accept_lens: *const i32,
    /// COMMIT, FLUSH: `[batch]` out; RESET: NULL.
    pub flush_lens: *mut i32,
    pub error_word: *mut u32,
    pub batch: i32,
    pub num_slots: i32,
    pub cache_len: i32,
    pub window: i32,
    pub op: i32,
    pub reserved: i32,
}

/// What `replayssm_buffered` does to each row (see the kernel layer's `rssm_buffered_op`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum replayssm_buffered_op {
    /// Once per step, after the step's last layer's VB: the history grows by `accept_lens[b]`; a
    /// row whose next window would not fit flushes (`flush_lens[b]` = its history, cursor 0).
    REPLAYSSM_BUFFERED_COMMIT = 0,
    /// `flush_lens[b]` = the slot's history, cursor 0: then `replayssm_fold` makes the checkpoint
    /// current (before it is read, copied or handed out). Between steps only.
    REPLAYSSM_BUFFERED_FLUSH = 1,
    /// Cursor 0: the slot was handed to a new request, or freed; its history is dropped.
    REPLAYSSM_BUFFERED_RESET = 2,
}

/// Copies the fields both structs share (same names) into the kernel struct.
macro_rules! copy_fields {
    ($src:expr => $ty:path { $($f:ident),* $(,)? }) => {{
        let s = $src;
        #[allow(clippy::needless_update)] // the kernel base's implementation fields need it
        $ty { $($f: s.$f,)* ..Default::default() }
    }};
}

/// The kernel layer's params base (`impl`, `block_rows` left at DEFAULT: tuning picks them).
fn base(b: &replayssm_base_params) -> ffi::rssm_base_params {
    copy_fields!(b => ffi::rssm_base_params {
        state, slots, error_word, state_slot_stride, state_layer_stride, batch, num_slots,
        num_layers, layer, H, HV, K, V, dtype, variant, qk_l2norm,
    })
}

fn tokens(t: &replayssm_token_params) -> ffi::rssm_token_params {
    copy_fields!(t => ffi::rssm_token_params {
        q, k, v, a, b, A_log, dt_bias, g, beta, o, q_stride, k_stride, v_stride, a_stride,
        b_stride, o_stride, scale, lower_bound,
    })
}

fn ring(r: &replayssm_ring_params) -> ffi::rssm_ring_params {
    copy_fields!(r => ffi::rssm_ring_params { v, k, g, beta, window, reserved })
}

/// Gives each ABI struct its kernel struct (`kernel()`: the base and its parts converted once,
/// the kernel's own fields copied by name) and a `Default` (every field zero / NULL,
/// `struct_size` set).
macro_rules! mirror {
    ($abi:ident => $kernel:ident { $($part:ident: $conv:ident),* ; $($f:ident),* $(,)? }) => {
        impl $abi {
            /// The kernel layer's struct of these params (what the C ABI hands its launcher;
            /// tests drive the kernel layer's emulated launchers with it, without host checks).
            pub fn kernel(&self) -> ffi::$kernel {
                ffi::$kernel { $($part: $conv(&self.$part),)* $($f: self.$f,)* }
            }
        }
        impl Default for $abi {
            fn default() -> Self {
                // SAFETY: every field is an integer, a float or a raw pointer: all-zero is valid.
                let mut p: $abi = unsafe { std::mem::zeroed() };
                p.struct_size = std::mem::size_of::<$abi>() as u32;
                p
            }
        }
    };
}

/// Every field zero / NULL (a part has no `struct_size`).
macro_rules! zeroed_default {
    ($($t:ident),*) => {$(
        impl Default for $t {
            fn default() -> Self {
                // SAFETY: every field is an integer, a float or a raw pointer: all-zero is valid.
                unsafe { std::mem::zeroed() }
            }
        }
    )*};
}
zeroed_default!(replayssm_base_params, replayssm_token_params, replayssm_ring_params);

fn verify(v: &replayssm_verify_params) -> ffi::rssm_verify_params {
    v.kernel()
}

mirror!(replayssm_recurrent_params => rssm_recurrent_params {
    base: base, tokens: tokens; cu_seqlens, snapshots, num_tokens, max_seqlen, write_state, record_dtype,
});
mirror!(replayssm_verify_params => rssm_verify_params {
    base: base, tokens: tokens, ring: ring; cu_seqlens, parent, num_tokens, max_seqlen,
});
mirror!(replayssm_fold_params => rssm_fold_params {
    base: base, ring: ring; accept_lens, track_slots, track_steps, accept_paths, path_width, reserved,
});
mirror!(replayssm_replay_params => rssm_replay_params { base: base, ring: ring; counts });
mirror!(replayssm_decode_params => rssm_decode_params {
    base: base, tokens: tokens; positions, force_flush, ring_d, ring_k, ring_g, cache_len, ring_dtype,
});
mirror!(replayssm_verify_fold_params => rssm_verify_fold_params {
    verify: verify; pending, track_slots, track_steps,
});
mirror!(replayssm_verify_buffered_params => rssm_verify_buffered_params {
    verify: verify; cursors, ring_u,
});
mirror!(replayssm_buffered_params => rssm_buffered_params {
    ; cursors, slots, accept_lens, flush_lens, error_word, batch, num_slots, cache_len, window, op, reserved,
});
mirror!(replayssm_cursor_params => rssm_cursor_params {
    ; cursors, slots, positions, force_flush, error_word, batch, num_slots, cache_len, op,
});
mirror!(replayssm_defer_params => rssm_defer_params {
    ; pending, slots, accept_lens, accept_paths, paths, error_word, batch, num_slots, window,
    path_width, op, reserved,
});

// The ABI structs are the kernel structs behind the 8-byte header, the base without the kernel
// layer's implementation fields (`impl`, `block_rows`: the library picks them per call,
// src/tuning.rs), pinned here; the header generated from these definitions is checked in CI.
const _: () = {
    use std::mem::size_of;
    const IMPL_FIELDS: usize = 8;
    assert!(size_of::<replayssm_base_params>() == size_of::<ffi::rssm_base_params>() - IMPL_FIELDS);
    assert!(size_of::<replayssm_token_params>() == size_of::<ffi::rssm_token_params>());
    assert!(size_of::<replayssm_ring_params>() == size_of::<ffi::rssm_ring_params>());
    assert!(size_of::<replayssm_recurrent_params>() == 8 + size_of::<ffi::rssm_recurrent_params>() - IMPL_FIELDS);
    assert!(size_of::<replayssm_verify_params>() == 8 + size_of::<ffi::rssm_verify_params>() - IMPL_FIELDS);
    assert!(size_of::<replayssm_fold_params>() == 8 + size_of::<ffi::rssm_fold_params>() - IMPL_FIELDS);
    assert!(size_of::<replayssm_replay_params>() == 8 + size_of::<ffi::rssm_replay_params>() - IMPL_FIELDS);
    assert!(size_of::<replayssm_decode_params>() == 8 + size_of::<ffi::rssm_decode_params>() - IMPL_FIELDS);
    assert!(size_of::<replayssm_cursor_params>() == 8 + size_of::<ffi::rssm_cursor_params>());
    // VF nests a whole verify, header included.
    assert!(size_of::<replayssm_verify_fold_params>() == 8 + size_of::<ffi::rssm_verify_fold_params>());
    assert!(size_of::<replayssm_defer_params>() == 8 + size_of::<ffi::rssm_defer_params>());
    // VB nests a whole verify too.
    assert!(size_of::<replayssm_verify_buffered_params>() == 8 + size_of::<ffi::rssm_verify_buffered_params>());
    assert!(size_of::<replayssm_buffered_params>() == 8 + size_of::<ffi::rssm_buffered_params>());
};
