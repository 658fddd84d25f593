//! replayssm: hand-written CUDA kernels for ReplaySSM (speculative decoding on linear-attention
//! layers with an fp32 checkpoint and a ring of raw inputs), with a safe Rust runtime, a CPU
//! SIMT emulator that runs the same kernel sources, and an f64 reference. See `SPEC.md` in the
//! shared folder and the README.
//!
//! Map: kernel R (recurrent baseline) = device code `csrc/include/replayssm/device/recurrent.cuh`,
//! launcher `csrc/kernels/recurrent.cu`, wrapper [`recurrent`], reference [`reference`], tests
//! `tests/recurrent.rs`. Kernels V, F, P: [`spec`], `device/verify.cuh`, `device/replay.cuh`,
//! `tests/spec.rs`. Kernel D (buffered decode): [`decode`], `device/decode.cuh`,
//! `tests/decode.rs`. Capability gates: [`config`]; pools and rings: [`pool`], [`ring`],
//! [`decode::DecodeRing`]. C ABI for other engines: [`capi`] (header `include/replayssm.h`).

pub mod backend;
pub mod build_info;
pub mod capi;
pub mod config;
pub mod cuda;
pub mod decode;
pub mod dtype;
pub mod emulator;
pub mod engine_args;
pub mod error;
pub mod ffi;
pub mod interop;
mod launch;
pub mod numerics;
pub mod pool;
pub mod problem;
pub mod recurrent;
pub mod reference;
pub mod ring;
pub mod spec;
pub mod tree;

pub use backend::Backend;
pub use config::{resolve, EngineFlags, GateError, ResolvedConfig};
pub use decode::{decode, materialize, DecodeInputs, DecodeRing, DecodeStep, ForceFlush};
pub use dtype::{ActBuffer, ActView, ActViewMut, DType};
pub use error::{Error, Result, Status};
pub use pool::{CheckpointPool, PoolShape};
pub use problem::{Gate, HeadDims, Variant};
pub use recurrent::{recurrent, RecurrentInputs, RecurrentOutputs, RecurrentPlan};
pub use ring::{RingShape, SpecRing};
pub use spec::{fold, replay, track_step, verify, Track};
pub use tree::{fold_tree, verify_tree, AcceptedPaths, DraftTree, MAX_TREE_NODES};
