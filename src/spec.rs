//! The ReplaySSM spec kernels (SPEC §4): V (chunked linear-chain verify with ring write),
//! F (fold-every-commit over all layers) and P (fp32 checkpoint replay of one layer), with the
//! checks of SPEC §5 S1 before every launch.
//!
//! Device code: `csrc/include/replayssm/device/verify.cuh`, `replay.cuh` (P and F share
//! `replay_slot`, which runs kernel R's update functions). Launchers: `csrc/kernels/verify.cu`,
//! `fold.cu`, `replay.cu`. Tests: `tests/spec.rs`.

use crate::backend::Backend;
use crate::config::{GateError, Mode};
use crate::dtype::ActViewMut;
use crate::error::{Error, Result};
use crate::ffi;
use crate::launch::{check_error_word, check_status, launch, Memory};
use crate::pool::CheckpointPool;
use crate::problem::check_slots;
use crate::recurrent::{check_kernel_head_dim, stage_output_view, stage_tokens, validate_tokens, RecurrentInputs};
use crate::reference;
use crate::ring::{RingShape, SpecRing};

/// Longest verify window the V kernel is compiled for (`RSSM_MAX_VERIFY_WINDOW`).
pub const MAX_VERIFY_WINDOW: usize = ffi::RSSM_MAX_VERIFY_WINDOW as usize;

/// What a verify produced, as validation derived it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VerifyPlan {
    pub num_tokens: usize,
    pub batch: usize,
    pub max_seqlen: usize,
}

/// The pool must serve the spec ring (SPEC §5 P1).
fn check_spec_pool(pool: &CheckpointPool) -> Result<()> {
    match pool.mode() {
        Mode::Spec => Ok(()),
        Mode::Off => Err(GateError::SpecRingWithoutSpec { mode: "off" }.into()),
        Mode::Buffered { .. } => Err(GateError::SpecRingWithoutSpec {
            mode: "buffered decode",
        }
        .into()),
    }
}

/// The ring must have been built for this pool's geometry (variant, head dims, layers, slots).
fn check_ring_matches(ring: &SpecRing, pool: &CheckpointPool) -> Result<()> {
    ring.check()?;
    let (r, p) = (ring.shape, pool.shape());
    if r.variant != p.variant || r.dims != p.dims || r.layers != p.layers || r.slots != p.slots {
        return Err(Error::InvalidValue {
            what: "spec ring",
            why: format!("ring shape {r:?} does not match the pool's {p:?}"),
        });
    }
    Ok(())
}

/// Checks a verify launch (tokens, pool, ring, window limits, slots).
pub fn validate_verify(
    backend: Backend,
    inp: &RecurrentInputs<'_>,
    pool: &CheckpointPool,
    layer: usize,
    o: &ActViewMut<'_>,
    ring: Option<&SpecRing>,
) -> Result<VerifyPlan> {
    let (n, batch, max_seqlen) = validate_tokens(backend, inp, o)?;
    check_spec_pool(pool)?;
    pool.check_inputs(inp.variant, &inp.dims, layer)?;
    if max_seqlen > MAX_VERIFY_WINDOW {
        return Err(Error::InvalidValue {
            what: "verify window",
            why: format!(
                "a request has {max_seqlen} draft positions; the verify kernel takes at most {MAX_VERIFY_WINDOW}"
            ),
        });
    }
    if let Some(r) = ring {
        check_ring_matches(r, pool)?;
        if r.shape.dtype != inp.q.dtype() {
            return Err(Error::DType {
                tensor: "spec ring",
                expected: inp.q.dtype(),
                got: r.shape.dtype,
            });
        }
        if r.l2norm != inp.qk_l2norm {
            return Err(Error::InvalidValue {
                what: "spec ring",
                why: format!(
                    "the ring replays with qk_l2norm = {} but the verify runs with {}",
                    r.l2norm, inp.qk_l2norm
                ),
            });
        }
        if r.shape.window < max_seqlen {
            return Err(Error::InvalidValue {
                what: "ring window",
                why: format!(
                    "W = {} is smaller than the largest draft window T = {max_seqlen} (SPEC §5 S1: W >= T)",
                    r.shape.window
                ),
            });
        }
    }
    check_slots(inp.slots, batch, pool.shape().slots)?;
    Ok(VerifyPlan {
        num_tokens: n,
        batch,
        max_seqlen,
    })
}

