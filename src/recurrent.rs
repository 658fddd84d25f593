//! Kernel R, the recurrent baseline (SPEC §4 R): safe wrapper over all three backends.
//!
//! `recurrent(backend, &inputs, &mut outputs)` checks every shape, dtype, stride, slot and
//! sequence length first (typed [`Error`]s), then runs the Rust reference, the emulated kernel or
//! the CUDA kernel. Launcher: `csrc/kernels/recurrent.cu`; device code:
//! `csrc/include/replayssm/device/recurrent.cuh`; reference: [`crate::reference`].

use crate::backend::Backend;
use crate::dtype::{ActView, ActViewMut};
use crate::error::{Error, Result};
use crate::ffi;
use crate::launch::{check_error_word, check_status, elem_ptr, launch, Memory};
use crate::problem::{
    check_dtype, check_len, check_seqlens, check_slots, check_view, check_view_mut, Gate, HeadDims, Variant,
};
use crate::reference;

/// Inputs of kernel R. Tokens are packed: request `r` owns `cu_seqlens[r]..cu_seqlens[r+1]`.
#[derive(Clone, Copy, Debug)]
pub struct RecurrentInputs<'a> {
    pub variant: Variant,
    pub dims: HeadDims,
    /// `[N, H, K]`
    pub q: ActView<'a>,
    /// `[N, H, K]`
    pub k: ActView<'a>,
    /// `[N, HV, V]`
    pub v: ActView<'a>,
    pub gate: Gate<'a>,
    /// `[B + 1]`
    pub cu_seqlens: &'a [i32],
    /// `[B]`, `-1` = null request (zero outputs, nothing else touched).
    pub slots: &'a [i32],
    /// Multiplies q after normalisation; usually `K^-0.5`.
    pub scale: f32,
    /// Normalise q and k in-kernel (SPEC §3 step 3).
    pub qk_l2norm: bool,
}

/// Outputs of kernel R.
#[derive(Debug)]
pub struct RecurrentOutputs<'a> {
    /// `[N, HV, V]`, same dtype as q.
    pub o: ActViewMut<'a>,
    /// Checkpoint pool `[NS, HV, V, K]`, read at each request's slot.
    pub state: &'a mut [f32],
    /// Store the final state back into the request's slot.
    pub write_state: bool,
    /// `[B, T, HV, V, K]` with `T` the longest request: state after each token. Entries of null
    /// requests and past a request's length are left untouched.
    pub snapshots: Option<&'a mut [f32]>,
}

/// What validation derived from the inputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecurrentPlan {
    pub num_tokens: usize,
    pub batch: usize,
    pub max_seqlen: usize,
    pub num_slots: usize,
}

/// Head dims the CUDA and emulated kernels are compiled for.
pub const KERNEL_HEAD_DIMS: [usize; 4] = [32, 64, 128, 256];

/// The kernels (not the reference) are compiled for K in [`KERNEL_HEAD_DIMS`] only.
pub fn check_kernel_head_dim(backend: Backend, k: usize) -> Result<()> {
    if backend != Backend::Reference && !KERNEL_HEAD_DIMS.contains(&k) {
        return Err(Error::Unsupported {
            backend,
            what: format!("key head dim K = {k}"),
            why: format!("kernels are compiled for K in {KERNEL_HEAD_DIMS:?}"),
        });
    }
    Ok(())
}

/// Token-input checks shared by kernels R and V: head dims, views, dtypes, gate, `cu_seqlens`.
/// Returns `(num_tokens, batch, max_seqlen)`.
pub fn validate_tokens(
    backend: Backend,
    inp: &RecurrentInputs<'_>,
    o: &ActViewMut<'_>,
) -> Result<(usize, usize, usize)> {
    let d = inp.dims;
    d.validate()?;
    check_kernel_head_dim(backend, d.k)?;
    let n = inp.q.tokens;
    if n > i32::MAX as usize {
        return Err(Error::InvalidValue {
            what: "token count",
            why: format!("{n} tokens do not fit in i32"),
        });
    }
    let dtype = inp.q.dtype();
    check_view("q", &inp.q, n, d.h * d.k)?;
    check_view("k", &inp.k, n, d.h * d.k)?;
    check_view("v", &inp.v, n, d.hv * d.v)?;
    check_view_mut("o", o, n, d.hv * d.v)?;
    check_dtype("k", inp.k.dtype(), dtype)?;
    check_dtype("v", inp.v.dtype(), dtype)?;
    check_dtype("o", o.dtype(), dtype)?;
    let gw = d.gate_width(inp.variant);
    match inp.gate {
        Gate::Raw { a, b, a_log, dt_bias } => {
            check_view("a", &a, n, d.hv * gw)?;
            check_view("b", &b, n, d.hv)?;
            check_dtype("a", a.dtype(), dtype)?;
            check_dtype("b", b.dtype(), dtype)?;
            check_len("A_log", a_log.len(), d.hv, format!("[HV={}]", d.hv))?;
            check_len("dt_bias", dt_bias.len(), d.hv * gw, format!("[HV={}, {gw}]", d.hv))?;
        }
        Gate::Precomputed { g, beta } => {
            check_len("g", g.len(), n * d.hv * gw, format!("[N={n}, HV={}, {gw}]", d.hv))?;
            check_len("beta", beta.len(), n * d.hv, format!("[N={n}, HV={}]", d.hv))?;
        }
    }
    if !inp.scale.is_finite() {
        return Err(Error::InvalidValue {
            what: "scale",
            why: format!("{} is not finite", inp.scale),
        });
    }
    let (batch, max_seqlen) = check_seqlens(inp.cu_seqlens, n)?;
    Ok((n, batch, max_seqlen))
}

