//! The reference recurrence of design §3, written once over a float type and run in f64 (the
//! oracle every kernel is judged against) and in f32 (the "same maths done naively in the same
//! precision" of design §6, and the `Reference` backend). Sums run sequentially over k, in the
//! exact order of §3.

use crate::problem::{HeadDims, Variant};
use crate::tokens::RecurrentInputs;
use crate::tokens::{Gate, GateForm, RawGate};

/// The float type a reference runs in.
pub trait Real:
    Copy
    + PartialOrd
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Div<Output = Self>
    + std::ops::Neg<Output = Self>
{
    fn from_f32(x: f32) -> Self;
    fn to_f64(self) -> f64;
    fn to_f32(self) -> f32;
    fn exp(self) -> Self;
    fn ln_1p(self) -> Self;
    fn sqrt(self) -> Self;
}

macro_rules! impl_real {
    ($t:ty) => {
        impl Real for $t {
            fn from_f32(x: f32) -> Self {
                x as $t
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn to_f32(self) -> f32 {
                self as f32
            }
            fn exp(self) -> Self {
                <$t>::exp(self)
            }
            fn ln_1p(self) -> Self {
                <$t>::ln_1p(self)
            }
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
        }
    };
}
impl_real!(f32);
impl_real!(f64);

/// design §3 step 1, in the raw gate's form: softplus (`-exp(A_log) softplus(x)`) or the safe
/// gate (`lower_bound sigmoid(exp(A_log) x)`), `x = a + dt_bias`.
pub fn log_decay<R: Real>(a: R, dt_bias: R, a_log: R, form: GateForm) -> R {
    let x = a + dt_bias;
    match form {
        GateForm::Softplus => {
            let softplus = if x <= R::from_f32(20.0) { x.exp().ln_1p() } else { x };
            -(a_log.exp()) * softplus
        }
        GateForm::Bounded(bound) => R::from_f32(bound.get()) * beta(a_log.exp() * x),
    }
}

/// design §3 step 2.
pub fn beta<R: Real>(b: R) -> R {
    let one = R::from_f32(1.0);
    one / (one + (-b).exp())
}

/// design §3 step 3 (division form, eps inside the root), in place.
pub fn l2_normalize<R: Real>(x: &mut [R]) {
    let mut ss = R::from_f32(0.0);
    for &e in x.iter() {
        ss = ss + e * e;
    }
    let norm = (ss + R::from_f32(1e-6)).sqrt();
    for e in x.iter_mut() {
        *e = *e / norm;
    }
}

/// design §3 steps 4-7 on one head's state `s` (`[V, K]`, K contiguous) with `decay = exp(g)`
/// (one value, or K for KDA), normalised key `k` and value `v`.
pub fn delta_rule_update<R: Real>(s: &mut [R], dims: &HeadDims, decay: &[R], k: &[R], v: &[R], beta: R) {
    let mut u = vec![R::from_f32(0.0); dims.v];
    delta_rule_update_u(s, dims, decay, k, v, beta, crate::DType::F32, &mut u);
}

/// [`delta_rule_update`] that also returns each row's corrected delta `u` (what kernel D's ring
/// stores). With f16/bf16 `records`, `u` and the key of the rank-1 term are rounded to them
/// first, as kernel D's update with such a ring rounds them (`S k` stays unrounded).
#[allow(clippy::too_many_arguments)]
pub fn delta_rule_update_u<R: Real>(
    s: &mut [R],
    dims: &HeadDims,
    decay: &[R],
    k: &[R],
    v: &[R],
    beta: R,
    records: crate::DType,
    u_out: &mut [R],
) {
    let round = |x: R| R::from_f32(records.round(x.to_f32()));
    let rounds = records != crate::DType::F32;
    let k_rank1: Vec<R> = k.iter().map(|&x| if rounds { round(x) } else { x }).collect();
    let kd = dims.k;
    for ((row, &vr), uo) in s.chunks_exact_mut(kd).zip(v).zip(u_out.iter_mut()) {
        for (j, e) in row.iter_mut().enumerate() {
            *e = *e * decay[if decay.len() == 1 { 0 } else { j }];
        }
        let mut dot = R::from_f32(0.0);
        for (e, &kj) in row.iter().zip(k) {
            dot = dot + *e * kj;
        }
        let mut u = (vr - dot) * beta;
        if rounds {
            u = round(u);
        }
        *uo = u;
        for (e, &kj) in row.iter_mut().zip(&k_rank1) {
            *e = *e + u * kj;
        }
    }
}

/// Steps 4 and 7 with a known corrected delta `u` (replaying a buffered-decode record): the
/// same operations [`delta_rule_update`] performs on `s`.
pub fn delta_rule_apply<R: Real>(s: &mut [R], dims: &HeadDims, decay: &[R], k: &[R], u: &[R]) {
    for (row, &ur) in s.chunks_exact_mut(dims.k).zip(u) {
        for (j, e) in row.iter_mut().enumerate() {
            *e = *e * decay[if decay.len() == 1 { 0 } else { j }];
        }
        for (e, &kj) in row.iter_mut().zip(k) {
            *e = *e + ur * kj;
        }
    }
}

/// design §3 step 8: `o[v] = Σ_k S[v,k] q[k]`.
pub fn readout<R: Real>(s: &[R], dims: &HeadDims, q: &[R], o: &mut [R]) {
    for (row, ov) in s.chunks_exact(dims.k).zip(o.iter_mut()) {
        let mut acc = R::from_f32(0.0);
        for (&e, &qj) in row.iter().zip(q) {
            acc = acc + e * qj;
        }
        *ov = acc;
    }
}

/// Everything a reference run of kernel R produces, in precision `R`.
#[derive(Clone, Debug)]
pub struct RecurrentResult<R> {
    /// `[N, HV, V]`; zeros for null requests.
    pub o: Vec<R>,
    /// Final state `[HV, V, K]` per request (`None` for null requests).
    pub final_state: Vec<Option<Vec<R>>>,
    /// `[T, HV, V, K]` per request: state after each of its tokens (`None` for null requests).
    pub snapshots: Vec<Option<Vec<R>>>,
}

/// The gate of token `tok`, value head `hv`: log decays `g` (1 or K of them) and beta, exactly
/// as the spec ring stores them.
pub fn gate_at<R: Real>(gate: &Gate<'_>, variant: Variant, dims: &HeadDims, tok: usize, hv: usize) -> (Vec<R>, R) {
    let gw = dims.gate_width(variant);
    match gate {
        Gate::Raw(RawGate {
            a,
            b,
            a_log,
            dt_bias,
            form,
        }) => {
            let g = (0..gw)
                .map(|j| {
                    log_decay(
                        R::from_f32(a.at(tok, hv * gw + j)),
                        R::from_f32(dt_bias[hv * gw + j]),
                        R::from_f32(a_log[hv]),
                        *form,
                    )
                })
                .collect();
            (g, beta(R::from_f32(b.at(tok, hv))))
        }
        Gate::Precomputed { g, beta } => {
            let base = (tok * dims.hv + hv) * gw;
            let g = g[base..base + gw].iter().map(|&x| R::from_f32(x)).collect();
            (g, R::from_f32(beta[tok * dims.hv + hv]))
        }
    }
}

/// One token's update of one head's state (design §3 steps 3-7) from its raw key, log decays,
/// beta and value: the record a spec ring holds. Kernel R's reference and the fold's both run it.
pub fn apply_record<R: Real>(s: &mut [R], dims: &HeadDims, k_raw: &[R], g: &[R], beta: R, v: &[R], l2norm: bool) {
    apply_record_with(s, dims, k_raw, g, beta, v, l2norm, crate::DType::F32);
}

/// [`apply_record`] with `u` and the rank-1 key rounded to `records` ([`delta_rule_update_u`]).
#[allow(clippy::too_many_arguments)]
fn apply_record_with<R: Real>(
    s: &mut [R],
    dims: &HeadDims,
    k_raw: &[R],
    g: &[R],
    beta: R,
    v: &[R],
    l2norm: bool,
    records: crate::DType,
) {
    let mut k = k_raw.to_vec();
    if l2norm {
        l2_normalize(&mut k);
    }
    let decay: Vec<R> = g.iter().map(|&x| x.exp()).collect();
    let mut u = vec![R::from_f32(0.0); dims.v];
    delta_rule_update_u(s, dims, &decay, &k, v, beta, records, &mut u);
}

/// Token `tok`'s update of value head `hv`'s state `s` (design §3 steps 1-7), `u` and the rank-1
/// key rounded to `records`.
fn step_token<R: Real>(inp: &RecurrentInputs<'_>, s: &mut [R], tok: usize, hv: usize, records: crate::DType) {
    let d = inp.dims;
    let h = d.key_head(hv);
    let k: Vec<R> = (0..d.k).map(|j| R::from_f32(inp.k.at(tok, h * d.k + j))).collect();
    let v: Vec<R> = (0..d.v).map(|j| R::from_f32(inp.v.at(tok, hv * d.v + j))).collect();
    let (g, beta) = gate_at::<R>(&inp.gate, inp.variant, &d, tok, hv);
    apply_record_with(s, &d, &k, &g, beta, &v, inp.qk_l2norm, records);
}

/// Token `tok`'s query for value head `hv`, normalised (when `qk_l2norm`) and scaled.
fn scaled_query<R: Real>(inp: &RecurrentInputs<'_>, tok: usize, hv: usize) -> Vec<R> {
    let d = inp.dims;
    let h = d.key_head(hv);
    let mut q: Vec<R> = (0..d.k).map(|j| R::from_f32(inp.q.at(tok, h * d.k + j))).collect();
    if inp.qk_l2norm {
        l2_normalize(&mut q);
    }
    let scale = R::from_f32(inp.scale);
    q.iter_mut().for_each(|x| *x = *x * scale);
    q
}

/// Tree verify in precision `R` (design §4 VT): for every token, kernel R's output
/// after running the recurrence from its request's checkpoint along the token's root path.
/// `parent[t]` is the window position of token t's parent within its request (-1 = child of the
/// checkpoint), validated by the caller. Returns `[N, HV, V]`, zeros for null requests.
pub fn tree_outputs<R: Real>(inp: &RecurrentInputs<'_>, parent: &[i32], state_pool: &[f32]) -> Vec<R> {
    let d = inp.dims;
    let per_slot = d.state_elems();
    let head = d.v * d.k;
    let mut o = vec![R::from_f32(0.0); inp.q.tokens * d.hv * d.v];
    for r in 0..inp.cu_seqlens.len() - 1 {
        let slot = inp.slots[r];
        if slot < 0 {
            continue;
        }
        let (bos, eos) = (inp.cu_seqlens[r] as usize, inp.cu_seqlens[r + 1] as usize);
        let ckpt = &state_pool[slot as usize * per_slot..(slot as usize + 1) * per_slot];
        for tok in bos..eos {
            let mut path = vec![tok];
            while parent[path[path.len() - 1]] >= 0 {
                path.push(bos + parent[path[path.len() - 1]] as usize);
            }
            path.reverse();
            for hv in 0..d.hv {
                let mut s: Vec<R> = ckpt[hv * head..(hv + 1) * head]
                    .iter()
                    .map(|&x| R::from_f32(x))
                    .collect();
                for &t in &path {
                    step_token(inp, &mut s, t, hv, crate::DType::F32);
                }
                let out = &mut o[(tok * d.hv + hv) * d.v..(tok * d.hv + hv + 1) * d.v];
                readout(&s, &d, &scaled_query(inp, tok, hv), out);
            }
        }
    }
    o
}

/// Runs kernel R's maths in precision `R` from the checkpoint pool `state_pool`.
pub fn recurrent<R: Real>(inp: &RecurrentInputs<'_>, state_pool: &[f32]) -> RecurrentResult<R> {
    recurrent_with_records(inp, state_pool, crate::DType::F32)
}

/// [`recurrent`] with each token's `u` and rank-1 key rounded to `records` (kernel R's
/// `record_dtype`, a 16-bit decode ring's records); `S k` stays in precision `R`.
pub fn recurrent_with_records<R: Real>(
    inp: &RecurrentInputs<'_>,
    state_pool: &[f32],
    records: crate::DType,
) -> RecurrentResult<R> {
    let d = inp.dims;
    let n = inp.q.tokens;
    let batch = inp.cu_seqlens.len() - 1;
    let per_slot = d.state_elems();
    let head = d.v * d.k;
    let zero = R::from_f32(0.0);
    let mut res = RecurrentResult {
        o: vec![zero; n * d.hv * d.v],
        final_state: vec![None; batch],
        snapshots: vec![None; batch],
    };
    for r in 0..batch {
        let slot = inp.slots[r];
        if slot < 0 {
            continue;
        }
        let (bos, eos) = (inp.cu_seqlens[r] as usize, inp.cu_seqlens[r + 1] as usize);
        let mut state: Vec<R> = state_pool[slot as usize * per_slot..(slot as usize + 1) * per_slot]
            .iter()
            .map(|&x| R::from_f32(x))
            .collect();
        let mut snaps = vec![zero; (eos - bos) * per_slot];
        for hv in 0..d.hv {
            let s = &mut state[hv * head..(hv + 1) * head];
            for (t, tok) in (bos..eos).enumerate() {
                step_token(inp, s, tok, hv, records);
                snaps[t * per_slot + hv * head..t * per_slot + (hv + 1) * head].copy_from_slice(s);
                let o = &mut res.o[(tok * d.hv + hv) * d.v..(tok * d.hv + hv + 1) * d.v];
                readout(s, &d, &scaled_query(inp, tok, hv), o);
            }
        }
        res.final_state[r] = Some(state);
        res.snapshots[r] = Some(snaps);
    }
    res
}

/// A path commit in precision `R` (kernel FT's reference): request `r`'s checkpoint `ckpt`
/// (`[HV, V, K]`) after replaying `path` (window positions within the request, in order).
pub fn path_state<R: Real>(inp: &RecurrentInputs<'_>, r: usize, path: &[i32], ckpt: &[f32]) -> Vec<R> {
    let bos = inp.cu_seqlens[r] as usize;
    let mut s: Vec<R> = ckpt.iter().map(|&x| R::from_f32(x)).collect();
    let head = inp.dims.v * inp.dims.k;
    for (hv, sh) in s.chunks_exact_mut(head).enumerate() {
        for &pos in path {
            step_token(inp, sh, bos + pos as usize, hv, crate::DType::F32);
        }
    }
    s
}
