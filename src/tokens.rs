//! The token inputs kernels R, V, VT and D share (q, k, v, gate, sequence lengths, slots): their
//! struct, their checks and their staging into a launch's params.

use crate::backend::Backend;
use crate::checks::{check_dtype, check_kernel_head_dim, check_len, check_seqlens, check_view, check_view_mut};
use crate::dtype::{ActView, ActViewMut};
use crate::error::{Error, Result};
use crate::problem::{Gate, HeadDims, Variant};
use crate::runtime::launch::{elem_ptr, Memory};

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
            check_len("A_log", a_log.len(), d.hv, || format!("[HV={}]", d.hv))?;
            check_len("dt_bias", dt_bias.len(), d.hv * gw, || format!("[HV={}, {gw}]", d.hv))?;
        }
        Gate::Precomputed { g, beta } => {
            check_len("g", g.len(), n * d.hv * gw, || format!("[N={n}, HV={}, {gw}]", d.hv))?;
            check_len("beta", beta.len(), n * d.hv, || format!("[N={n}, HV={}]", d.hv))?;
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