/// Kernel V: every draft position's output from the checkpoint (never written) and, with a
/// ring, the window's raw records at positions `0..T` of each live slot.
pub fn verify(
    backend: Backend,
    inp: &RecurrentInputs<'_>,
    pool: &CheckpointPool,
    layer: usize,
    o: &mut ActViewMut<'_>,
    mut ring: Option<&mut SpecRing>,
) -> Result<VerifyPlan> {
    let plan = validate_verify(backend, inp, pool, layer, o, ring.as_deref())?;
    match backend {
        Backend::Reference => verify_reference(inp, pool, layer, o, ring.as_deref_mut()),
        Backend::Emulated | Backend::Cuda => verify_kernel(backend, inp, None, pool, layer, &plan, o, ring)?,
    }
    Ok(plan)
}

/// Launches kernel V; `parent` (per token, validated by the caller) selects the tree mask.
#[allow(clippy::too_many_arguments)]
pub(crate) fn verify_kernel(
    backend: Backend,
    inp: &RecurrentInputs<'_>,
    parent: Option<&[i32]>,
    pool: &CheckpointPool,
    layer: usize,
    plan: &VerifyPlan,
    o: &mut ActViewMut<'_>,
    ring: Option<&mut SpecRing>,
) -> Result<()> {
    let d = inp.dims;
    let s = pool.shape();
    let window = ring.as_ref().map_or(1, |r| r.shape.window);
    let mut mem = Memory::for_backend(backend)?;
    let mut word = [0u32];
    let t = stage_tokens(&mut mem, inp)?;
    let (ring_v, ring_k, ring_g, ring_beta) = match ring {
        Some(r) => (
            mem.output(r.v.as_bytes_mut())?.cast(),
            mem.output(r.k.as_bytes_mut())?.cast(),
            mem.output(&mut r.g)?,
            mem.output(&mut r.beta)?,
        ),
        None => (
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        ),
    };
    let params = ffi::rssm_verify_params {
        q: t.q.cast(),
        k: t.k.cast(),
        v: t.v.cast(),
        a: t.a.cast(),
        b: t.b.cast(),
        A_log: t.a_log,
        dt_bias: t.dt_bias,
        g: t.g,
        beta: t.beta,
        cu_seqlens: t.cu_seqlens,
        parent: match parent {
            Some(p) => mem.input(p)?,
            None => std::ptr::null(),
        },
        slots: t.slots,
        state: mem.input(pool.state())?,
        o: stage_output_view(&mut mem, o)?.cast(),
        ring_v,
        ring_k,
        ring_g,
        ring_beta,
        error_word: mem.output(&mut word)?,
        q_stride: inp.q.stride as i64,
        k_stride: inp.k.stride as i64,
        v_stride: inp.v.stride as i64,
        a_stride: t.a_stride,
        b_stride: t.b_stride,
        o_stride: o.stride as i64,
        num_tokens: plan.num_tokens as i32,
        batch: plan.batch as i32,
        max_seqlen: plan.max_seqlen as i32,
        num_slots: s.slots as i32,
        num_layers: s.layers as i32,
        layer: layer as i32,
        window: window as i32,
        H: d.h as i32,
        HV: d.hv as i32,
        K: d.k as i32,
        V: d.v as i32,
        scale: inp.scale,
        dtype: inp.q.dtype().to_ffi(),
        variant: inp.variant.to_ffi(),
        qk_l2norm: inp.qk_l2norm as i32,
        reserved: 0,
    };
    let st = launch!(backend, rssm_verify, rssm_emu_verify, &params);
    check_status("verify", backend, st)?;
    mem.finish()?;
    check_error_word("verify", word[0])
}

/// The Reference verify: the f32 recurrence from the checkpoint (outputs), raw ring records.
fn verify_reference(
    inp: &RecurrentInputs<'_>,
    pool: &CheckpointPool,
    layer: usize,
    o: &mut ActViewMut<'_>,
    ring: Option<&mut SpecRing>,
) {
    let d = inp.dims;
    let p = pool.shape();
    let layer_pool = &pool.state()[p.offset(layer, 0)..p.offset(layer + 1, 0)];
    let res = reference::recurrent::<f32>(inp, layer_pool);
    let row = d.hv * d.v;
    for tok in 0..inp.q.tokens {
        for i in 0..row {
            o.set(tok, i, res.o[tok * row + i]);
        }
    }
    if let Some(ring) = ring {
        write_ring_reference(inp, layer, ring);
    }
}

