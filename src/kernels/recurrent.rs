//! Kernel R, the recurrent baseline (design §4 R): safe wrapper over all three backends.
//!
//! `recurrent(backend, &inputs, &mut outputs)` checks every shape, dtype, stride, slot and
//! sequence length first (typed [`Error`]s), then runs the Rust reference, the emulated kernel or
//! the CUDA kernel. Launcher: `csrc/kernels/recurrent.cu`; device code:
//! `csrc/include/replayssm/device/recurrent.cuh`; reference: [`crate::reference`].

use crate::backend::Backend;
use crate::checks::check_len;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ffi;
use crate::kernels::params::Base;
use crate::memory::{ActLayout, Device, Host, Memory, SliceMutRef, Stream};
use crate::reference;
use crate::runtime::launch::{check_status, launch, on_host, Exec};
use crate::tokens::{check_token_slots, token_params, validate_tokens, RecurrentInputs};

/// Outputs of kernel R, in host memory (the default) or device memory.
#[derive(Debug)]
pub struct RecurrentOutputs<'a, M: Memory = Host> {
    /// `[N, HV, V]`, same dtype as q.
    pub o: M::ViewMut<'a>,
    /// Checkpoint pool `[NS, HV, V, K]`, read at each request's slot.
    pub state: M::SliceMut<'a, f32>,
    /// Store the final state back into the request's slot.
    pub write_state: bool,
    /// `[B, T, HV, V, K]` with `T` the longest request: state after each token. Entries of null
    /// requests and past a request's length are left untouched.
    pub snapshots: Option<M::SliceMut<'a, f32>>,
}

/// What validation derived from the inputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecurrentPlan {
    pub num_tokens: usize,
    pub batch: usize,
    pub max_seqlen: usize,
    pub num_slots: usize,
}

/// Checks everything a launch of kernel R depends on (device index arrays: the kernel's to
/// check); returns the derived sizes.
pub fn validate<M: Memory>(
    backend: Backend,
    inp: &RecurrentInputs<'_, M>,
    out: &RecurrentOutputs<'_, M>,
) -> Result<RecurrentPlan> {
    let d = inp.dims;
    let (n, batch, max_seqlen) = validate_tokens(backend, inp, &out.o)?;
    let per_slot = d.state_elems();
    if out.state.is_empty() || out.state.len() % per_slot != 0 {
        return Err(Error::Shape {
            tensor: "state",
            expected: format!("[NS, HV={}, V={}, K={}] with NS >= 1", d.hv, d.v, d.k),
            got: format!("{} elements", out.state.len()),
        });
    }
    let num_slots = out.state.len() / per_slot;
    if num_slots > i32::MAX as usize {
        return Err(Error::InvalidValue {
            what: "slot count",
            why: format!("{num_slots} slots do not fit in i32"),
        });
    }
    check_token_slots(&inp.slots, batch, num_slots)?;
    if let Some(s) = out.snapshots.as_ref() {
        check_len("snapshots", s.len(), batch * max_seqlen * per_slot, || {
            format!("[B={batch}, T={max_seqlen}, HV={}, V={}, K={}]", d.hv, d.v, d.k)
        })?;
    }
    Ok(RecurrentPlan {
        num_tokens: n,
        batch,
        max_seqlen,
        num_slots,
    })
}

/// Runs kernel R on host memory (Reference or Emulated) after validating every input. On
/// device memory: [`Stream::recurrent`].
pub fn recurrent(backend: Backend, inp: &RecurrentInputs<'_>, out: &mut RecurrentOutputs<'_>) -> Result<RecurrentPlan> {
    recurrent_with_records(backend, inp, out, DType::F32)
}

/// [`recurrent`] updating the state as a buffered-decode ring of `records` holds its records:
/// f32 is [`recurrent`] itself; the activations' f16/bf16 rounds each token's corrected delta `u`
/// and key to it before the rank-1 update, so the state and outputs are those of kernel D with a
/// ring of that dtype ([`crate::DecodeRing::attach_with_records`]), bit for bit on the same
/// backend.
pub fn recurrent_with_records(
    backend: Backend,
    inp: &RecurrentInputs<'_>,
    out: &mut RecurrentOutputs<'_>,
    records: DType,
) -> Result<RecurrentPlan> {
    let plan = validate(backend, inp, out)?;
    crate::checks::params::record_dtype("record_dtype", records.to_ffi(), Some(inp.q.dtype().to_ffi()))?;
    match backend {
        Backend::Reference => recurrent_reference(inp, &plan, out, records),
        Backend::Emulated | Backend::Cuda => {
            on_host(backend, "recurrent", |exec| run_kernel(exec, inp, &plan, out, records))?
        }
    }
    Ok(plan)
}

