//! Kernel R, the recurrent baseline (SPEC §4 R): safe wrapper over all three backends.
//!
//! `recurrent(backend, &inputs, &mut outputs)` checks every shape, dtype, stride, slot and
//! sequence length first (typed [`Error`]s), then runs the Rust reference, the emulated kernel or
//! the CUDA kernel. Launcher: `csrc/kernels/recurrent.cu`; device code:
//! `csrc/include/replayssm/device/recurrent.cuh`; reference: [`crate::reference`].

use crate::backend::Backend;
use crate::dtype::{ActView, ActViewMut};
use crate::error::{Error, Result, Status};
use crate::ffi;
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

/// Checks everything a launch depends on; returns the derived sizes.
pub fn validate(backend: Backend, inp: &RecurrentInputs<'_>, out: &RecurrentOutputs<'_>) -> Result<RecurrentPlan> {
    let d = inp.dims;
    d.validate()?;
    if backend != Backend::Reference && !KERNEL_HEAD_DIMS.contains(&d.k) {
        return Err(Error::Unsupported {
            backend,
            what: format!("key head dim K = {}", d.k),
            why: format!("kernels are compiled for K in {KERNEL_HEAD_DIMS:?}"),
        });
    }
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
    check_view_mut("o", &out.o, n, d.hv * d.v)?;
    check_dtype("k", inp.k.dtype(), dtype)?;
    check_dtype("v", inp.v.dtype(), dtype)?;
    check_dtype("o", out.o.dtype(), dtype)?;
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
    let (batch, max_seqlen) = check_seqlens(inp.cu_seqlens, n)?;
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
    if !inp.scale.is_finite() {
        return Err(Error::InvalidValue {
            what: "scale",
            why: format!("{} is not finite", inp.scale),
        });
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
        Backend::Emulated => run_emulated(inp, &plan, out)?,
        Backend::Cuda => run_cuda(inp, &plan, out)?,
    }
    Ok(plan)
}

/// Pointers of one launch (host memory for the emulator, device memory for CUDA).
struct Pointers {
    q: *const u8,
    k: *const u8,
    v: *const u8,
    a: *const u8,
    b: *const u8,
    a_log: *const f32,
    dt_bias: *const f32,
    g: *const f32,
    beta: *const f32,
    cu_seqlens: *const i32,
    slots: *const i32,
    state: *mut f32,
    snapshots: *mut f32,
    o: *mut u8,
    error_word: *mut u32,
}

fn params(
    inp: &RecurrentInputs<'_>,
    plan: &RecurrentPlan,
    write_state: bool,
    p: Pointers,
) -> ffi::rssm_recurrent_params {
    let d = inp.dims;
    let (a_stride, b_stride) = match inp.gate {
        Gate::Raw { a, b, .. } => (a.stride as i64, b.stride as i64),
        Gate::Precomputed { .. } => (0, 0),
    };
    ffi::rssm_recurrent_params {
        q: p.q.cast(),
        k: p.k.cast(),
        v: p.v.cast(),
        a: p.a.cast(),
        b: p.b.cast(),
        A_log: p.a_log,
        dt_bias: p.dt_bias,
        g: p.g,
        beta: p.beta,
        cu_seqlens: p.cu_seqlens,
        slots: p.slots,
        state: p.state,
        snapshots: p.snapshots,
        o: p.o.cast(),
        error_word: p.error_word,
        q_stride: inp.q.stride as i64,
        k_stride: inp.k.stride as i64,
        v_stride: inp.v.stride as i64,
        a_stride,
        b_stride,
        o_stride: 0, // set by the caller from the output view
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
        write_state: write_state as i32,
        reserved: 0,
    }
}

fn view_ptr(v: &ActView<'_>) -> *const u8 {
    // Offset within bounds: checked by validate().
    v.buf.as_bytes()[v.offset * v.dtype().size()..].as_ptr()
}

