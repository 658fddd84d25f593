//! Kernel F, fold-every-commit (design §4 F): one launch replays each live request's accepted ring
//! records (bonus token included) into its fp32 checkpoint in every layer, bit-identical to
//! kernel R, with optional radix-cache track snapshots; its path mode FT ([`Accepted::Paths`])
//! commits an accepted root path of a draft tree ([`crate::kernels::tree`]).
//!
//! Device code: `csrc/include/replayssm/device/fold.cuh` (over `replay.cuh`'s `replay_slot`);
//! launcher `csrc/kernels/fold.cu`; reference: [`crate::kernels::replay`]'s replay of the ring;
//! tests: `tests/fold.rs`.

use crate::backend::Backend;
use crate::checks::check_kernel_head_dim;
use crate::error::{Error, Result};
use crate::ffi;
use crate::kernels::params::ring_replay;
pub use crate::kernels::replay::Track;
use crate::kernels::replay::{check_fold_args, replay_reference, Commit};
use crate::kernels::tree::AcceptedPaths;
use crate::limits::MAX_TREE_NODES;
use crate::memory::{Device, DeviceSlice, Memory, SliceRef, Stream};
use crate::runtime::launch::{check_status, launch, on_host, Exec};
use crate::state::pool::CheckpointPool;
use crate::state::spec_ring::{check_ring_matches, check_spec_pool, SpecRing};

/// The step whose state a radix-cache track snapshot needs (design §4 F), for a commit of `n`
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

/// What a fold commits of each request's window, on host memory.
#[derive(Clone, Copy, Debug)]
pub enum Accepted<'a> {
    /// Kernel F: `accept_lens [B]`, each request's first n window records (bonus token
    /// included; 0 = no-op).
    Lens(&'a [i32]),
    /// Kernel FT: each request's accepted root path of its draft tree (window positions, in
    /// order), validated against the tree; `track` steps count path steps.
    Paths(&'a AcceptedPaths),
}

impl<'a> From<&'a [i32]> for Accepted<'a> {
    fn from(lens: &'a [i32]) -> Self {
        Accepted::Lens(lens)
    }
}

impl<'a> From<&'a Vec<i32>> for Accepted<'a> {
    fn from(lens: &'a Vec<i32>) -> Self {
        Accepted::Lens(lens)
    }
}

impl<'a, const N: usize> From<&'a [i32; N]> for Accepted<'a> {
    fn from(lens: &'a [i32; N]) -> Self {
        Accepted::Lens(lens)
    }
}

impl<'a> From<&'a AcceptedPaths> for Accepted<'a> {
    fn from(paths: &'a AcceptedPaths) -> Self {
        Accepted::Paths(paths)
    }
}

/// What a fold commits of each request's window, on device memory (the kernel checks the
/// contents: a row that is not a valid length or an increasing path inside the window is
/// skipped and flagged in the stream's error word).
#[derive(Clone, Copy, Debug)]
pub enum DeviceAccepted<'a> {
    /// Kernel F: `accept_lens [B]`.
    Lens(DeviceSlice<'a, i32>),
    /// Kernel FT: `paths [B, width]`, each request's accepted window positions from the root,
    /// -1 padded.
    Paths { paths: DeviceSlice<'a, i32>, width: usize },
}

impl<'a> From<DeviceSlice<'a, i32>> for DeviceAccepted<'a> {
    fn from(lens: DeviceSlice<'a, i32>) -> Self {
        DeviceAccepted::Lens(lens)
    }
}

/// Kernel F on host memory: replays each live request's accepted ring records (a prefix of its
/// window, or with [`Accepted::Paths`] a root path of its draft tree: FT) into its checkpoint, in
/// every layer, in one launch. On device memory: [`Stream::fold`].
pub fn fold<'a>(
    backend: Backend,
    pool: &mut CheckpointPool,
    ring: &SpecRing,
    slots: &[i32],
    accepted: impl Into<Accepted<'a>>,
    track: Option<Track<'_>>,
) -> Result<()> {
    fold_commit(
        backend,
        pool,
        ring,
        slots,
        host_commit(ring, slots, accepted.into())?,
        track,
    )
}

impl Stream {
    /// Kernel F (FT with [`DeviceAccepted::Paths`]) on device memory, enqueued on this stream:
    /// no allocation, copy or synchronisation; rows with bad device-side indices, lengths or
    /// paths are skipped and flagged in the stream's error word.
    pub fn fold<'a>(
        &self,
        pool: &mut CheckpointPool<Device>,
        ring: &SpecRing<Device>,
        slots: DeviceSlice<'_, i32>,
        accepted: impl Into<DeviceAccepted<'a>>,
        track: Option<Track<'_, Device>>,
    ) -> Result<()> {
        let commit = match accepted.into() {
            DeviceAccepted::Lens(lens) => Commit::Prefix(lens),
            DeviceAccepted::Paths { paths, width } => {
                let most = MAX_TREE_NODES.min(ring.shape.window);
                if width == 0 || width > most || paths.len() != slots.len() * width {
                    return Err(Error::Shape {
                        tensor: "accept_paths",
                        expected: format!(
                            "[B={}, P] with 1 <= P <= {most} (the tree limit and the ring window)",
                            slots.len()
                        ),
                        got: format!("{} elements with P = {width}", paths.len()),
                    });
                }
                Commit::Path {
                    paths,
                    width,
                    lens: None,
                }
            }
        };
        check_fold(self.backend(), pool, ring, &slots, &commit, track.as_ref())?;
        fold_kernel(&Exec::on(self), pool, ring, &slots, commit, track)
    }
}

