//! Kernel VF, the deferred fold (fold-then-verify): per layer, each live request's accepted
//! records of the previous step are replayed into its fp32 checkpoint (F's update path:
//! bit-identical), the checkpoint stored, and the new window verified from the state still in
//! registers (V's tolerance contract; V's DEFAULT outputs bit for bit), its raw records written to
//! the other half of a two-window ring. A speculative step then moves each layer's state once
//! read and once written, instead of V's read plus F's read and write.
//!
//! The state between steps is a [`DeferredRing`] (ring and pending table). Per step: every
//! layer's VF, then [`DeferredRing::commit`] (device memory: [`Stream::verify_fold`], then
//! [`Stream::defer_commit`]). Rows whose checkpoint must be current outside the step are flushed
//! with kernel F's path mode ([`DeferredRing::flush`], [`Stream::defer_flush`]).
//!
//! Device code: `csrc/include/replayssm/device/verify_fold.cuh` (replay.cuh's `replay_steps`,
//! verify.cuh's `build_window` and `verify_rows`) and `device/defer.cuh` (the pending table);
//! launchers `csrc/kernels/verify_fold.cu`, `csrc/kernels/defer.cu`; reference: F's replay then
//! V's reference; tests: `tests/verify_fold.rs`.

use crate::backend::Backend;
use crate::checks::check_count;
use crate::dtype::ActViewMut;
use crate::error::{Error, Result};
use crate::ffi;
use crate::kernels::fold::{fold_commit, DeviceAccepted};
use crate::kernels::replay::{replay_reference, Commit, Track};
use crate::kernels::tree::{AcceptedPaths, DraftTree};
use crate::kernels::verify::{
    check_window_within, validate_verify, verify_params, verify_reference, write_ring_reference_at, VerifyPlan,
};
use crate::memory::{Device, DeviceActViewMut, DeviceSlice, DeviceSliceMut, Memory, SliceRef, Stream};
use crate::runtime::launch::{check_status, launch, on_host, Exec};
use crate::state::deferred_ring::DeferredRing;
use crate::state::pool::CheckpointPool;
use crate::tokens::RecurrentInputs;

/// VF's checks beyond V's (`validate_verify` against the two-window `dring.ring`, which the
/// caller runs first and whose plan this takes): the ring attached to this pool, the draft
/// window within one half (T <= W), the track arrays' lengths.
pub fn check_verify_fold<M: Memory>(
    plan: &VerifyPlan,
    pool: &CheckpointPool<M>,
    dring: &DeferredRing<M>,
    track: Option<&Track<'_, M>>,
) -> Result<()> {
    dring.check_pool(pool)?;
    check_window_within(plan, dring.window(), "the deferred-fold ring holds windows of W =")?;
    if let Some(t) = track {
        check_count("track_slots", t.slots.len(), plan.batch, "one per request")?;
        check_count("track_steps", t.steps.len(), plan.batch, "one per request")?;
    }
    Ok(())
}

/// Each row's pending records as F's path commit: lengths and `[B, W]` ring positions.
fn pending_rows(dring: &DeferredRing, slots: &[i32]) -> Result<(Vec<i32>, Vec<i32>)> {
    let w = dring.window();
    let mut lens = vec![0i32; slots.len()];
    let mut paths = vec![-1i32; slots.len() * w];
    for (b, &slot) in slots.iter().enumerate().filter(|(_, &s)| s >= 0) {
        let pos = dring.pending_positions(slot as usize)?;
        lens[b] = pos.len() as i32;
        paths[b * w..b * w + pos.len()].copy_from_slice(pos);
    }
    Ok((lens, paths))
}

/// Kernel VF on host memory (Reference or Emulated): folds each live slot's pending records
/// into its checkpoint (layer `layer`; track snapshots as F's), then verifies the new window
/// from it, as a linear chain or, with `tree`, as a draft tree (the verify half is VT's; commit
/// the step with [`DeferredRing::commit_paths`]). On device memory: [`Stream::verify_fold`].
#[allow(clippy::too_many_arguments)]
pub fn verify_fold(
    backend: Backend,
    inp: &RecurrentInputs<'_>,
    tree: Option<&DraftTree>,
    pool: &mut CheckpointPool,
    layer: usize,
    o: &mut ActViewMut<'_>,
    dring: &mut DeferredRing,
    track: Option<Track<'_>>,
) -> Result<VerifyPlan> {
    if let Some(t) = tree {
        t.check_matches(inp.cu_seqlens)?;
    }
    let plan = validate_verify(backend, inp, pool, layer, o, Some(&dring.ring))?;
    check_verify_fold(&plan, pool, dring, track.as_ref())?;
    match backend {
        Backend::Reference => {
            let slots: &[i32] = inp.slots;
            crate::checks::params::pending_entries(&dring.pending, dring.window(), slots)?;
            let (lens, paths) = pending_rows(dring, slots)?;
            if let Some(t) = &track {
                crate::checks::indices::tracks(t.slots, t.steps, slots, &lens, pool.shape().slots as i32)?;
            }
            let commit = Commit::Path {
                paths: &paths[..],
                width: dring.window(),
                lens: Some(&lens),
            };
            replay_reference(pool.state_mut(), &dring.ring, layer, slots, commit, track.as_ref());
            verify_reference(inp, tree.map(DraftTree::parent), pool, layer, o, None);
            // The new window goes to the half the pending records are not in.
            let (w, e) = (dring.window(), dring.entry_len());
            let halves: Vec<usize> = slots
                .iter()
                .map(|&s| {
                    if s < 0 {
                        0
                    } else {
                        dring.pending[s as usize * e + 1] as usize
                    }
                })
                .collect();
            write_ring_reference_at(inp, layer, &mut dring.ring, |r| (1 - halves[r]) * w, w);
        }
        Backend::Emulated | Backend::Cuda => on_host(backend, "verify_fold", |exec| {
            verify_fold_kernel(exec, inp, tree.map(|t| t.parent()), pool, layer, &plan, o, dring, track)
        })?,
    }
    Ok(plan)
}

