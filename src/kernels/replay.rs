//! Kernel P, fp32 checkpoint replay of one layer (design §4 P): replays `counts[b]` ring records
//! of each live slot into its checkpoint, in place: the primitive behind fold, flush and export.
//! Also the replay F's reference and staging share.
//!
//! Device code: `csrc/include/replayssm/device/replay.cuh`; launcher `csrc/kernels/replay.cu`;
//! tests: `tests/replay.rs`.

use crate::backend::Backend;
use crate::checks::{check_count, check_kernel_head_dim, check_slots};
use crate::error::{Error, Result};
use crate::ffi;
use crate::kernels::params::ring_replay;
use crate::memory::{Device, DeviceSlice, Host, Memory, SliceRef, Stream};
use crate::reference;
use crate::runtime::launch::{check_status, launch, on_host, Exec};
use crate::state::pool::CheckpointPool;
use crate::state::spec_ring::{check_ring_matches, check_spec_pool, RingShape, SpecRing};

/// Track-slot snapshots of a fold: for request `b`, when `slots[b] >= 0` store the state after
/// step `steps[b]` into slot `slots[b]` (of every layer).
#[derive(Clone, Copy, Debug)]
pub struct Track<'a, M: Memory = Host> {
    pub slots: M::Slice<'a, i32>,
    pub steps: M::Slice<'a, i32>,
}

/// What a fold replays per request: a prefix of the window (chain) or an accepted root path of
/// a draft tree, `[B, width]` window positions (-1 padded), with their lengths where the host
/// validated them.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Commit<'a, M: Memory = Host> {
    Prefix(M::Slice<'a, i32>),
    Path {
        paths: M::Slice<'a, i32>,
        width: usize,
        lens: Option<&'a [i32]>,
    },
}

impl<M: Memory> Commit<'_, M> {
    /// Each row's replay length, where the host can read it.
    pub(crate) fn host_lens(&self) -> Option<&[i32]> {
        match self {
            Commit::Prefix(lens) => lens.host(),
            Commit::Path { lens, .. } => *lens,
        }
    }
    /// Rows the commit describes.
    pub(crate) fn rows(&self) -> usize {
        match self {
            Commit::Prefix(lens) => lens.len(),
            Commit::Path { paths, width, .. } => paths.len() / (*width).max(1),
        }
    }
}

impl Commit<'_> {
    pub(crate) fn lens(&self) -> &[i32] {
        match self {
            Commit::Prefix(lens) => lens,
            Commit::Path { lens, .. } => lens.unwrap_or(&[]),
        }
    }
    /// Ring position of step `t` of request `b`.
    pub(crate) fn position(&self, b: usize, t: usize) -> usize {
        match self {
            Commit::Prefix(_) => t,
            Commit::Path { paths, width, .. } => paths[b * width + t] as usize,
        }
    }
}

/// The host checks of a fold or replay's per-row arrays: their lengths always, their contents
/// (slot, length and track rules) where they are host memory.
pub(crate) fn check_fold_args<M: Memory>(
    shape: &RingShape,
    slots: &M::Slice<'_, i32>,
    commit: &Commit<'_, M>,
    what: &'static str,
    track: Option<&Track<'_, M>>,
) -> Result<()> {
    let b = slots.len();
    if b == 0 || b > 65535 {
        return Err(Error::Shape {
            tensor: "slots",
            expected: "[B] with 1 <= B <= 65535".into(),
            got: format!("[{b}]"),
        });
    }
    if let Some(s) = slots.host() {
        check_slots(s, b, shape.slots)?;
    }
    check_count(what, commit.rows(), b, "one per request")?;
    let lens = commit.host_lens();
    if let (Some(lens), Some(s)) = (lens, slots.host()) {
        crate::checks::indices::lengths(what, lens, s, shape.window as i32)?;
    }
    if let Some(t) = track {
        check_count("track_slots", t.slots.len(), b, "one per request")?;
        check_count("track_steps", t.steps.len(), b, "one per request")?;
        if let (Some(ts), Some(st), Some(s), Some(lens)) = (t.slots.host(), t.steps.host(), slots.host(), lens) {
            crate::checks::indices::tracks(ts, st, s, lens, shape.slots as i32)?;
        }
    }
    Ok(())
}

/// The checks [`replay`] runs before anything is written (host memory, contents included).
pub fn validate_replay(
    backend: Backend,
    pool: &CheckpointPool,
    ring: &SpecRing,
    layer: usize,
    slots: &[i32],
    counts: &[i32],
) -> Result<()> {
    check_replay(backend, pool, ring, layer, &slots, &counts)
}