fn emulator_error(kernel: &'static str, status: Status) -> Error {
    // SAFETY: returns a NUL-terminated thread-local string owned by the emulator.
    let message = unsafe { std::ffi::CStr::from_ptr(ffi::rssm_emu_last_error()) }
        .to_string_lossy()
        .into_owned();
    Error::Kernel {
        kernel,
        status,
        message: if message.is_empty() {
            "rejected by rssm_recurrent_can_implement".into()
        } else {
            message
        },
    }
}

fn run_emulated(inp: &RecurrentInputs<'_>, plan: &RecurrentPlan, out: &mut RecurrentOutputs<'_>) -> Result<()> {
    let mut error_word = 0u32;
    let (a, b, a_log, dt_bias, g, beta) = gate_host_ptrs(&inp.gate);
    let o_offset = out.o.offset * out.o.dtype().size();
    let o_stride = out.o.stride as i64;
    let snapshots = out
        .snapshots
        .as_deref_mut()
        .map_or(std::ptr::null_mut(), |s| s.as_mut_ptr());
    let mut p = params(
        inp,
        plan,
        out.write_state,
        Pointers {
            q: view_ptr(&inp.q),
            k: view_ptr(&inp.k),
            v: view_ptr(&inp.v),
            a,
            b,
            a_log,
            dt_bias,
            g,
            beta,
            cu_seqlens: inp.cu_seqlens.as_ptr(),
            slots: inp.slots.as_ptr(),
            state: out.state.as_mut_ptr(),
            snapshots,
            o: out.o.buf.as_bytes_mut()[o_offset..].as_mut_ptr(),
            error_word: &mut error_word,
        },
    );
    p.o_stride = o_stride;
    // SAFETY: every pointer covers the extent validate() checked; the emulator is synchronous.
    let st = unsafe { ffi::rssm_emu_recurrent(&p, std::ptr::null_mut()) };
    Status::check(st).map_err(|s| emulator_error("recurrent", s))?;
    if error_word != 0 {
        return Err(Error::DeviceReported {
            kernel: "recurrent",
            bits: error_word,
        });
    }
    Ok(())
}

type GatePtrs = (*const u8, *const u8, *const f32, *const f32, *const f32, *const f32);

fn gate_host_ptrs(gate: &Gate<'_>) -> GatePtrs {
    use std::ptr::null;
    match gate {
        Gate::Raw { a, b, a_log, dt_bias } => (
            view_ptr(a),
            view_ptr(b),
            a_log.as_ptr(),
            dt_bias.as_ptr(),
            null(),
            null(),
        ),
        Gate::Precomputed { g, beta } => (null(), null(), null(), null(), g.as_ptr(), beta.as_ptr()),
    }
}

#[cfg(not(replayssm_cuda))]
fn run_cuda(_: &RecurrentInputs<'_>, _: &RecurrentPlan, _: &mut RecurrentOutputs<'_>) -> Result<()> {
    Err(Error::BackendUnavailable {
        backend: Backend::Cuda,
        reason: crate::cuda::device().err().unwrap_or_default(),
    })
}