impl Stream {
    /// Kernel VF for layer `layer` on device memory, enqueued on this stream: no allocation, copy
    /// or synchronisation; rows with bad device-side indices or pending entries are skipped and
    /// flagged in the stream's error word. `parent` (per token) selects the tree mask, as VT's.
    #[allow(clippy::too_many_arguments)]
    pub fn verify_fold(
        &self,
        inp: &RecurrentInputs<'_, Device>,
        parent: Option<DeviceSlice<'_, i32>>,
        pool: &mut CheckpointPool<Device>,
        layer: usize,
        o: &mut DeviceActViewMut<'_>,
        dring: &mut DeferredRing<Device>,
        track: Option<Track<'_, Device>>,
    ) -> Result<VerifyPlan> {
        let plan = validate_verify(self.backend(), inp, pool, layer, o, Some(&dring.ring))?;
        check_verify_fold(&plan, pool, dring, track.as_ref())?;
        if let Some(p) = &parent {
            check_count("parent", p.len(), plan.num_tokens, "one per token")?;
        }
        verify_fold_kernel(&Exec::on(self), inp, parent, pool, layer, &plan, o, dring, track)?;
        Ok(plan)
    }

    /// Once per step, after the step's last layer's VF (not after each layer): each live row's
    /// slot now holds, pending, what it accepted of the window VF just wrote: the first
    /// `accept_lens[b]` records, or with [`DeviceAccepted::Paths`] (a tree step) row `b`'s
    /// window positions (device memory, graph-safe).
    pub fn defer_commit<'a>(
        &self,
        dring: &mut DeferredRing<Device>,
        slots: DeviceSlice<'_, i32>,
        accepted: impl Into<DeviceAccepted<'a>>,
    ) -> Result<()> {
        let accepted = accepted.into();
        match accepted {
            DeviceAccepted::Lens(lens) => check_count("accept_lens", lens.len(), slots.len(), "")?,
            DeviceAccepted::Paths { paths, width } => {
                if width == 0 || width > dring.window() || paths.len() != slots.len() * width {
                    return Err(Error::Shape {
                        tensor: "accepted_paths",
                        expected: format!("[{}, P] with 1 <= P <= W = {}", slots.len(), dring.window()),
                        got: format!("{} elements with P = {width}", paths.len()),
                    });
                }
            }
        }
        defer_kernel(self, dring, ffi::rssm_defer_op_RSSM_DEFER_COMMIT, &slots, |exec, p| {
            match accepted {
                DeviceAccepted::Lens(lens) => p.accept_lens = exec.slice("accept_lens", &lens)?,
                DeviceAccepted::Paths { paths, width } => {
                    p.accept_paths = exec.slice("accepted_paths", &paths)?;
                    p.path_width = width as i32;
                }
            }
            Ok(())
        })
    }

    /// Folds the pending records of `slots` (every layer) into their checkpoints and clears
    /// them: the table's positions are gathered into `paths` (`[B, W]` scratch), kernel F's path
    /// mode replays them, and the entries are reset. Three launches, no synchronisation.
    pub fn defer_flush(
        &self,
        pool: &mut CheckpointPool<Device>,
        dring: &mut DeferredRing<Device>,
        slots: DeviceSlice<'_, i32>,
        mut paths: DeviceSliceMut<'_, i32>,
    ) -> Result<()> {
        dring.check_pool(pool)?;
        let w = dring.window();
        check_count("paths (scratch, [B, W])", paths.len(), slots.len() * w, "")?;
        defer_kernel(self, dring, ffi::rssm_defer_op_RSSM_DEFER_GATHER, &slots, |exec, p| {
            p.paths = exec.slice_mut("paths", &mut paths)?;
            Ok(())
        })?;
        let gathered = DeviceAccepted::Paths {
            paths: paths.as_slice(),
            width: w,
        };
        self.fold(pool, &dring.ring, slots, gathered, None)?;
        self.defer_reset(dring, slots)
    }

    /// Drops the pending records of `slots` (a slot handed to a new request, or freed).
    pub fn defer_reset(&self, dring: &mut DeferredRing<Device>, slots: DeviceSlice<'_, i32>) -> Result<()> {
        defer_kernel(self, dring, ffi::rssm_defer_op_RSSM_DEFER_RESET, &slots, |_, _| Ok(()))
    }
}