impl Stream {
    /// Kernel R on device memory, enqueued on this stream (no allocation, copy or
    /// synchronisation; bad device-side rows flag the stream's error word).
    pub fn recurrent(
        &self,
        inp: &RecurrentInputs<'_, Device>,
        out: &mut RecurrentOutputs<'_, Device>,
    ) -> Result<RecurrentPlan> {
        self.recurrent_with_records(inp, out, DType::F32)
    }

    /// [`recurrent_with_records`] on device memory.
    pub fn recurrent_with_records(
        &self,
        inp: &RecurrentInputs<'_, Device>,
        out: &mut RecurrentOutputs<'_, Device>,
        records: DType,
    ) -> Result<RecurrentPlan> {
        let plan = validate(self.backend(), inp, out)?;
        run_kernel(&Exec::on(self), inp, &plan, out, records)?;
        Ok(plan)
    }
}

fn run_kernel<M: Memory>(
    exec: &Exec,
    inp: &RecurrentInputs<'_, M>,
    plan: &RecurrentPlan,
    out: &mut RecurrentOutputs<'_, M>,
    records: DType,
) -> Result<()> {
    let base = Base {
        state: exec.slice_mut("state", &mut out.state)?,
        slots: exec.slice("slots", &inp.slots)?,
        batch: plan.batch,
        num_slots: plan.num_slots,
        num_layers: 1,
        layer: 0,
        dims: inp.dims,
        dtype: inp.q.dtype(),
        variant: inp.variant,
        qk_l2norm: inp.qk_l2norm,
    };
    let params = ffi::rssm_recurrent_params {
        base: base.to_ffi(exec),
        tokens: token_params(exec, inp, &mut out.o)?,
        cu_seqlens: exec.slice("cu_seqlens", &inp.cu_seqlens)?,
        snapshots: match out.snapshots.as_mut() {
            Some(s) => exec.slice_mut("snapshots", s)?,
            None => std::ptr::null_mut(),
        },
        num_tokens: plan.num_tokens as i32,
        max_seqlen: plan.max_seqlen as i32,
        write_state: out.write_state as i32,
        record_dtype: records.to_ffi(),
    };
    // The checks the C ABI runs on the same params (one source: `checks::params`).
    crate::checks::params::recurrent(&params, exec.backend)?;
    let st = launch!(exec, rssm_recurrent, rssm_emu_recurrent, &params);
    check_status("recurrent", exec.backend, st)
}

/// The default `scale`: `K^-0.5`.
pub fn default_scale(k: usize) -> f32 {
    1.0 / (k as f32).sqrt()
}

/// The `Reference` backend: f32 maths, results stored like a kernel stores them.
fn recurrent_reference(
    inp: &RecurrentInputs<'_>,
    plan: &RecurrentPlan,
    out: &mut RecurrentOutputs<'_>,
    records: DType,
) {
    let d = inp.dims;
    let res = reference::recurrent_with_records::<f32>(inp, out.state, records);
    let row = d.hv * d.v;
    for tok in 0..plan.num_tokens {
        for i in 0..row {
            out.o.set(tok, i, res.o[tok * row + i]);
        }
    }
    let per_slot = d.state_elems();
    for r in 0..plan.batch {
        let Some(state) = &res.final_state[r] else { continue };
        let slot = inp.slots[r] as usize;
        if out.write_state {
            out.state[slot * per_slot..(slot + 1) * per_slot].copy_from_slice(state);
        }
        if let (Some(snaps), Some(dst)) = (&res.snapshots[r], out.snapshots.as_deref_mut()) {
            let base = r * plan.max_seqlen * per_slot;
            dst[base..base + snaps.len()].copy_from_slice(snaps);
        }
    }
}
