//! replayssm: hand-written CUDA kernels for ReplaySSM (speculative decoding on linear-attention
//! layers with an fp32 checkpoint and a ring of raw inputs), with a safe Rust runtime, a CPU
//! SIMT emulator that runs the same kernel sources, and an f64 reference. See `SPEC.md` in the
//! shared folder and the README. The tools built on it (CLI, case files, bench, plots,
//! workloads) are the `replayssm-tools` crate (`tools/`), which an engine does not link.
//!
//! Layout, from the bottom up (no module uses one above it: `tests/layout.rs`):
//! - [`ffi`] (the kernel layer's C header, bindgen), [`limits`] (its defines), [`backend`],
//!   [`dtype`], [`problem`] (head dims, variant, gate), [`error`], [`checks`] (every host check),
//!   [`config`] (capability gates) and [`engine_args`] (SGLang's flags);
//! - [`runtime`]: launch plumbing, CUDA runtime, emulator;
//! - [`state`]: [`CheckpointPool`], [`SpecRing`], [`DecodeRing`], [`DeferredRing`];
//! - [`tokens`]: the token inputs R, V and D share; [`reference`]: f32/f64 SPEC §3 maths;
//! - [`kernels`]: one module per kernel, named like its launcher `csrc/kernels/<name>.cu`:
//!   [`kernels::recurrent`] (R), [`kernels::verify`] (V), [`kernels::fold`] (F),
//!   [`kernels::replay`] (P), [`kernels::decode`] (D, materialise), [`kernels::tree`] (VT, FT),
//!   [`kernels::verify_fold`] (VF, the deferred fold);
//! - [`capi`]: the C ABI (header `include/replayssm.h`), [`interop`]: cudarc views for it.

pub mod backend;
pub mod build_info;
pub mod capi;
pub mod checks;
pub mod config;
pub mod dtype;
pub mod engine_args;
pub mod error;
pub mod ffi;
pub mod interop;
pub mod kernels;
pub mod limits;
pub mod memory;
pub mod numerics;
pub mod problem;
pub mod reference;
pub mod runtime;
pub mod state;
pub mod tokens;
pub mod tuning;

pub use backend::Backend;
pub use config::{resolve, EngineFlags, GateError, ResolvedConfig};
pub use dtype::{ActBuffer, ActView, ActViewMut, DType};
pub use error::{Error, Result, Status};
pub use kernels::decode::{decode, materialize, DecodeInputs};
pub use kernels::fold::{fold, track_step, Track};
pub use kernels::recurrent::{recurrent, RecurrentOutputs, RecurrentPlan};
pub use kernels::replay::replay;
pub use kernels::tree::{fold_tree, verify_tree, AcceptedPaths, DraftTree};
pub use kernels::verify::verify;
pub use kernels::verify_fold::{verify_fold, verify_fold_tree};
pub use limits::{MAX_CACHE_LEN, MAX_TREE_NODES, MAX_VERIFY_WINDOW};
pub use memory::{
    Device, DeviceAct, DeviceActView, DeviceActViewMut, DeviceSeqlens, DeviceSlice, DeviceSliceMut, DeviceVec, Host,
    Memory, Stream,
};
pub use problem::{HeadDims, Variant};
pub use state::decode_ring::{DecodeRing, DecodeStep, ForceFlush};
pub use state::deferred_ring::DeferredRing;
pub use state::pool::{CheckpointPool, PoolShape};
pub use state::spec_ring::{RingShape, SpecRing};
pub use tokens::{Gate, RecurrentInputs};

// The paths of earlier releases, kept as re-exports.

/// Earlier home of kernels V, F and P: [`kernels::verify`], [`kernels::fold`], [`kernels::replay`].
pub mod spec {
    pub use crate::kernels::fold::{fold, track_step, Track};
    pub use crate::kernels::replay::replay;
    pub use crate::kernels::verify::{validate_verify, verify, VerifyPlan};
    pub use crate::limits::MAX_VERIFY_WINDOW;
}
/// Earlier home of kernel R: [`kernels::recurrent`], [`tokens`].
pub mod recurrent {
    pub use crate::checks::check_kernel_head_dim;
    pub use crate::kernels::recurrent::*;
    pub use crate::limits::KERNEL_HEAD_DIMS;
    pub use crate::tokens::{validate_tokens, RecurrentInputs};
}
/// Earlier home of kernel D and its ring: [`kernels::decode`], [`state::decode_ring`].
pub mod decode {
    pub use crate::kernels::decode::*;
    pub use crate::limits::MAX_CACHE_LEN;
    pub use crate::state::decode_ring::*;
}
/// Earlier home of the tree kernels: [`kernels::tree`].
pub mod tree {
    pub use crate::kernels::tree::*;
    pub use crate::limits::MAX_TREE_NODES;
}
/// Earlier home of the checkpoint pool: [`state::pool`].
pub mod pool {
    pub use crate::state::pool::*;
}
/// Earlier home of the spec ring: [`state::spec_ring`].
pub mod ring {
    pub use crate::state::spec_ring::*;
}
pub use runtime::{cuda, emulator};