/// Launches the pending-table kernel with `op`; `fill` sets the op's arrays.
fn defer_kernel(
    stream: &Stream,
    dring: &mut DeferredRing<Device>,
    op: ffi::rssm_defer_op,
    slots: &DeviceSlice<'_, i32>,
    fill: impl FnOnce(&Exec, &mut ffi::rssm_defer_params) -> Result<()>,
) -> Result<()> {
    let exec = Exec::on(stream);
    crate::checks::check_bookkeeping_rows(slots.len())?;
    let mut params = ffi::rssm_defer_params {
        pending: exec.store_mut("pending table", &mut dring.pending)?,
        slots: exec.slice("slots", slots)?,
        error_word: exec.word,
        batch: slots.len() as i32,
        num_slots: dring.shape().slots as i32,
        window: dring.window() as i32,
        op: op as i32,
        ..Default::default()
    };
    fill(&exec, &mut params)?;
    crate::checks::params::defer(&params, exec.backend)?;
    let st = launch!(&exec, rssm_defer, rssm_emu_defer, &params);
    check_status("defer", exec.backend, st)
}

/// Launches kernel VF on checked inputs.
#[allow(clippy::too_many_arguments)]
pub(crate) fn verify_fold_kernel<M: Memory>(
    exec: &Exec,
    inp: &RecurrentInputs<'_, M>,
    parent: Option<M::Slice<'_, i32>>,
    pool: &mut CheckpointPool<M>,
    layer: usize,
    plan: &VerifyPlan,
    o: &mut M::ViewMut<'_>,
    dring: &mut DeferredRing<M>,
    track: Option<Track<'_, M>>,
) -> Result<()> {
    // The token pointers are checked (and named in errors) before the pool's, as in V.
    let mut verify = verify_params(
        exec,
        inp,
        parent.as_ref(),
        std::ptr::null(),
        pool,
        layer,
        plan,
        o,
        Some(&mut dring.ring),
    )?;
    verify.base.state = exec.store_mut("pool", pool.storage_mut())?;
    crate::tuning::apply(crate::tuning::Kernel::VF, &mut verify.base, verify.max_seqlen);
    let pending = exec.store("pending table", &dring.pending)?;
    let (track_slots, track_steps) = match &track {
        Some(t) => (
            exec.slice("track_slots", &t.slots)?,
            exec.slice("track_steps", &t.steps)?,
        ),
        None => (std::ptr::null(), std::ptr::null()),
    };
    let params = ffi::rssm_verify_fold_params {
        verify,
        pending,
        track_slots,
        track_steps,
    };
    // The checks the C ABI runs on the same params (one source: `checks::params`).
    crate::checks::params::verify_fold(&params, exec.backend)?;
    let st = launch!(exec, rssm_verify_fold, rssm_emu_verify_fold, &params);
    check_status("verify_fold", exec.backend, st)
}

impl DeferredRing {
    /// [`DeferredRing::commit`] of a tree step: each live row's accepted root path (window
    /// positions) is what stays pending.
    pub fn commit_paths(&mut self, slots: &[i32], accepted: &AcceptedPaths) -> Result<()> {
        self.check_rows(slots)?;
        if accepted.lens().len() != slots.len() {
            return Err(Error::Shape {
                tensor: "accepted paths",
                expected: format!("[{}] rows (one per request)", slots.len()),
                got: format!("[{}]", accepted.lens().len()),
            });
        }
        let w = self.window() as i32;
        for (b, _) in slots.iter().enumerate().filter(|(_, &s)| s >= 0) {
            if let Some(&bad) = accepted.path(b).iter().find(|&&x| x >= w) {
                return Err(Error::InvalidValue {
                    what: "accepted paths",
                    why: format!("row {b}: window position {bad} is outside the deferred window W = {w}"),
                });
            }
        }
        for (b, &slot) in slots.iter().enumerate().filter(|(_, &s)| s >= 0) {
            self.commit_entry(slot as usize, accepted.path(b).iter().copied());
        }
        Ok(())
    }

    /// Folds the pending records of `slots` (every layer) into their checkpoints with kernel F's
    /// path mode, and clears them: what a finished, preempted or swapped request, a prefix-cache
    /// snapshot or a state transfer needs before the checkpoint is read.
    pub fn flush(&mut self, backend: Backend, pool: &mut CheckpointPool, slots: &[i32]) -> Result<()> {
        self.check_pool(pool)?;
        self.check_rows(slots)?;
        crate::checks::params::pending_entries(&self.pending, self.window(), slots)?;
        let (lens, paths) = pending_rows(self, slots)?;
        let commit = Commit::Path {
            paths: &paths[..],
            width: self.window(),
            lens: Some(&lens),
        };
        fold_commit(backend, pool, &self.ring, slots, commit, None)?;
        for &slot in slots.iter().filter(|&&s| s >= 0) {
            self.release(slot as usize)?;
        }
        Ok(())
    }
}
