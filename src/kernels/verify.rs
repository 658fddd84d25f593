//! Kernel V, chunked linear-chain verify with the spec-ring write (design §4 V): every draft
//! position's output from the checkpoint (never written) under the strictly-lower causal window
//! mask, and the window's raw records, after the checks of design §5 S1. Its tree mode VT:
//! [`crate::kernels::tree`]. Host memory: [`verify`]; device memory, on the caller's stream:
//! [`Stream::verify`].
//!
//! Device code: `csrc/include/replayssm/device/verify.cuh`; launcher `csrc/kernels/verify.cu`;
//! reference: the f32/f64 recurrence from the checkpoint ([`crate::reference`]); tests:
//! `tests/verify.rs`.

use crate::backend::Backend;
use crate::checks::check_count;
use crate::dtype::ActViewMut;
use crate::error::{Error, Result};
use crate::ffi;
use crate::kernels::params::{ring_write, Base};
use crate::kernels::tree::DraftTree;
use crate::memory::{ActLayout, Device, DeviceActViewMut, DeviceSlice, Memory, Stream};
use crate::reference;
use crate::runtime::launch::{check_status, launch, on_host, Exec};
use crate::state::pool::CheckpointPool;
use crate::state::spec_ring::{check_ring_matches, check_spec_pool, SpecRing};
use crate::tokens::{check_token_slots, token_params, validate_tokens, RecurrentInputs};

/// What a verify produced, as validation derived it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VerifyPlan {
    pub num_tokens: usize,
    pub batch: usize,
    pub max_seqlen: usize,
}

/// Checks a verify launch (tokens, pool, ring, window limits, slots), on host or device
/// memory (device index arrays are the kernel's to check: the stream's error word).
pub fn validate_verify<M: Memory>(
    backend: Backend,
    inp: &RecurrentInputs<'_, M>,
    pool: &CheckpointPool<M>,
    layer: usize,
    o: &impl ActLayout,
    ring: Option<&SpecRing<M>>,
) -> Result<VerifyPlan> {
    let (n, batch, max_seqlen) = validate_tokens(backend, inp, o)?;
    check_spec_pool(pool)?;
    pool.check_inputs(inp.variant, &inp.dims, layer)?;
    crate::checks::params::draft_tokens(max_seqlen as i64)?;
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
                    "W = {} is smaller than the largest draft window T = {max_seqlen} (design §5 S1: W >= T)",
                    r.shape.window
                ),
            });
        }
    }
    check_token_slots(&inp.slots, batch, pool.shape().slots)?;
    Ok(VerifyPlan {
        num_tokens: n,
        batch,
        max_seqlen,
    })
}

/// Kernel V on host memory (Reference or Emulated): every draft position's output from the
/// checkpoint (never written) and, with a ring, the window's raw records at positions `0..T`
/// of each live slot. With a draft `tree` (kernel VT) each node's output follows its root path
/// (and ring records are written at each node's window position). On device memory:
/// [`Stream::verify`].
pub fn verify(
    backend: Backend,
    inp: &RecurrentInputs<'_>,
    tree: Option<&DraftTree>,
    pool: &CheckpointPool,
    layer: usize,
    o: &mut ActViewMut<'_>,
    mut ring: Option<&mut SpecRing>,
) -> Result<VerifyPlan> {
    if let Some(t) = tree {
        t.check_matches(inp.cu_seqlens)?;
    }
    let plan = validate_verify(backend, inp, pool, layer, o, ring.as_deref())?;
    let parent = tree.map(DraftTree::parent);
    match backend {
        Backend::Reference => verify_reference(inp, parent, pool, layer, o, ring.as_deref_mut()),
        Backend::Emulated | Backend::Cuda => on_host(backend, "verify", |exec| {
            verify_kernel(exec, inp, parent, pool, layer, &plan, o, ring)
        })?,
    }
    Ok(plan)
}

impl Stream {
    /// Kernel V on device memory, enqueued on this stream: no allocation, copy or
    /// synchronisation; rows with bad device-side indices are skipped and flagged in the
    /// stream's error word ([`Stream::check_errors`]). `parent [N]` (kernel VT) gives each
    /// token's parent window position (-1: child of the checkpoint; the kernel skips and flags
    /// a request whose parents do not precede their children).
    pub fn verify(
        &self,
        inp: &RecurrentInputs<'_, Device>,
        parent: Option<DeviceSlice<'_, i32>>,
        pool: &CheckpointPool<Device>,
        layer: usize,
        o: &mut DeviceActViewMut<'_>,
        ring: Option<&mut SpecRing<Device>>,
    ) -> Result<VerifyPlan> {
        let plan = validate_verify(self.backend(), inp, pool, layer, o, ring.as_deref())?;
        if let Some(p) = &parent {
            check_count("parent", p.len(), plan.num_tokens, "one per token")?;
        }
        verify_kernel(&Exec::on(self), inp, parent, pool, layer, &plan, o, ring)?;
        Ok(plan)
    }
}

