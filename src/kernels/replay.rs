//! Kernel P, fp32 checkpoint replay of one layer (SPEC §4 P): replays `counts[b]` ring records
//! of each live slot into its checkpoint, in place: the primitive behind fold, flush and export.
//! Also the replay F's reference and staging share.
//!
//! Device code: `csrc/include/replayssm/device/replay.cuh`; launcher `csrc/kernels/replay.cu`;
//! tests: `tests/replay.rs`.

use crate::backend::Backend;
use crate::checks::{check_kernel_head_dim, check_slots};
use crate::error::{Error, Result};
use crate::ffi;
use crate::reference;
use crate::runtime::launch::{check_error_word, check_status, launch, Memory};
use crate::state::pool::CheckpointPool;
use crate::state::spec_ring::{check_ring_matches, check_spec_pool, RingShape, SpecRing};

/// Track-slot snapshots of a fold: for request `b`, when `slots[b] >= 0` store the state after
/// step `steps[b]` into slot `slots[b]` (of every layer).
#[derive(Clone, Copy, Debug)]
pub struct Track<'a> {
    pub slots: &'a [i32],
    pub steps: &'a [i32],
}

/// What a fold replays per request: a prefix of the window (chain) or an accepted root path of
/// a draft tree, `[B, width]` window positions (-1 padded) with their lengths (validated).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Commit<'a> {
    Prefix(&'a [i32]),
    Path {
        paths: &'a [i32],
        width: usize,
        lens: &'a [i32],
    },
}

impl Commit<'_> {
    pub(crate) fn lens(&self) -> &[i32] {
        match self {
            Commit::Prefix(lens) | Commit::Path { lens, .. } => lens,
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

pub(crate) fn check_fold_args(
    shape: &RingShape,
    slots: &[i32],
    lens: &[i32],
    what: &'static str,
    track: Option<&Track<'_>>,
) -> Result<()> {
    if slots.is_empty() || slots.len() > 65535 {
        return Err(Error::Shape {
            tensor: "slots",
            expected: "[B] with 1 <= B <= 65535".into(),
            got: format!("[{}]", slots.len()),
        });
    }
    check_slots(slots, slots.len(), shape.slots)?;
    if lens.len() != slots.len() {
        return Err(Error::Shape {
            tensor: what,
            expected: format!("[{}] (one per request)", slots.len()),
            got: format!("[{}]", lens.len()),
        });
    }
    crate::checks::indices::lengths(what, lens, slots, shape.window as i32)?;
    if let Some(t) = track {
        for (tensor, len) in [("track_slots", t.slots.len()), ("track_steps", t.steps.len())] {
            if len != slots.len() {
                return Err(Error::Shape {
                    tensor,
                    expected: format!("[{}] (one per request)", slots.len()),
                    got: format!("[{len}]"),
                });
            }
        }
        crate::checks::indices::tracks(t.slots, t.steps, slots, lens, shape.slots as i32)?;
    }
    Ok(())
}

/// Kernel P: replays `counts[b]` ring records of layer `layer` into each live request's
/// checkpoint, in place.
pub fn replay(
    backend: Backend,
    pool: &mut CheckpointPool,
    ring: &SpecRing,
    layer: usize,
    slots: &[i32],
    counts: &[i32],
) -> Result<()> {
    let s = ring.shape;
    check_spec_pool(pool)?;
    check_ring_matches(ring, pool)?;
    pool.check_inputs(s.variant, &s.dims, layer)?;
    check_kernel_head_dim(backend, s.dims.k)?;
    check_fold_args(&s, slots, counts, "counts", None)?;
    let state = pool.state_mut();
    match backend {
        Backend::Reference => {
            replay_reference(state, ring, layer, slots, Commit::Prefix(counts), None);
            Ok(())
        }
        Backend::Emulated | Backend::Cuda => {
            let mut mem = Memory::for_backend(backend)?;
            let mut word = [0u32];
            let d = s.dims;
            let r = stage_ring(&mut mem, ring)?;
            let params = ffi::rssm_replay_params {
                state: mem.output(state)?,
                ring_v: r.0,
                ring_k: r.1,
                ring_g: r.2,
                ring_beta: r.3,
                slots: mem.input(slots)?,
                counts: mem.input(counts)?,
                error_word: mem.output(&mut word)?,
                batch: slots.len() as i32,
                num_slots: s.slots as i32,
                num_layers: s.layers as i32,
                layer: layer as i32,
                window: s.window as i32,
                H: d.h as i32,
                HV: d.hv as i32,
                K: d.k as i32,
                V: d.v as i32,
                dtype: s.dtype.to_ffi(),
                variant: s.variant.to_ffi(),
                qk_l2norm: ring_l2norm(ring),
            };
            // The checks the C ABI runs on the same params (one source: `checks::params`).
            crate::checks::params::replay(&params, backend)?;
            let st = launch!(backend, rssm_replay, rssm_emu_replay, &params);
            check_status("replay", backend, st)?;
            mem.finish()?;
            check_error_word("replay", word[0])
        }
    }
}

type RingPtrs = (*const std::ffi::c_void, *const std::ffi::c_void, *const f32, *const f32);

/// Stages a ring for reading (F and P): raw v, raw k, g, beta.
pub(crate) fn stage_ring(mem: &mut Memory, ring: &SpecRing) -> Result<RingPtrs> {
    Ok((
        mem.input(ring.v.as_bytes())?.cast(),
        mem.input(ring.k.as_bytes())?.cast(),
        mem.input(&ring.g)?,
        mem.input(&ring.beta)?,
    ))
}

pub(crate) fn ring_l2norm(ring: &SpecRing) -> i32 {
    ring.l2norm as i32
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
