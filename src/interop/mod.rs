//! Interop with other Rust GPU stacks. `cudarc` (feature `cudarc`): lend cudarc device slices and
//! streams to the C ABI entries ([`crate::capi`]) without copying, for candle-based engines.

#[cfg(feature = "cudarc")]
pub mod cudarc;