/// The checks P runs before touching the pool (shared by both memories).
fn check_replay<M: Memory>(
    backend: Backend,
    pool: &CheckpointPool<M>,
    ring: &SpecRing<M>,
    layer: usize,
    slots: &M::Slice<'_, i32>,
    counts: &M::Slice<'_, i32>,
) -> Result<()> {
    let s = ring.shape;
    check_spec_pool(pool)?;
    check_ring_matches(ring, pool)?;
    pool.check_inputs(s.variant, &s.dims, layer)?;
    check_kernel_head_dim(backend, s.dims.k)?;
    check_fold_args(&s, slots, &Commit::<M>::Prefix(*counts), "counts", None)
}

/// Kernel P on host memory: replays `counts[b]` ring records of layer `layer` into each live
/// request's checkpoint, in place. On device memory: [`Stream::replay`].
pub fn replay(
    backend: Backend,
    pool: &mut CheckpointPool,
    ring: &SpecRing,
    layer: usize,
    slots: &[i32],
    counts: &[i32],
) -> Result<()> {
    check_replay(backend, pool, ring, layer, &slots, &counts)?;
    match backend {
        Backend::Reference => {
            replay_reference(pool.state_mut(), ring, layer, slots, Commit::Prefix(counts), None);
            Ok(())
        }
        Backend::Emulated | Backend::Cuda => on_host(backend, "replay", |exec| {
            replay_kernel(exec, pool, ring, layer, &slots, &counts)
        }),
    }
}

impl Stream {
    /// Kernel P on device memory, enqueued on this stream (no allocation, copy or
    /// synchronisation; bad device-side rows flag the stream's error word).
    pub fn replay(
        &self,
        pool: &mut CheckpointPool<Device>,
        ring: &SpecRing<Device>,
        layer: usize,
        slots: DeviceSlice<'_, i32>,
        counts: DeviceSlice<'_, i32>,
    ) -> Result<()> {
        check_replay(self.backend(), pool, ring, layer, &slots, &counts)?;
        replay_kernel(&Exec::on(self), pool, ring, layer, &slots, &counts)
    }
}

fn replay_kernel<M: Memory>(
    exec: &Exec,
    pool: &mut CheckpointPool<M>,
    ring: &SpecRing<M>,
    layer: usize,
    slots: &M::Slice<'_, i32>,
    counts: &M::Slice<'_, i32>,
) -> Result<()> {
    let (base, ring_params) = ring_replay(exec, pool, ring, slots, layer)?;
    let mut params = ffi::rssm_replay_params {
        base,
        ring: ring_params,
        counts: exec.slice("counts", counts)?,
    };
    crate::tuning::apply(crate::tuning::Kernel::P, &mut params.base, params.ring.window);
    // The checks the C ABI runs on the same params (one source: `checks::params`).
    crate::checks::params::replay(&params, exec.backend)?;
    let st = launch!(exec, rssm_replay, rssm_emu_replay, &params);
    check_status("replay", exec.backend, st)
}

/// The Reference replay of one layer (and its track snapshots): kernel R's reference update
/// over the ring's records.
pub(crate) fn replay_reference(
    state: &mut [f32],
    ring: &SpecRing,
    layer: usize,
    slots: &[i32],
    commit: Commit<'_>,
    track: Option<&Track<'_>>,
) {
    let counts = commit.lens();
    let s = ring.shape;
    let d = s.dims;
    let head = d.v * d.k;
    let gw = d.gate_width(s.variant);
    for (b, &slot) in slots.iter().enumerate() {
        if slot < 0 || counts[b] == 0 {
            continue;
        }
        let slot = slot as usize;
        let base = s.pool_offset(layer, slot);
        let track_to = track.and_then(|t| (t.slots[b] >= 0).then(|| (t.slots[b] as usize, t.steps[b] as usize)));
        for hv in 0..d.hv {
            let h = d.key_head(hv);
            let mut st: Vec<f32> = state[base + hv * head..base + (hv + 1) * head].to_vec();
            for step in 0..counts[b] as usize {
                let t = commit.position(b, step);
                let ki = s.k_index(layer, slot, h, t);
                let k: Vec<f32> = (0..d.k).map(|j| ring.k.get(ki + j)).collect();
                let vi = s.v_index(layer, slot, hv, t);
                let v: Vec<f32> = (0..d.v).map(|j| ring.v.get(vi + j)).collect();
                let gi = s.g_index(layer, slot, hv, t);
                let beta = ring.beta[s.beta_index(layer, slot, hv, t)];
                reference::apply_record(&mut st, &d, &k, &ring.g[gi..gi + gw], beta, &v, ring.l2norm);
                if let Some((ts, step_due)) = track_to {
                    if step_due == step {
                        let tb = s.pool_offset(layer, ts) + hv * head;
                        state[tb..tb + head].copy_from_slice(&st);
                    }
                }
            }
            state[base + hv * head..base + (hv + 1) * head].copy_from_slice(&st);
        }
    }
}
