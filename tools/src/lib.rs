//! replayssm-tools: what is built on the replayssm library but is not linked into an engine:
//! the `replayssm` CLI's pieces, case files, the benchmark harness and its plots, random
//! workloads, and the bytes-floor / occupancy reports.
//!
//! Map: [`case`] (portable `.safetensors` case files: make, check), [`bench`] (timed kernel
//! cases, reports, plots), [`workload`] (random inputs for every kernel), [`sequence`]
//! (a workload through kernel D step by step), [`floor`] (bytes floors of every kernel),
//! [`occupancy`] (the compiled kernels' resources), [`demo`], [`output`] (the CLI's stdout and
//! stderr: writes that fail cleanly), [`ranges`] (the CLI's numeric flags: ranges and parser).
//!
//! No module imports in a cycle: `tests/layout.rs` checks this crate's module graph as it does
//! the library's.

pub mod bench;
pub mod case;
pub mod demo;
pub mod floor;
pub mod model;
pub mod occupancy;
pub mod output;
pub mod ranges;
pub mod sequence;
pub mod staged;
pub mod testing;
pub mod workload;