/// The Reference backend's ring write of a verify: raw records at window positions `0..T`.
pub(crate) fn write_ring_reference(inp: &RecurrentInputs<'_>, layer: usize, ring: &mut SpecRing) {
    let d = inp.dims;
    let s = ring.shape;
    let gw = d.gate_width(inp.variant);
    for (r, &slot) in inp.slots.iter().enumerate() {
        if slot < 0 {
            continue;
        }
        let slot = slot as usize;
        let bos = inp.cu_seqlens[r] as usize;
        let len = (inp.cu_seqlens[r + 1] as usize - bos).min(s.window);
        for t in 0..len {
            let tok = bos + t;
            for h in 0..d.h {
                let base = s.k_index(layer, slot, h, t);
                for j in 0..d.k {
                    ring.k.set(base + j, inp.k.at(tok, h * d.k + j));
                }
            }
            for hv in 0..d.hv {
                let base = s.v_index(layer, slot, hv, t);
                for j in 0..d.v {
                    ring.v.set(base + j, inp.v.at(tok, hv * d.v + j));
                }
                let (g, beta) = reference::gate_at::<f32>(&inp.gate, inp.variant, &d, tok, hv);
                let gi = s.g_index(layer, slot, hv, t);
                ring.g[gi..gi + gw].copy_from_slice(&g);
                ring.beta[s.beta_index(layer, slot, hv, t)] = beta;
            }
        }
    }
}

/// Track-slot snapshots of a fold: for request `b`, when `slots[b] >= 0` store the state after
/// step `steps[b]` into slot `slots[b]` (of every layer).
#[derive(Clone, Copy, Debug)]
pub struct Track<'a> {
    pub slots: &'a [i32],
    pub steps: &'a [i32],
}

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

fn check_fold_args(
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
    for (i, &n) in lens.iter().enumerate() {
        if n < 0 || n as usize > shape.window {
            return Err(Error::InvalidValue {
                what,
                why: format!("{what}[{i}] = {n} is outside 0..={} (the ring window W)", shape.window),
            });
        }
    }
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
        let mut seen = std::collections::HashMap::new();
        for (i, (&ts, &step)) in t.slots.iter().zip(t.steps).enumerate() {
            if ts == -1 {
                continue;
            }
            if ts < -1 || ts as usize >= shape.slots {
                return Err(Error::SlotOutOfRange {
                    index: i,
                    slot: ts,
                    num_slots: shape.slots,
                });
            }
            if let Some(j) = slots.iter().position(|&s| s == ts) {
                return Err(Error::InvalidValue {
                    what: "track_slots",
                    why: format!("track_slots[{i}] = {ts} is also the live slot of request {j}: a track slot must differ from every live slot"),
                });
            }
            if let Some(first) = seen.insert(ts, i) {
                return Err(Error::DuplicateSlot {
                    first,
                    second: i,
                    slot: ts,
                });
            }
            if slots[i] < 0 || step < 0 || step >= lens[i] {
                return Err(Error::InvalidValue {
                    what: "track_steps",
                    why: format!(
                        "track_steps[{i}] = {step} must lie in 0..{} (the request's {what}) for a live request with a track slot",
                        lens[i]
                    ),
                });
            }
        }
    }
    Ok(())
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
    fn lens(&self) -> &[i32] {
        match self {
            Commit::Prefix(lens) | Commit::Path { lens, .. } => lens,
        }
    }
    /// Ring position of step `t` of request `b`.
    fn position(&self, b: usize, t: usize) -> usize {
        match self {
            Commit::Prefix(_) => t,
            Commit::Path { paths, width, .. } => paths[b * width + t] as usize,
        }
    }
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
            let st = launch!(backend, rssm_fold, rssm_emu_fold, &params);
            check_status("fold", backend, st)?;
            mem.finish()?;
            check_error_word("fold", word[0])
        }
    }
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
            let st = launch!(backend, rssm_replay, rssm_emu_replay, &params);
            check_status("replay", backend, st)?;
            mem.finish()?;
            check_error_word("replay", word[0])
        }
    }
}

type RingPtrs = (*const std::ffi::c_void, *const std::ffi::c_void, *const f32, *const f32);

/// Stages a ring for reading (F and P): raw v, raw k, g, beta.
fn stage_ring(mem: &mut Memory, ring: &SpecRing) -> Result<RingPtrs> {
    Ok((
        mem.input(ring.v.as_bytes())?.cast(),
        mem.input(ring.k.as_bytes())?.cast(),
        mem.input(&ring.g)?,
        mem.input(&ring.beta)?,
    ))
}

fn ring_l2norm(ring: &SpecRing) -> i32 {
    ring.l2norm as i32
}

/// The Reference replay of one layer (and its track snapshots): kernel R's reference update
/// over the ring's records.
fn replay_reference(
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
