//! The token inputs kernels R, V, VT and D share (q, k, v, gate, sequence lengths, slots): their
//! struct, their checks and their pointers in a launch's params. Generic over where they live
//! ([`Host`] memory, or [`Device`] memory through a [`crate::memory::Stream`]).

use crate::backend::Backend;
use crate::checks::{
    check_batch, check_count, check_dtype, check_kernel_head_dim, check_len, check_seqlens, check_slots, check_view,
};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ffi;
use crate::memory::{ActLayout, ActLayoutMut, Device, Host, Memory, SeqlensRef, SliceRef};
use crate::problem::{HeadDims, Variant};
use crate::runtime::launch::Exec;

/// The safe gate's bound: finite and negative, so every `g` lies in `[bound, 0]`.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
pub struct LowerBound(f32);

impl LowerBound {
    /// The bound, refused unless finite and negative (the rule of the C ABI's `lower_bound`;
    /// 0 there means the softplus gate, [`GateForm::Softplus`] here).
    pub fn new(bound: f32) -> Result<Self> {
        crate::checks::params::lower_bound(bound)?;
        if bound == 0.0 {
            return Err(Error::BadParam(format!(
                "lower_bound = {bound}, must be finite and negative (0 is the softplus gate: GateForm::Softplus)"
            )));
        }
        Ok(LowerBound(bound))
    }

    pub fn get(self) -> f32 {
        self.0
    }
}

/// How a raw gate forms its log decay `g` from `x = a + dt_bias` (design §3 step 1).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum GateForm {
    /// `g = -exp(A_log) softplus(x)`, softplus linear above 20 (GDN's and KDA's gate).
    #[default]
    Softplus,
    /// The safe gate of Kimi's KDA (SGLang's and vLLM's `lower_bound`):
    /// `g = lower_bound sigmoid(exp(A_log) x)`. KDA only (refused with GDN, whose kernels compile
    /// the softplus form alone).
    Bounded(LowerBound),
}

impl GateForm {
    /// The form the C ABI's `lower_bound` field names: 0 (either sign) = softplus, else the
    /// safe gate's bound (refused unless finite and negative).
    pub fn from_lower_bound(lower_bound: f32) -> Result<Self> {
        if lower_bound == 0.0 {
            return Ok(GateForm::Softplus);
        }
        LowerBound::new(lower_bound).map(GateForm::Bounded)
    }

    /// The C ABI's `lower_bound` of this form (0 = softplus).
    pub fn lower_bound(self) -> f32 {
        match self {
            GateForm::Softplus => 0.0,
            GateForm::Bounded(b) => b.0,
        }
    }
}

/// The raw gate inputs of every token: `g` and `beta` are formed in-kernel (design §3 steps 1-2).
#[derive(Clone, Copy, Debug)]
pub struct RawGate<'a, M: Memory = Host> {
    /// `[N, HV]` (KDA: `[N, HV, K]`), act dtype.
    pub a: M::View<'a>,
    /// `[N, HV]`, act dtype.
    pub b: M::View<'a>,
    /// `[HV]`.
    pub a_log: M::Slice<'a, f32>,
    /// `[HV]` (KDA: `[HV, K]`).
    pub dt_bias: M::Slice<'a, f32>,
    /// How `g` is formed from them.
    pub form: GateForm,
}

