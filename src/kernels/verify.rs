//! Kernel V, chunked linear-chain verify with the spec-ring write (SPEC §4 V): every draft
//! position's output from the checkpoint (never written) under the strictly-lower causal window
//! mask, and the window's raw records, after the checks of SPEC §5 S1. Its tree mode VT:
//! [`crate::kernels::tree`].
//!
//! Device code: `csrc/include/replayssm/device/verify.cuh`; launcher `csrc/kernels/verify.cu`;
//! reference: the f32/f64 recurrence from the checkpoint ([`crate::reference`]); tests:
//! `tests/verify.rs`.

use crate::backend::Backend;
use crate::checks::check_slots;
use crate::dtype::ActViewMut;
use crate::error::{Error, Result};
use crate::ffi;
use crate::limits::MAX_VERIFY_WINDOW;
use crate::reference;
use crate::runtime::launch::{check_error_word, check_status, launch, Memory};
use crate::state::pool::CheckpointPool;
use crate::state::spec_ring::{check_ring_matches, check_spec_pool, SpecRing};
use crate::tokens::{stage_output_view, stage_tokens, validate_tokens, RecurrentInputs};

/// What a verify produced, as validation derived it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VerifyPlan {
    pub num_tokens: usize,
    pub batch: usize,
    pub max_seqlen: usize,
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
    // The checks the C ABI runs on the same params (one source: `checks::params`).
    crate::checks::params::verify(&params, backend)?;
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
