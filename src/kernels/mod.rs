//! One module per kernel launcher (`csrc/kernels/<name>.cu`), each the safe typed wrapper of its
//! kernel over every backend: checks, params, launch, and the Reference backend's f32 path.
//! The same name runs through every layer: device header `device/<name>.cuh`, launcher
//! `csrc/kernels/<name>.cu`, this module, its test `tests/<name>.rs`, its bench case.

pub mod decode;
pub mod fold;
pub(crate) mod params;
pub mod recurrent;
pub mod replay;
pub mod tree;
pub mod verify;
pub mod verify_buffered;
pub mod verify_fold;
