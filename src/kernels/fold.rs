//! Kernel F, fold-every-commit (SPEC §4 F): one launch replays each live request's accepted ring
//! records (bonus token included) into its fp32 checkpoint in every layer, bit-identical to
//! kernel R, with optional radix-cache track snapshots; its path mode FT commits an accepted
//! root path of a draft tree ([`crate::kernels::tree`]).
//!
//! Device code: `csrc/include/replayssm/device/fold.cuh` (over `replay.cuh`'s `replay_slot`);
//! launcher `csrc/kernels/fold.cu`; reference: [`crate::kernels::replay`]'s replay of the ring;
//! tests: `tests/fold.rs`.

use crate::backend::Backend;
use crate::checks::check_kernel_head_dim;
use crate::error::{Error, Result};
use crate::ffi;
pub use crate::kernels::replay::Track;
use crate::kernels::replay::{check_fold_args, replay_reference, ring_l2norm, stage_ring, Commit};
use crate::runtime::launch::{check_error_word, check_status, launch, Memory};
use crate::state::pool::CheckpointPool;
use crate::state::spec_ring::{check_ring_matches, check_spec_pool, SpecRing};

/// The step whose state a radix-cache track snapshot needs (SPEC §4 F), for a commit of `n`
/// tokens onto a sequence of length `pre` with track interval `interval`: due when
/// `pre / I != post / I` (`post = pre + n`), at step `max((post / I) * I - pre - 1, 0)`.
pub fn track_step(pre: u64, n: u64, interval: u64) -> Option<u64> {
    if interval == 0 {
        return None;
    }
    let post = pre + n;
    if pre / interval == post / interval {
        return None;
    }
    Some(((post / interval) * interval).saturating_sub(pre + 1))
}

/// Kernel F: replays `accept_lens[b]` ring records (bonus token included; 0 = no-op) of each
/// live request into its checkpoint, in every layer, in one launch.
pub fn fold(
    backend: Backend,
    pool: &mut CheckpointPool,
    ring: &SpecRing,
    slots: &[i32],
    accept_lens: &[i32],
    track: Option<Track<'_>>,
) -> Result<()> {
    fold_commit(backend, pool, ring, slots, Commit::Prefix(accept_lens), track)
}

/// Kernel F in either mode (prefix or path), after the S1 checks.
pub(crate) fn fold_commit(
    backend: Backend,
    pool: &mut CheckpointPool,
    ring: &SpecRing,
    slots: &[i32],
    commit: Commit<'_>,
    track: Option<Track<'_>>,
) -> Result<()> {
    let s = ring.shape;
    check_spec_pool(pool)?;
    check_ring_matches(ring, pool)?;
    let state = pool.state_mut();
    check_kernel_head_dim(backend, s.dims.k)?;
    let what = match commit {
        Commit::Prefix(_) => "accept_lens",
        Commit::Path { .. } => "accepted path lengths",
    };
    check_fold_args(&s, slots, commit.lens(), what, track.as_ref())?;
    if slots.len() * s.layers > 65535 {
        return Err(Error::InvalidValue {
            what: "batch",
            why: format!("B x NL = {} exceeds the launch limit of 65535", slots.len() * s.layers),
        });
    }
    match backend {
        Backend::Reference => {
            for layer in 0..s.layers {
                replay_reference(state, ring, layer, slots, commit, track.as_ref());
            }
            Ok(())
        }
        Backend::Emulated | Backend::Cuda => {
            let mut mem = Memory::for_backend(backend)?;
            let mut word = [0u32];
            let (track_slots, track_steps) = match track {
                Some(t) => (mem.input(t.slots)?, mem.input(t.steps)?),
                None => (std::ptr::null(), std::ptr::null()),
            };
            let d = s.dims;
            let r = stage_ring(&mut mem, ring)?;
            let (accept_lens, accept_paths, path_width) = match commit {
                Commit::Prefix(lens) => (mem.input(lens)?, std::ptr::null(), 0),
                Commit::Path { paths, width, .. } => (std::ptr::null(), mem.input(paths)?, width as i32),
            };
            let params = ffi::rssm_fold_params {
                state: mem.output(state)?,
                ring_v: r.0,
                ring_k: r.1,
                ring_g: r.2,
                ring_beta: r.3,
                slots: mem.input(slots)?,
                accept_lens,
                track_slots,
                track_steps,
                accept_paths,
                error_word: mem.output(&mut word)?,
                batch: slots.len() as i32,
                num_slots: s.slots as i32,
                num_layers: s.layers as i32,
                window: s.window as i32,
                H: d.h as i32,
                HV: d.hv as i32,
                K: d.k as i32,
                V: d.v as i32,
                dtype: s.dtype.to_ffi(),
                variant: s.variant.to_ffi(),
                qk_l2norm: ring_l2norm(ring),
                path_width,
            };
            // The checks the C ABI runs on the same params (one source: `checks::params`).
            crate::checks::params::fold(&params, backend)?;
            let st = launch!(backend, rssm_fold, rssm_emu_fold, &params);
            check_status("fold", backend, st)?;
            mem.finish()?;
            check_error_word("fold", word[0])
        }
    }
}