impl<M: Memory> RawGate<'_, M> {
    /// Shapes and dtypes against `n` tokens of `dtype`, and the form against the variant (here
    /// too, so that the Reference backend, which builds no launch params, refuses what the
    /// kernels do).
    fn check(&self, n: usize, d: &HeadDims, variant: Variant, dtype: DType) -> Result<()> {
        crate::checks::params::gate_form(self.form.lower_bound(), true, variant == Variant::Kda)?;
        let gw = d.gate_width(variant);
        check_view("a", &self.a, n, d.hv * gw)?;
        check_view("b", &self.b, n, d.hv)?;
        check_dtype("a", self.a.dtype(), dtype)?;
        check_dtype("b", self.b.dtype(), dtype)?;
        check_len("A_log", self.a_log.len(), d.hv, || format!("[HV={}]", d.hv))?;
        check_len("dt_bias", self.dt_bias.len(), d.hv * gw, || {
            format!("[HV={}, {gw}]", d.hv)
        })
    }

    /// The gate fields of the token params, each pointer checked to be reachable by the launch.
    fn fill(&self, exec: &Exec, t: &mut ffi::rssm_token_params) -> Result<()> {
        t.lower_bound = self.form.lower_bound();
        t.a = exec.view("a", &self.a)?.cast();
        t.b = exec.view("b", &self.b)?.cast();
        t.A_log = exec.slice("A_log", &self.a_log)?;
        t.dt_bias = exec.slice("dt_bias", &self.dt_bias)?;
        t.a_stride = self.a.layout().3 as i64;
        t.b_stride = self.b.layout().3 as i64;
        Ok(())
    }
}

/// The gate of every token: raw inputs or precomputed g/beta.
#[derive(Clone, Copy, Debug)]
pub enum Gate<'a, M: Memory = Host> {
    Raw(RawGate<'a, M>),
    Precomputed {
        /// `[N, HV]` (KDA: `[N, HV, K]`), log decay.
        g: M::Slice<'a, f32>,
        /// `[N, HV]`.
        beta: M::Slice<'a, f32>,
    },
}

// A gate is invariant in its lifetime (its fields are projections of `M`): these shorten it.
macro_rules! shorten_gate {
    ($m:ty) => {
        impl<'a> Gate<'a, $m> {
            /// The same gate, borrowed for a shorter lifetime.
            pub fn shorten<'s>(self) -> Gate<'s, $m>
            where
                'a: 's,
            {
                match self {
                    Gate::Raw(r) => Gate::Raw(RawGate {
                        a: r.a,
                        b: r.b,
                        a_log: r.a_log,
                        dt_bias: r.dt_bias,
                        form: r.form,
                    }),
                    Gate::Precomputed { g, beta } => Gate::Precomputed { g, beta },
                }
            }
        }
    };
}
shorten_gate!(Host);
shorten_gate!(Device);