#[cfg(replayssm_cuda)]
fn run_cuda(inp: &RecurrentInputs<'_>, plan: &RecurrentPlan, out: &mut RecurrentOutputs<'_>) -> Result<()> {
    use crate::cuda::{device, DeviceBuffer};
    use crate::dtype::bytes_of;

    device().map_err(|reason| Error::BackendUnavailable {
        backend: Backend::Cuda,
        reason,
    })?;
    let upload_view = |v: &ActView<'_>| -> Result<(DeviceBuffer, usize)> {
        Ok((DeviceBuffer::from_bytes(v.buf.as_bytes())?, v.offset * v.dtype().size()))
    };
    let at = |b: &(DeviceBuffer, usize)| -> *const u8 {
        // The offset is within the allocation (validated).
        b.0.ptr().cast::<u8>().wrapping_add(b.1)
    };
    let q = upload_view(&inp.q)?;
    let k = upload_view(&inp.k)?;
    let v = upload_view(&inp.v)?;
    let cu = DeviceBuffer::from_bytes(bytes_of(inp.cu_seqlens))?;
    let slots = DeviceBuffer::from_bytes(bytes_of(inp.slots))?;
    let state = DeviceBuffer::from_bytes(bytes_of(out.state))?;
    let o = DeviceBuffer::from_bytes(out.o.buf.as_bytes())?;
    let err = DeviceBuffer::from_bytes(bytes_of(&[0u32]))?;
    let snaps = match out.snapshots.as_deref() {
        Some(s) => Some(DeviceBuffer::from_bytes(bytes_of(s))?),
        None => None,
    };
    let null = std::ptr::null();
    let (gate_bufs, a, b, a_log, dt_bias, g, beta);
    match inp.gate {
        Gate::Raw {
            a: av,
            b: bv,
            a_log: al,
            dt_bias: db,
        } => {
            let bufs = (
                upload_view(&av)?,
                upload_view(&bv)?,
                DeviceBuffer::from_bytes(bytes_of(al))?,
                DeviceBuffer::from_bytes(bytes_of(db))?,
            );
            (a, b, a_log, dt_bias, g, beta) = (
                at(&bufs.0),
                at(&bufs.1),
                bufs.2.ptr() as *const f32,
                bufs.3.ptr() as *const f32,
                null,
                null,
            );
            gate_bufs = vec![bufs.0 .0, bufs.1 .0, bufs.2, bufs.3];
        }
        Gate::Precomputed { g: gv, beta: bv } => {
            let (gb, bb) = (
                DeviceBuffer::from_bytes(bytes_of(gv))?,
                DeviceBuffer::from_bytes(bytes_of(bv))?,
            );
            (a, b, a_log, dt_bias, g, beta) = (
                std::ptr::null(),
                std::ptr::null(),
                null,
                null,
                gb.ptr() as *const f32,
                bb.ptr() as *const f32,
            );
            gate_bufs = vec![gb, bb];
        }
    }
    let o_offset = out.o.offset * out.o.dtype().size();
    let mut p = params(
        inp,
        plan,
        out.write_state,
        Pointers {
            q: at(&q),
            k: at(&k),
            v: at(&v),
            a,
            b,
            a_log,
            dt_bias,
            g,
            beta,
            cu_seqlens: cu.ptr() as *const i32,
            slots: slots.ptr() as *const i32,
            state: state.ptr() as *mut f32,
            snapshots: snaps.as_ref().map_or(std::ptr::null_mut(), |s| s.ptr() as *mut f32),
            o: o.ptr().cast::<u8>().wrapping_add(o_offset),
            error_word: err.ptr() as *mut u32,
        },
    );
    p.o_stride = out.o.stride as i64;
    // SAFETY: device buffers cover the validated extents; null stream = legacy default stream.
    let st = unsafe { ffi::rssm_recurrent(&p, std::ptr::null_mut()) };
    Status::check(st).map_err(|status| Error::Kernel {
        kernel: "recurrent",
        status,
        message: crate::cuda::error_string(unsafe { ffi::rssm_cuda_last_error() }),
    })?;
    crate::cuda::synchronize()?;
    o.copy_to(out.o.buf.as_bytes_mut())?;
    state.copy_to(crate::dtype::bytes_of_mut(out.state))?;
    if let (Some(d), Some(h)) = (&snaps, out.snapshots.as_deref_mut()) {
        d.copy_to(crate::dtype::bytes_of_mut(h))?;
    }
    let mut word = [0u32];
    err.copy_to(crate::dtype::bytes_of_mut(&mut word))?;
    drop(gate_bufs);
    if word[0] != 0 {
        return Err(Error::DeviceReported {
            kernel: "recurrent",
            bits: word[0],
        });
    }
    Ok(())
}

/// The default `scale`: `K^-0.5`.
pub fn default_scale(k: usize) -> f32 {
    1.0 / (k as f32).sqrt()
}
