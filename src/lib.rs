//! replayssm: hand-written CUDA kernels for ReplaySSM (speculative decoding on linear-attention
//! layers with an fp32 checkpoint and a ring of raw inputs), with a safe Rust runtime, a CPU
//! SIMT emulator that runs the same kernel sources, and an f64 reference. See `docs/design.md` (the
//! contract) and the README. The tools built on it (CLI, case files, bench, plots,
//! workloads) are the `replayssm-tools` crate (`tools/`), which an engine does not link.
//!
//! Layout, from the bottom up (a module uses only modules of its own layer or below; within a
//! layer, file by file, without a cycle: `tests/layout.rs` checks this list against the code):
//! - [`ffi`] (the kernel layer's C header, bindgen), [`backend`], [`numerics`] (design §6 pass
//!   rule) and [`build_info`], which use no other module;
//! - [`limits`] (the header's defines), [`dtype`] and [`problem`] (head dims, variant, gate);
//! - [`tuning`] (which implementation a call runs), [`config`] (capability gates),
//!   [`engine_args`] (SGLang's flags) and [`error`];
//! - [`memory`] (host or device memory: [`Stream`], [`DeviceVec`], device views) and
//!   [`runtime`] (launch plumbing, CUDA runtime, emulator), which use each other;
//! - [`checks`]: every host check, on host or device memory;
//! - [`state`]: [`CheckpointPool`], [`SpecRing`], [`DecodeRing`], [`DeferredRing`],
//!   [`BufferedRing`]; [`tokens`]:
//!   the token inputs R, V and D share;
//! - [`reference`](mod@reference): f32/f64 design §3 maths;
//! - [`kernels`]: one module per kernel, named like its launcher `csrc/kernels/<name>.cu`:
//!   [`kernels::recurrent`] (R), [`kernels::verify`] (V), [`kernels::fold`] (F),
//!   [`kernels::replay`] (P), [`kernels::decode`] (D, materialise), [`kernels::tree`] (VT, FT),
//!   [`kernels::verify_fold`] (VF, the deferred fold), [`kernels::verify_buffered`] (VB, the
//!   buffered speculative verify);
//! - [`capi`]: the C ABI (header `include/replayssm.h`), which checks its params and launches
//!   through `runtime`, not `kernels`; [`interop`]: cudarc views for it.
//!
//! The root re-exports each kernel's function (`replayssm::decode`, `replayssm::recurrent`, ...)
//! and the main types; the modules [`spec`], [`tree`], [`pool`] and [`ring`] keep the paths of
//! earlier releases. A root name is never both a module and a function (`tests/layout.rs`).

// A unit enum's text form, written once: `Display` prints its `name()`, `FromStr` reads the
// names and aliases listed (what the CLI, case files and environment variables spell).
macro_rules! text_enum {
    ($ty:ident, $what:literal, $expected:literal, { $($($text:literal)|+ => $variant:ident),+ $(,)? }) => {
        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }

        impl std::str::FromStr for $ty {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $($($text)|+ => Ok($ty::$variant),)+
                    _ => Err(format!(concat!("unknown ", $what, " '{}' (expected ", $expected, ")"), s)),
                }
            }
        }
    };
}

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
pub use config::{resolve, EngineFlags, GateError, ResolvedConfig, SpecCommit};
pub use dtype::{ActBuffer, ActView, ActViewMut, DType};
pub use error::{Error, Result, Status};
pub use kernels::decode::{decode, materialize, DecodeInputs};
pub use kernels::fold::{fold, track_step, Accepted, DeviceAccepted, Track};
pub use kernels::recurrent::{recurrent, recurrent_with_records, RecurrentOutputs, RecurrentPlan};
pub use kernels::replay::replay;
pub use kernels::tree::{AcceptedPaths, DraftTree};
pub use kernels::verify::verify;
pub use kernels::verify_buffered::BufferedFold;
pub use kernels::verify_fold::verify_fold;
pub use limits::{MAX_CACHE_LEN, MAX_TREE_NODES, MAX_VERIFY_WINDOW};
pub use memory::{
    Device, DeviceAct, DeviceActView, DeviceActViewMut, DeviceSeqlens, DeviceSlice, DeviceSliceMut, DeviceVec, Host,
    Memory, Stream,
};
pub use problem::{HeadDims, Variant};
pub use state::buffered_ring::BufferedRing;
pub use state::decode_ring::{DecodeRing, DecodeStep, ForceFlush};
pub use state::deferred_ring::DeferredRing;
pub use state::pool::{CheckpointPool, PoolShape};
pub use state::spec_ring::{RingShape, SpecRing};
pub use tokens::{Gate, GateForm, LowerBound, RawGate, RecurrentInputs};

// The paths of earlier releases, kept as re-exports (those of kernels R and D, `recurrent` and
// `decode`, are gone: the root's functions have their names; use `kernels::recurrent`,
// `kernels::decode` and `state::decode_ring`).

/// Earlier home of kernels V, F and P: [`kernels::verify`], [`kernels::fold`], [`kernels::replay`].
pub mod spec {
    pub use crate::kernels::fold::{fold, track_step, Track};
    pub use crate::kernels::replay::replay;
    pub use crate::kernels::verify::{validate_verify, verify, VerifyPlan};
    pub use crate::limits::MAX_VERIFY_WINDOW;
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