/// Checks everything a launch of kernel R depends on; returns the derived sizes.
pub fn validate(backend: Backend, inp: &RecurrentInputs<'_>, out: &RecurrentOutputs<'_>) -> Result<RecurrentPlan> {
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
    check_slots(inp.slots, batch, num_slots)?;
    if let Some(s) = out.snapshots.as_deref() {
        check_len(
            "snapshots",
            s.len(),
            batch * max_seqlen * per_slot,
            format!("[B={batch}, T={max_seqlen}, HV={}, V={}, K={}]", d.hv, d.v, d.k),
        )?;
    }
    Ok(RecurrentPlan {
        num_tokens: n,
        batch,
        max_seqlen,
        num_slots,
    })
}

/// Runs kernel R on `backend` after validating every input.
pub fn recurrent(backend: Backend, inp: &RecurrentInputs<'_>, out: &mut RecurrentOutputs<'_>) -> Result<RecurrentPlan> {
    let plan = validate(backend, inp, out)?;
    match backend {
        Backend::Reference => reference::recurrent_into(inp, &plan, out),
        Backend::Emulated | Backend::Cuda => run_kernel(backend, inp, &plan, out)?,
    }
    Ok(plan)
}

/// Device pointers of the token inputs shared by kernels R and V.
pub(crate) struct TokenPtrs {
    pub q: *const u8,
    pub k: *const u8,
    pub v: *const u8,
    pub a: *const u8,
    pub b: *const u8,
    pub a_log: *const f32,
    pub dt_bias: *const f32,
    pub g: *const f32,
    pub beta: *const f32,
    pub cu_seqlens: *const i32,
    pub slots: *const i32,
    pub a_stride: i64,
    pub b_stride: i64,
}

pub(crate) fn view_input(mem: &mut Memory, v: &ActView<'_>) -> Result<*const u8> {
    Ok(elem_ptr(mem.input(v.buf.as_bytes())?, v.offset, v.dtype().size()))
}

/// Stages the token inputs (q, k, v, gate, cu_seqlens, slots) of R or V.
pub(crate) fn stage_tokens(mem: &mut Memory, inp: &RecurrentInputs<'_>) -> Result<TokenPtrs> {
    let null = std::ptr::null();
    let (a, b, a_log, dt_bias, g, beta, a_stride, b_stride) = match inp.gate {
        Gate::Raw { a, b, a_log, dt_bias } => (
            view_input(mem, &a)?,
            view_input(mem, &b)?,
            mem.input(a_log)?,
            mem.input(dt_bias)?,
            null,
            null,
            a.stride as i64,
            b.stride as i64,
        ),
        Gate::Precomputed { g, beta } => (
            std::ptr::null(),
            std::ptr::null(),
            null,
            null,
            mem.input(g)?,
            mem.input(beta)?,
            0,
            0,
        ),
    };
    Ok(TokenPtrs {
        q: view_input(mem, &inp.q)?,
        k: view_input(mem, &inp.k)?,
        v: view_input(mem, &inp.v)?,
        a,
        b,
        a_log,
        dt_bias,
        g,
        beta,
        cu_seqlens: mem.input(inp.cu_seqlens)?,
        slots: mem.input(inp.slots)?,
        a_stride,
        b_stride,
    })
}

/// Stages an output view; returns the pointer to its first element.
pub(crate) fn stage_output_view(mem: &mut Memory, o: &mut ActViewMut<'_>) -> Result<*mut u8> {
    let size = o.dtype().size();
    let offset = o.offset;
    Ok(mem.output(o.buf.as_bytes_mut())?.wrapping_add(offset * size))
}

fn run_kernel(
    backend: Backend,
    inp: &RecurrentInputs<'_>,
    plan: &RecurrentPlan,
    out: &mut RecurrentOutputs<'_>,
) -> Result<()> {
    let d = inp.dims;
    let mut mem = Memory::for_backend(backend)?;
    let mut word = [0u32];
    let t = stage_tokens(&mut mem, inp)?;
    let params = ffi::rssm_recurrent_params {
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
        slots: t.slots,
        state: mem.output(out.state)?,
        snapshots: match out.snapshots.as_deref_mut() {
            Some(s) => mem.output(s)?,
            None => std::ptr::null_mut(),
        },
        o: stage_output_view(&mut mem, &mut out.o)?.cast(),
        error_word: mem.output(&mut word)?,
        q_stride: inp.q.stride as i64,
        k_stride: inp.k.stride as i64,
        v_stride: inp.v.stride as i64,
        a_stride: t.a_stride,
        b_stride: t.b_stride,
        o_stride: out.o.stride as i64,
        num_tokens: plan.num_tokens as i32,
        batch: plan.batch as i32,
        max_seqlen: plan.max_seqlen as i32,
        num_slots: plan.num_slots as i32,
        H: d.h as i32,
        HV: d.hv as i32,
        K: d.k as i32,
        V: d.v as i32,
        scale: inp.scale,
        dtype: inp.q.dtype().to_ffi(),
        variant: inp.variant.to_ffi(),
        qk_l2norm: inp.qk_l2norm as i32,
        write_state: out.write_state as i32,
        reserved: 0,
    };
    let st = launch!(backend, rssm_recurrent, rssm_emu_recurrent, &params);
    check_status("recurrent", backend, st)?;
    mem.finish()?;
    check_error_word("recurrent", word[0])
}

/// The default `scale`: `K^-0.5`.
pub fn default_scale(k: usize) -> f32 {
    1.0 / (k as f32).sqrt()
}
