//! Safe access to the SIMT emulator's self-test kernels (csrc/emu/selftest.cpp). They exist to
//! prove that the emulator runs CUDA semantics faithfully enough to trust kernel results:
//! barriers, shuffles, votes, shared memory, atomics and launch validation.

use crate::error::Status;
use crate::ffi;

/// An emulator failure: the status and the emulator's message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EmuError {
    pub status: Status,
    pub message: String,
}

fn check(raw: i32) -> Result<(), EmuError> {
    Status::check(raw as ffi::rssm_status).map_err(|status| EmuError {
        status,
        // SAFETY: NUL-terminated thread-local string owned by the emulator.
        message: unsafe { std::ffi::CStr::from_ptr(ffi::rssm_emu_last_error()) }
            .to_string_lossy()
            .into_owned(),
    })
}

/// `out[b*n + i] = 2 * input[b*n + (i+1) % n]` through dynamic shared memory, with or without
/// the barrier between the write and the read.
pub fn rotate(input: &[f32], n: usize, with_barrier: bool) -> Result<Vec<f32>, EmuError> {
    assert!(n > 0 && input.len() % n == 0);
    let mut out = vec![f32::NAN; input.len()];
    // SAFETY: both buffers hold blocks * n floats.
    check(unsafe {
        ffi::rssm_emu_selftest_rotate(
            input.as_ptr(),
            out.as_mut_ptr(),
            n as i32,
            (input.len() / n) as i32,
            with_barrier as i32,
        )
    })?;
    Ok(out)
}

/// Per-block tree sums of `n` (a power of two <= 1024) inputs in static shared memory;
/// `skip_barrier = Some(s)` removes the barrier after step `s`.
pub fn block_sum(input: &[f32], n: usize, skip_barrier: Option<usize>) -> Result<Vec<f32>, EmuError> {
    assert!(n.is_power_of_two() && n <= 1024 && input.len() % n == 0);
    let blocks = input.len() / n;
    let mut out = vec![f32::NAN; blocks];
    let skip = skip_barrier.map_or(-1, |s| s as i32);
    // SAFETY: input holds blocks * n floats, out holds blocks.
    check(unsafe {
        ffi::rssm_emu_selftest_block_sum(input.as_ptr(), out.as_mut_ptr(), n as i32, blocks as i32, skip)
    })?;
    Ok(out)
}

/// Per-lane results of one warp's shuffles and votes.
#[derive(Clone, Debug, Default)]
pub struct ShuffleResults {
    pub shfl: [i32; 32],
    pub xor: [i32; 32],
    pub down: [i32; 32],
    pub up: [i32; 32],
    pub ballot: [u32; 32],
    pub any: [i32; 32],
    pub all: [i32; 32],
}

pub fn shuffles(input: &[i32; 32], arg: i32, width: i32) -> Result<ShuffleResults, EmuError> {
    let mut r = ShuffleResults::default();
    // SAFETY: every output array holds 32 elements.
    check(unsafe {
        ffi::rssm_emu_selftest_shuffles(
            input.as_ptr(),
            arg,
            width,
            r.shfl.as_mut_ptr(),
            r.xor.as_mut_ptr(),
            r.down.as_mut_ptr(),
            r.up.as_mut_ptr(),
            r.ballot.as_mut_ptr(),
            r.any.as_mut_ptr(),
            r.all.as_mut_ptr(),
        )
    })?;
    Ok(r)
}

/// `rssm::warp_sum` over each group of 32 inputs.
pub fn warp_sum(input: &[f32]) -> Result<Vec<f32>, EmuError> {
    assert!(input.len() % 32 == 0);
    let mut out = vec![f32::NAN; input.len() / 32];
    // SAFETY: sizes as asserted.
    check(unsafe { ffi::rssm_emu_selftest_warp_sum(input.as_ptr(), out.as_mut_ptr(), out.len() as i32) })?;
    Ok(out)
}

/// `(counter, bits)` after every thread added 1 and OR-ed its lane bit.
pub fn atomics(blocks: u32, threads: u32) -> Result<(i32, u32), EmuError> {
    let (mut counter, mut bits) = (0i32, 0u32);
    // SAFETY: two scalars.
    check(unsafe { ffi::rssm_emu_selftest_atomics(&mut counter, &mut bits, blocks as i32, threads as i32) })?;
    Ok((counter, bits))
}

/// Launches an empty kernel with this configuration.
pub fn launch(grid_x: u32, block_x: u32, block_y: u32, dynamic_smem: u64) -> Result<(), EmuError> {
    // SAFETY: no pointers.
    check(unsafe { ffi::rssm_emu_selftest_launch(grid_x, block_x, block_y, dynamic_smem) })
}

/// A kernel in which half a warp shuffles and the other half has exited.
pub fn divergent() -> Result<(), EmuError> {
    // SAFETY: no pointers.
    check(unsafe { ffi::rssm_emu_selftest_divergent() })
}

/// A kernel in which half of each warp waits at `__syncthreads` and the rest at a shuffle.
pub fn deadlock() -> Result<(), EmuError> {
    // SAFETY: no pointers.
    check(unsafe { ffi::rssm_emu_selftest_deadlock() })
}

/// The emulator's `float -> bf16 -> float` and `float -> f16 -> float` round trips.
pub fn convert(input: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let mut b = vec![0.0; input.len()];
    let mut h = vec![0.0; input.len()];
    // SAFETY: all three hold input.len() floats.
    unsafe { ffi::rssm_emu_selftest_convert(input.as_ptr(), b.as_mut_ptr(), h.as_mut_ptr(), input.len() as i32) };
    (b, h)
}