/// A host commit as kernel F reads it: the lengths, or the paths checked against the ring and
/// the batch.
fn host_commit<'a>(ring: &SpecRing, slots: &[i32], accepted: Accepted<'a>) -> Result<Commit<'a>> {
    let paths = match accepted {
        Accepted::Lens(lens) => return Ok(Commit::Prefix(lens)),
        Accepted::Paths(p) => p,
    };
    if paths.lens().len() != slots.len() {
        return Err(Error::Shape {
            tensor: "accept_path",
            expected: format!("[{}, P] (one row per request)", slots.len()),
            got: format!("[{}, {}]", paths.lens().len(), paths.width()),
        });
    }
    let window = ring.shape.window;
    if paths.width() > window {
        return Err(Error::InvalidValue {
            what: "accept_path",
            why: format!("P = {} columns exceed the ring window W = {window}", paths.width()),
        });
    }
    if let Some(&pos) = paths.as_slice().iter().find(|&&x| x >= window as i32) {
        return Err(Error::InvalidValue {
            what: "accept_path",
            why: format!("position {pos} is outside the ring window W = {window}"),
        });
    }
    Ok(Commit::Path {
        paths: paths.as_slice(),
        width: paths.width(),
        lens: Some(paths.lens()),
    })
}

/// The S1 checks of a fold in either mode, before anything is written.
pub(crate) fn check_fold<M: Memory>(
    backend: Backend,
    pool: &CheckpointPool<M>,
    ring: &SpecRing<M>,
    slots: &M::Slice<'_, i32>,
    commit: &Commit<'_, M>,
    track: Option<&Track<'_, M>>,
) -> Result<()> {
    let s = ring.shape;
    check_spec_pool(pool)?;
    check_ring_matches(ring, pool)?;
    check_kernel_head_dim(backend, s.dims.k)?;
    let what = match commit {
        Commit::Prefix(_) => "accept_lens",
        Commit::Path { .. } => "accepted path lengths",
    };
    check_fold_args(&s, slots, commit, what, track)?;
    // The grid holds (layer, row tile) in x and the request in z: any B up to the batch limit.
    if slots.len() > crate::limits::MAX_BATCH {
        return Err(Error::InvalidValue {
            what: "batch",
            why: format!(
                "B = {} exceeds the launch limit of {}",
                slots.len(),
                crate::limits::MAX_BATCH
            ),
        });
    }
    Ok(())
}

/// The checks [`fold`] runs before anything is written (host memory, contents included).
pub fn validate_fold<'a>(
    backend: Backend,
    pool: &CheckpointPool,
    ring: &SpecRing,
    slots: &[i32],
    accepted: impl Into<Accepted<'a>>,
    track: Option<Track<'_>>,
) -> Result<()> {
    let commit = host_commit(ring, slots, accepted.into())?;
    check_fold(backend, pool, ring, &slots, &commit, track.as_ref())
}

/// Kernel F on host memory in either mode (prefix or path), after the S1 checks.
pub(crate) fn fold_commit(
    backend: Backend,
    pool: &mut CheckpointPool,
    ring: &SpecRing,
    slots: &[i32],
    commit: Commit<'_>,
    track: Option<Track<'_>>,
) -> Result<()> {
    check_fold(backend, pool, ring, &slots, &commit, track.as_ref())?;
    match backend {
        Backend::Reference => {
            let state = pool.state_mut();
            for layer in 0..ring.shape.layers {
                replay_reference(state, ring, layer, slots, commit, track.as_ref());
            }
            Ok(())
        }
        Backend::Emulated | Backend::Cuda => on_host(backend, "fold", |exec| {
            fold_kernel(exec, pool, ring, &slots, commit, track)
        }),
    }
}

/// Launches kernel F (either mode) on checked inputs.
pub(crate) fn fold_kernel<M: Memory>(
    exec: &Exec,
    pool: &mut CheckpointPool<M>,
    ring: &SpecRing<M>,
    slots: &M::Slice<'_, i32>,
    commit: Commit<'_, M>,
    track: Option<Track<'_, M>>,
) -> Result<()> {
    let (track_slots, track_steps) = match &track {
        Some(t) => (
            exec.slice("track_slots", &t.slots)?,
            exec.slice("track_steps", &t.steps)?,
        ),
        None => (std::ptr::null(), std::ptr::null()),
    };
    let (accept_lens, accept_paths, path_width) = match &commit {
        Commit::Prefix(lens) => (exec.slice("accept_lens", lens)?, std::ptr::null(), 0),
        Commit::Path { paths, width, .. } => (std::ptr::null(), exec.slice("accept_paths", paths)?, *width as i32),
    };
    let (base, ring_params) = ring_replay(exec, pool, ring, slots, 0)?;
    let mut params = ffi::rssm_fold_params {
        base,
        ring: ring_params,
        accept_lens,
        track_slots,
        track_steps,
        accept_paths,
        path_width,
        reserved: 0,
    };
    crate::tuning::apply(crate::tuning::Kernel::F, &mut params.base, params.ring.window);
    // The checks the C ABI runs on the same params (one source: `checks::params`).
    crate::checks::params::fold(&params, exec.backend)?;
    let st = launch!(exec, rssm_fold, rssm_emu_fold, &params);
    check_status("fold", exec.backend, st)
}
