//! Where kernels execute: the launch plumbing every wrapper shares (`launch`), the CUDA runtime
//! (device discovery, device buffers, [`cuda`]) and the SIMT emulator ([`emulator`]).

pub mod cuda;
pub mod emulator;
pub(crate) mod launch;