/// Launches kernel V; `parent` (per token, validated by the caller where it can be read)
/// selects the tree mask.
#[allow(clippy::too_many_arguments)]
pub(crate) fn verify_kernel<M: Memory>(
    exec: &Exec,
    inp: &RecurrentInputs<'_, M>,
    parent: Option<M::Slice<'_, i32>>,
    pool: &CheckpointPool<M>,
    layer: usize,
    plan: &VerifyPlan,
    o: &mut M::ViewMut<'_>,
    ring: Option<&mut SpecRing<M>>,
) -> Result<()> {
    // The token pointers are checked (and named in errors) before the pool's.
    let mut params = verify_params(exec, inp, parent.as_ref(), std::ptr::null(), pool, layer, plan, o, ring)?;
    params.base.state = exec.store("pool", pool.storage())?.cast_mut();
    crate::tuning::apply(crate::tuning::Kernel::V, &mut params.base, params.max_seqlen);
    // The checks the C ABI runs on the same params (one source: `checks::params`).
    crate::checks::params::verify(&params, exec.backend)?;
    let st = launch!(exec, rssm_verify, rssm_emu_verify, &params);
    check_status("verify", exec.backend, st)
}

/// A window ring's own limit (VF's W, VB's T): refused when a request has more draft positions
/// than `window`; `ring` names the ring in the message.
pub(crate) fn check_window_within(plan: &VerifyPlan, window: usize, ring: &str) -> Result<()> {
    if plan.max_seqlen > window {
        return Err(Error::InvalidValue {
            what: "verify window",
            why: format!("a request has {} draft positions; {ring} {window}", plan.max_seqlen),
        });
    }
    Ok(())
}

/// The params of a verify launch (V, and the verify half of VF) with the DEFAULT implementation;
/// `state` is the pool's checkpoint pointer as the caller lent it.
#[allow(clippy::too_many_arguments)]
pub(crate) fn verify_params<M: Memory>(
    exec: &Exec,
    inp: &RecurrentInputs<'_, M>,
    parent: Option<&M::Slice<'_, i32>>,
    state: *const f32,
    pool: &CheckpointPool<M>,
    layer: usize,
    plan: &VerifyPlan,
    o: &mut M::ViewMut<'_>,
    ring: Option<&mut SpecRing<M>>,
) -> Result<ffi::rssm_verify_params> {
    let s = pool.shape();
    let tokens = token_params(exec, inp, o)?;
    let base = Base {
        state: state.cast_mut(),
        slots: exec.slice("slots", &inp.slots)?,
        batch: plan.batch,
        num_slots: s.slots,
        num_layers: s.layers,
        layer,
        dims: inp.dims,
        dtype: inp.q.dtype(),
        variant: inp.variant,
        qk_l2norm: inp.qk_l2norm,
    };
    Ok(ffi::rssm_verify_params {
        base: base.to_ffi(exec),
        tokens,
        cu_seqlens: exec.slice("cu_seqlens", &inp.cu_seqlens)?,
        parent: match parent {
            Some(p) => exec.slice("parent", p)?,
            None => std::ptr::null(),
        },
        ring: ring_write(exec, ring)?,
        num_tokens: plan.num_tokens as i32,
        max_seqlen: plan.max_seqlen as i32,
    })
}

/// The Reference verify: the f32 recurrence from the checkpoint (outputs), raw ring records.
pub(crate) fn verify_reference(
    inp: &RecurrentInputs<'_>,
    parent: Option<&[i32]>,
    pool: &CheckpointPool,
    layer: usize,
    o: &mut ActViewMut<'_>,
    ring: Option<&mut SpecRing>,
) {
    let d = inp.dims;
    let p = pool.shape();
    let layer_pool = &pool.state()[p.offset(layer, 0)..p.offset(layer + 1, 0)];
    // A chain is the recurrence; a tree follows each node's root path.
    let out = match parent {
        None => reference::recurrent::<f32>(inp, layer_pool).o,
        Some(parent) => reference::tree_outputs::<f32>(inp, parent, layer_pool),
    };
    let row = d.hv * d.v;
    for tok in 0..inp.q.tokens {
        for i in 0..row {
            o.set(tok, i, out[tok * row + i]);
        }
    }
    if let Some(ring) = ring {
        write_ring_reference(inp, layer, ring);
    }
}

/// The Reference backend's ring write of a verify: raw records at window positions `0..T`.
pub(crate) fn write_ring_reference(inp: &RecurrentInputs<'_>, layer: usize, ring: &mut SpecRing) {
    let span = ring.shape.window;
    write_ring_reference_at(inp, layer, ring, |_| 0, span)
}

/// The same at ring positions `base(row) + 0..T`, `span` positions from the base on (VF: the
/// half its window goes to).
pub(crate) fn write_ring_reference_at(
    inp: &RecurrentInputs<'_>,
    layer: usize,
    ring: &mut SpecRing,
    base: impl Fn(usize) -> usize,
    span: usize,
) {
    let d = inp.dims;
    let s = ring.shape;
    let gw = d.gate_width(inp.variant);
    for (r, &slot) in inp.slots.iter().enumerate() {
        if slot < 0 {
            continue;
        }
        let slot = slot as usize;
        let bos = inp.cu_seqlens[r] as usize;
        let len = (inp.cu_seqlens[r + 1] as usize - bos).min(span);
        let at = base(r);
        for i in 0..len {
            let (tok, t) = (bos + i, at + i);
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