/// Declares an inputs struct: the token fields every kernel that takes tokens reads (written
/// once here), then the struct's own fields.
macro_rules! token_inputs {
    ($(#[$meta:meta])* pub struct $name:ident { $($(#[$fmeta:meta])* pub $field:ident: $ty:ty,)* }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug)]
        pub struct $name<'a, M: $crate::memory::Memory = $crate::memory::Host> {
            pub variant: $crate::problem::Variant,
            pub dims: $crate::problem::HeadDims,
            /// `[N, H, K]`
            pub q: M::View<'a>,
            /// `[N, H, K]`
            pub k: M::View<'a>,
            /// `[N, HV, V]`
            pub v: M::View<'a>,
            pub gate: $crate::tokens::Gate<'a, M>,
            /// Multiplies q after normalisation; usually `K^-0.5`.
            pub scale: f32,
            /// Normalise q and k in-kernel (design §3 step 3).
            pub qk_l2norm: bool,
            $($(#[$fmeta])* pub $field: $ty,)*
        }
    };
}
pub(crate) use token_inputs;

token_inputs! {
    /// Inputs of kernel R (and V, VT). Tokens are packed: request `r` owns
    /// `cu_seqlens[r]..cu_seqlens[r+1]`.
    pub struct RecurrentInputs {
        /// `[B + 1]` (on the device with the bound the caller states: [`crate::DeviceSeqlens`]).
        pub cu_seqlens: M::Seqlens<'a>,
        /// `[B]`, `-1` = null request (zero outputs, nothing else touched).
        pub slots: M::Slice<'a, i32>,
    }
}

/// Device inputs, for the kernel calls on a [`crate::memory::Stream`].
pub type DeviceInputs<'a> = RecurrentInputs<'a, Device>;

/// Token-input checks shared by kernels R and V: head dims, views, dtypes, gate, `cu_seqlens`
/// (read on the host only where it is host memory). Returns `(num_tokens, batch, max_seqlen)`.
pub fn validate_tokens<M: Memory>(
    backend: Backend,
    inp: &RecurrentInputs<'_, M>,
    o: &impl ActLayout,
) -> Result<(usize, usize, usize)> {
    let d = inp.dims;
    d.validate()?;
    check_kernel_head_dim(backend, d.k)?;
    let n = inp.q.layout().1;
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
    check_view("o", o, n, d.hv * d.v)?;
    check_dtype("k", inp.k.dtype(), dtype)?;
    check_dtype("v", inp.v.dtype(), dtype)?;
    check_dtype("o", o.dtype(), dtype)?;
    match inp.gate {
        Gate::Raw(raw) => raw.check(n, &d, inp.variant, dtype)?,
        Gate::Precomputed { g, beta } => {
            let gw = d.gate_width(inp.variant);
            check_len("g", g.len(), n * d.hv * gw, || format!("[N={n}, HV={}, {gw}]", d.hv))?;
            check_len("beta", beta.len(), n * d.hv, || format!("[N={n}, HV={}]", d.hv))?;
        }
    }
    crate::checks::params::scale(inp.scale)?;
    let (batch, max_seqlen) = seqlens(&inp.cu_seqlens, n)?;
    Ok((n, batch, max_seqlen))
}

/// `(batch, max_seqlen)` of `cu_seqlens`: read and checked on the host, or, in device memory,
/// from its length and the bound the caller states (the kernels check the contents).
pub(crate) fn seqlens(cu: &impl SeqlensRef, num_tokens: usize) -> Result<(usize, usize)> {
    if let Some(cu) = cu.host() {
        return check_seqlens(cu, num_tokens);
    }
    if cu.len() < 2 {
        return Err(Error::SeqLens(format!("needs B + 1 >= 2 entries, got {}", cu.len())));
    }
    let batch = cu.len() - 1;
    check_batch(batch)?;
    // As on the host: at least 1 (an all-empty batch launches and does nothing).
    let max_seqlen = cu.max_seqlen().unwrap_or(num_tokens).max(1);
    if max_seqlen > num_tokens.max(1) {
        return Err(Error::InvalidValue {
            what: "max_seqlen",
            why: format!("{max_seqlen} is more than the {num_tokens} tokens of the launch"),
        });
    }
    Ok((batch, max_seqlen))
}

/// `slots [B]`: its length, and where the host can read it, the rule of
/// [`crate::checks::check_slots`] (on the device the kernels apply it and flag the error word).
pub(crate) fn check_token_slots(slots: &impl SliceRef<i32>, batch: usize, num_slots: usize) -> Result<()> {
    match slots.host() {
        Some(s) => check_slots(s, batch, num_slots),
        None => check_count("slots", slots.len(), batch, "one per request"),
    }
}

/// The token part of R's, V's and D's params (`rssm_token_params`): the inputs, the gate, the
/// output `o` and their strides, and the scale; each pointer checked to be memory the launch can
/// reach. Filled here once for the three kernels.
pub(crate) fn token_params<M: Memory>(
    exec: &Exec,
    inp: &RecurrentInputs<'_, M>,
    o: &mut impl ActLayoutMut,
) -> Result<ffi::rssm_token_params> {
    // q, k, v first: a refusal names the first tensor a caller would look at.
    let (q, k, v) = (
        exec.view("q", &inp.q)?,
        exec.view("k", &inp.k)?,
        exec.view("v", &inp.v)?,
    );
    let mut t = ffi::rssm_token_params {
        q: q.cast(),
        k: k.cast(),
        v: v.cast(),
        q_stride: inp.q.layout().3 as i64,
        k_stride: inp.k.layout().3 as i64,
        v_stride: inp.v.layout().3 as i64,
        scale: inp.scale,
        ..Default::default()
    };
    match inp.gate {
        Gate::Raw(raw) => raw.fill(exec, &mut t)?,
        Gate::Precomputed { g, beta } => {
            t.g = exec.slice("g", &g)?;
            t.beta = exec.slice("beta", &beta)?;
        }
    }
    t.o = exec.view_mut("o", o)?.cast();
    t.o_stride = o.layout().3 as i64;
    Ok(t)
}
