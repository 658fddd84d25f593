//! One benchmark case per (kernel, model shape, batch, window): the buffers it needs and how to
//! launch it through the C ABI entries, the very calls an engine makes (device pointers and the
//! caller's stream on CUDA, host pointers on the emulator).

use std::ffi::c_void;

use super::buffers::{Buf, Buffers, Elem, Fill, Plan};
use crate::floor::ModelShape;
use replayssm::backend::Backend;
use replayssm::capi::{self, replayssm_status};
use replayssm::dtype::DType;

/// What is timed. `R-*` and `copy` are the recurrent baseline's kernels; `V`, `VF`, `VB-L*`,
/// `F`, `P`, `D-*`, and the tree forms `VT` and `FT`, ReplaySSM's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kernel {
    /// Kernel R, one decode token per request, writing the state.
    RDecode,
    /// Kernel R over a T-token window writing T snapshots (the recurrent verify).
    RWindow,
    /// Kernel V, chunked verify of T tokens with the ring write.
    V,
    /// Kernel VF, the deferred fold: the previous step's T accepted records replayed into the
    /// checkpoint, stored, then the verify of T new tokens with the ring write; one layer.
    VF,
    /// Kernel VB, the buffered speculative verify at cache length L = 16: the checkpoint, the
    /// row's accepted history (cursors spread over a flush cycle, [`buffered_cursor`]) and T new
    /// tokens with the ring write; one layer.
    VbL16,
    /// Kernel VB at cache length L = 32.
    VbL32,
    /// Kernel F, fold-every-commit of T accepted tokens over all layers.
    F,
    /// Kernel P, checkpoint replay of T records, one layer.
    P,
    /// Kernel D at a non-flush step (cursor m spread over 0..L-2), one layer.
    DNonflush,
    /// Kernel D at a flush step (m = L-1), one layer.
    DFlush,
    /// Kernel VT, tree verify of T draft nodes per request ([`draft_tree`]) with the ring write;
    /// one layer.
    VT,
    /// Kernel FT, the path fold: each request's deepest root path of [`draft_tree`] replayed
    /// into the checkpoint over all layers.
    FT,
    /// The recurrent commit: the accepted snapshot copied into the checkpoint, all layers, one
    /// strided device-to-device copy (the cheapest form it can take).
    Copy,
}

impl Kernel {
    pub const ALL: [Kernel; 11] = [
        Kernel::RDecode,
        Kernel::RWindow,
        Kernel::V,
        Kernel::VF,
        Kernel::VbL16,
        Kernel::VbL32,
        Kernel::F,
        Kernel::P,
        Kernel::DNonflush,
        Kernel::DFlush,
        Kernel::Copy,
    ];

    /// The tree forms, run on request (`--kernels VT,FT`): not in the default grid, whose
    /// floors and targets are the chain kernels'.
    pub const TREE: [Kernel; 2] = [Kernel::VT, Kernel::FT];

    /// Every kernel a case can run: [`Kernel::ALL`] and [`Kernel::TREE`].
    pub fn every() -> impl Iterator<Item = Kernel> {
        Kernel::ALL.into_iter().chain(Kernel::TREE)
    }

    /// The name the floor model and the results use.
    pub fn name(self) -> &'static str {
        match self {
            Kernel::RDecode => "R-decode",
            Kernel::RWindow => "R-window",
            Kernel::V => "V",
            Kernel::VF => "VF",
            Kernel::VbL16 => "VB-L16",
            Kernel::VbL32 => "VB-L32",
            Kernel::F => "F",
            Kernel::P => "P",
            Kernel::DNonflush => "D-nonflush",
            Kernel::DFlush => "D-flush",
            Kernel::VT => "VT",
            Kernel::FT => "FT",
            Kernel::Copy => "copy",
        }
    }

    /// VB's cache length L; `None` for the other kernels.
    pub fn cache_len(self) -> Option<usize> {
        match self {
            Kernel::VbL16 => Some(16),
            Kernel::VbL32 => Some(32),
            _ => None,
        }
    }

    /// Whether the window T changes the work (R-decode and copy move the same bytes for any T).
    pub fn uses_window(self) -> bool {
        !matches!(self, Kernel::RDecode | Kernel::Copy)
    }
}

impl std::str::FromStr for Kernel {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Kernel::every()
            .find(|k| k.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                let names: Vec<_> = Kernel::every().map(|k| k.name()).collect();
                format!("unknown kernel '{s}' (one of {})", names.join(", "))
            })
    }
}

impl std::fmt::Display for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One point of the grid.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Case {
    pub kernel: Kernel,
    pub shape: ModelShape,
    pub batch: usize,
    /// Window T (cache length L for D); 1 for the kernels that do not use one.
    pub t: usize,
    pub dtype: DType,
}

/// The plan of `case` (buffers of one input set) and its launch.
pub(crate) fn plan(case: &Case, backend: Backend) -> (Plan, Buf, LaunchBuilder) {
    let mut p = Plan::default();
    let ew = p.error_word();
    let launch = match case.kernel {
        Kernel::RDecode => recurrent(&mut p, case, backend, ew, false),
        Kernel::RWindow => recurrent(&mut p, case, backend, ew, true),
        Kernel::V => verify(&mut p, case, backend, ew),
        Kernel::VF => verify_fold(&mut p, case, backend, ew),
        Kernel::VbL16 | Kernel::VbL32 => verify_buffered(&mut p, case, backend, ew),
        Kernel::F => fold(&mut p, case, backend, ew),
        Kernel::P => replay(&mut p, case, backend, ew),
        Kernel::DNonflush => decode(&mut p, case, backend, ew, false),
        Kernel::DFlush => decode(&mut p, case, backend, ew, true),
        Kernel::VT => verify_tree(&mut p, case, backend, ew),
        Kernel::FT => fold_tree(&mut p, case, backend, ew),
        Kernel::Copy => copy(&mut p, case, backend),
    };
    (p, ew, launch)
}

pub(crate) type LaunchBuilder = Box<dyn Fn(&Buffers, usize, *mut c_void) -> Result<(), String>>;

fn backend_code(b: Backend) -> i32 {
    match b {
        Backend::Cuda => capi::replayssm_backend::REPLAYSSM_BACKEND_CUDA as i32,
        _ => capi::replayssm_backend::REPLAYSSM_BACKEND_EMULATED as i32,
    }
}

fn status(kernel: &str, s: replayssm_status) -> Result<(), String> {
    if s == replayssm_status::REPLAYSSM_OK {
        return Ok(());
    }
    // SAFETY: the library's thread-local, NUL-terminated message.
    let msg = unsafe { std::ffi::CStr::from_ptr(capi::replayssm_last_error_message()) }
        .to_string_lossy()
        .into_owned();
    Err(format!("replayssm_{kernel} returned {s:?}: {msg}"))
}

/// The token inputs and outputs of R, V and D: `n` tokens per set.
#[derive(Clone, Copy)]
struct Tokens {
    q: Buf,
    k: Buf,
    v: Buf,
    a: Buf,
    b: Buf,
    a_log: Buf,
    dt_bias: Buf,
    o: Buf,
}

const UNIT: Fill = Fill::Uniform(-1.0, 1.0);

fn tokens(p: &mut Plan, c: &Case, n: usize) -> Tokens {
    let d = c.shape.dims;
    let gw = d.gate_width(c.shape.variant);
    let act = Elem::Act(c.dtype);
    Tokens {
        q: p.per_set("q", act, n * d.h * d.k, UNIT),
        k: p.per_set("k", act, n * d.h * d.k, UNIT),
        v: p.per_set("v", act, n * d.hv * d.v, UNIT),
        a: p.per_set("a", act, n * d.hv * gw, UNIT),
        b: p.per_set("b", act, n * d.hv, UNIT),
        a_log: p.per_set("A_log", Elem::F32, d.hv, Fill::Uniform(-1.0, 0.5)),
        dt_bias: p.per_set("dt_bias", Elem::F32, d.hv * gw, UNIT),
        // Every row is live, so every output element is written: NaN until then.
        o: p.output("o", act, n * d.hv * d.v),
    }
}

/// Sets the token fields shared by the recurrent, verify and decode params.
macro_rules! set_tokens {
    ($prm:expr, $m:expr, $t:expr, $set:expr, $c:expr) => {{
        let (prm, m, t, set, c) = ($prm, $m, $t, $set, $c);
        let d = c.shape.dims;
        prm.tokens.q = m.void(t.q, set);
        prm.tokens.k = m.void(t.k, set);
        prm.tokens.v = m.void(t.v, set);
        prm.tokens.a = m.void(t.a, set);
        prm.tokens.b = m.void(t.b, set);
        prm.tokens.A_log = m.ptr(t.a_log, set);
        prm.tokens.dt_bias = m.ptr(t.dt_bias, set);
        prm.tokens.o = m.void(t.o, set);
        prm.tokens.q_stride = (d.h * d.k) as i64;
        prm.tokens.k_stride = (d.h * d.k) as i64;
        prm.tokens.v_stride = (d.hv * d.v) as i64;
        prm.tokens.a_stride = (d.hv * d.gate_width(c.shape.variant)) as i64;
        prm.tokens.b_stride = d.hv as i64;
        prm.tokens.o_stride = (d.hv * d.v) as i64;
        prm.base.H = d.h as i32;
        prm.base.HV = d.hv as i32;
        prm.base.K = d.k as i32;
        prm.base.V = d.v as i32;
        prm.tokens.scale = 1.0 / (d.k as f32).sqrt();
        prm.base.dtype = c.dtype.to_ffi();
        prm.base.variant = c.shape.variant.to_ffi();
        prm.base.qk_l2norm = 1;
    }};
}

/// The spec ring of one set: `layers` x `slots` x window `w`.
#[derive(Clone, Copy)]
struct Ring {
    v: Buf,
    k: Buf,
    g: Buf,
    beta: Buf,
}

/// The ring V writes (every position of every slot: full windows, all rows live).
fn written_ring(p: &mut Plan, c: &Case, slots: usize, w: usize) -> Ring {
    let d = c.shape.dims;
    let n = slots * w;
    let act = Elem::Act(c.dtype);
    Ring {
        v: p.output("ring_v", act, n * d.hv * d.v),
        k: p.output("ring_k", act, n * d.h * d.k),
        g: p.output("ring_g", Elem::F32, n * d.hv * d.gate_width(c.shape.variant)),
        beta: p.output("ring_beta", Elem::F32, n * d.hv),
    }
}

/// A ring F and P read.
fn spec_ring(p: &mut Plan, c: &Case, layers: usize, slots: usize, w: usize) -> Ring {
    let d = c.shape.dims;
    let n = layers * slots * w;
    let act = Elem::Act(c.dtype);
    Ring {
        v: p.per_set("ring_v", act, n * d.hv * d.v, UNIT),
        k: p.per_set("ring_k", act, n * d.h * d.k, UNIT),
        // Log decays as the gate computes them (negative, small) and betas in (0, 1).
        g: p.per_set(
            "ring_g",
            Elem::F32,
            n * d.hv * d.gate_width(c.shape.variant),
            Fill::Uniform(-0.1, 0.0),
        ),
        beta: p.per_set("ring_beta", Elem::F32, n * d.hv, Fill::Uniform(0.0, 1.0)),
    }
}

fn state(p: &mut Plan, c: &Case, layers: usize, slots: usize) -> Buf {
    p.per_set("state", Elem::F32, layers * slots * c.shape.dims.state_elems(), UNIT)
}

fn seq(n: usize) -> Vec<i32> {
    (0..n as i32).collect()
}

fn recurrent(p: &mut Plan, c: &Case, backend: Backend, ew: Buf, window: bool) -> LaunchBuilder {
    let (b, t) = (c.batch, if window { c.t } else { 1 });
    let tok = tokens(p, c, b * t);
    let st = state(p, c, 1, b);
    let snaps = window.then(|| p.output("snapshots", Elem::F32, b * t * c.shape.dims.state_elems()));
    let cu = p.ints("cu_seqlens", (0..=b).map(|r| (r * t) as i32).collect());
    let slots = p.ints("slots", seq(b));
    let c = *c;
    let be = backend_code(backend);
    Box::new(move |m, set, stream| {
        let mut prm = capi::replayssm_recurrent_params::default();
        set_tokens!(&mut prm, m, tok, set, &c);
        prm.cu_seqlens = m.ptr(cu, 0);
        prm.base.slots = m.ptr(slots, 0);
        prm.base.state = m.ptr(st, set);
        prm.snapshots = snaps.map_or(std::ptr::null_mut(), |s| m.ptr(s, set));
        prm.base.error_word = m.ptr(ew, 0);
        prm.num_tokens = (b * t) as i32;
        prm.base.batch = b as i32;
        prm.max_seqlen = t as i32;
        prm.base.num_slots = b as i32;
        prm.base.num_layers = 1;
        // The decode writes the state; the recurrent verify writes snapshots only (the accepted
        // one is copied afterwards: kernel `copy`).
        prm.write_state = (!window) as i32;
        // SAFETY: every pointer covers the extent its declaration in `plan` allocated.
        status("recurrent", unsafe { capi::replayssm_recurrent(be, &prm, stream) })
    })
}

/// Sets a verify's params (V, VT, and the verify VF holds): one layer, B slots, every row a full
/// window of T tokens; the caller sets the ring's `window` (and VT's parents, VF's pending table).
macro_rules! set_verify {
    ($prm:expr, $m:expr, $set:expr, $c:expr, $tok:expr, $st:expr, $ring:expr, $cu:expr, $slots:expr, $ew:expr) => {{
        let (prm, m, set, c) = ($prm, $m, $set, $c);
        let (b, t) = (c.batch, c.t);
        set_tokens!(&mut *prm, m, $tok, set, c);
        prm.cu_seqlens = m.ptr($cu, 0);
        prm.base.slots = m.ptr($slots, 0);
        prm.base.state = m.ptr($st, set);
        prm.ring.v = m.void($ring.v, set);
        prm.ring.k = m.void($ring.k, set);
        prm.ring.g = m.ptr($ring.g, set);
        prm.ring.beta = m.ptr($ring.beta, set);
        prm.base.error_word = m.ptr($ew, 0);
        prm.num_tokens = (b * t) as i32;
        prm.base.batch = b as i32;
        prm.max_seqlen = t as i32;
        prm.base.num_slots = b as i32;
        prm.base.num_layers = 1;
        prm.base.layer = 0;
    }};
}

fn verify(p: &mut Plan, c: &Case, backend: Backend, ew: Buf) -> LaunchBuilder {
    let (b, t) = (c.batch, c.t);
    let tok = tokens(p, c, b * t);
    let st = state(p, c, 1, b);
    let ring = written_ring(p, c, b, t);
    let cu = p.ints("cu_seqlens", (0..=b).map(|r| (r * t) as i32).collect());
    let slots = p.ints("slots", seq(b));
    let c = *c;
    let be = backend_code(backend);
    Box::new(move |m, set, stream| {
        let mut prm = capi::replayssm_verify_params::default();
        set_verify!(&mut prm, m, set, &c, tok, st, ring, cu, slots, ew);
        prm.ring.window = t as i32;
        // SAFETY: as in `recurrent`.
        status("verify", unsafe { capi::replayssm_verify(be, &prm, stream) })
    })
}

/// VF at its floor's case: every row live with T pending records (all drafts accepted) in half 0
/// of a ring of 2T positions, the new window written to half 1. VF only reads the pending table
/// and half 0, so every timed launch does the same work.
fn verify_fold(p: &mut Plan, c: &Case, backend: Backend, ew: Buf) -> LaunchBuilder {
    let (b, t) = (c.batch, c.t);
    let tok = tokens(p, c, b * t);
    let st = state(p, c, 1, b);
    let ring = spec_ring(p, c, 1, b, 2 * t);
    let cu = p.ints("cu_seqlens", (0..=b).map(|r| (r * t) as i32).collect());
    let slots = p.ints("slots", seq(b));
    // Per slot: n = T, half 0, positions 0..T-1 (replayssm.h's pending entry).
    let entry: Vec<i32> = [t as i32, 0].into_iter().chain(0..t as i32).collect();
    let pending = p.ints("pending", entry.repeat(b));
    let c = *c;
    let be = backend_code(backend);
    Box::new(move |m, set, stream| {
        let mut prm = capi::replayssm_verify_fold_params {
            verify: capi::replayssm_verify_params::default(),
            ..Default::default()
        };
        set_verify!(&mut prm.verify, m, set, &c, tok, st, ring, cu, slots, ew);
        prm.pending = m.ptr(pending, 0);
        prm.verify.ring.window = (2 * t) as i32;
        // SAFETY: as in `recurrent`.
        status("verify_fold", unsafe { capi::replayssm_verify_fold(be, &prm, stream) })
    })
}

/// VB at its floor's case: every row live, row r's history at [`buffered_cursor`] (the floor's
/// flush cycle, every draft accepted), the new window written after it. VB only reads the
/// cursors, so every timed launch does the same work.
fn verify_buffered(p: &mut Plan, c: &Case, backend: Backend, ew: Buf) -> LaunchBuilder {
    let (b, t) = (c.batch, c.t);
    let l = c.kernel.cache_len().unwrap_or(2 * t);
    let d = c.shape.dims;
    let tok = tokens(p, c, b * t);
    let st = state(p, c, 1, b);
    let ring = spec_ring(p, c, 1, b, l);
    let ring_u = p.per_set("ring_u", Elem::F32, b * d.hv * l * d.v, UNIT);
    let cu = p.ints("cu_seqlens", (0..=b).map(|r| (r * t) as i32).collect());
    let slots = p.ints("slots", seq(b));
    let cursors = p.ints("cursors", (0..b).map(|r| buffered_cursor(r, t, l) as i32).collect());
    let c = *c;
    let be = backend_code(backend);
    Box::new(move |m, set, stream| {
        let mut prm = capi::replayssm_verify_buffered_params {
            verify: capi::replayssm_verify_params::default(),
            ..Default::default()
        };
        set_verify!(&mut prm.verify, m, set, &c, tok, st, ring, cu, slots, ew);
        prm.verify.ring.window = l as i32;
        prm.cursors = m.ptr(cursors, 0);
        prm.ring_u = m.ptr(ring_u, set);
        // SAFETY: as in `recurrent`.
        status("verify_buffered", unsafe {
            capi::replayssm_verify_buffered(be, &prm, stream)
        })
    })
}

/// The history of row `r` of a VB case: a flush cycle at cache length `l` with every one of `t`
/// drafts accepted has `c = (l - t) / t + 1` steps, at histories 0, t, .., (c - 1) t; rows take
/// them in turn, so a batch's mean is the floor's `t (c - 1) / 2`.
pub fn buffered_cursor(r: usize, t: usize, l: usize) -> usize {
    (r % buffered_cycle(t, l)) * t
}

/// The step's flush cycle at cache length `l` (steps per flush, every one of `t` drafts accepted).
pub fn buffered_cycle(t: usize, l: usize) -> usize {
    l.saturating_sub(t) / t.max(1) + 1
}

/// The draft tree of the tree cases: per request a binary tree of `t` nodes in window positions
/// (`parent[i] = (i - 1) / 2`, node 0 a child of the checkpoint), the shape of an EAGLE top-2
/// tree.
pub fn draft_tree(t: usize) -> Vec<i32> {
    (0..t as i32).map(|i| if i == 0 { -1 } else { (i - 1) / 2 }).collect()
}

/// The accepted path of the tree cases: the root path of the last node of [`draft_tree`], its
/// deepest (`floor(log2 t) + 1` positions, root first).
pub fn deepest_path(t: usize) -> Vec<i32> {
    let parent = draft_tree(t);
    let mut path = vec![t as i32 - 1];
    while let Some(&p) = path.last().map(|&n| &parent[n as usize]) {
        if p < 0 {
            break;
        }
        path.push(p);
    }
    path.reverse();
    path
}

/// VT at V's floor case: every row a full tree of T nodes ([`draft_tree`]), T records written to
/// the ring; the same bytes as V plus the parent table.
fn verify_tree(p: &mut Plan, c: &Case, backend: Backend, ew: Buf) -> LaunchBuilder {
    let (b, t) = (c.batch, c.t);
    let tok = tokens(p, c, b * t);
    let st = state(p, c, 1, b);
    let ring = written_ring(p, c, b, t);
    let cu = p.ints("cu_seqlens", (0..=b).map(|r| (r * t) as i32).collect());
    let slots = p.ints("slots", seq(b));
    let parent = p.ints("parent", draft_tree(t).repeat(b));
    let c = *c;
    let be = backend_code(backend);
    Box::new(move |m, set, stream| {
        let mut prm = capi::replayssm_verify_params::default();
        set_verify!(&mut prm, m, set, &c, tok, st, ring, cu, slots, ew);
        prm.parent = m.ptr(parent, 0);
        prm.ring.window = t as i32;
        // SAFETY: as in `recurrent`.
        status("verify", unsafe { capi::replayssm_verify(be, &prm, stream) })
    })
}

macro_rules! set_ring_problem {
    ($prm:expr, $m:expr, $ring:expr, $set:expr, $c:expr) => {{
        let (prm, m, ring, set, c) = ($prm, $m, $ring, $set, $c);
        let d = c.shape.dims;
        prm.ring.v = m.void(ring.v, set);
        prm.ring.k = m.void(ring.k, set);
        prm.ring.g = m.ptr(ring.g, set);
        prm.ring.beta = m.ptr(ring.beta, set);
        prm.base.H = d.h as i32;
        prm.base.HV = d.hv as i32;
        prm.base.K = d.k as i32;
        prm.base.V = d.v as i32;
        prm.base.dtype = c.dtype.to_ffi();
        prm.base.variant = c.shape.variant.to_ffi();
        prm.base.qk_l2norm = 1;
    }};
}

fn fold(p: &mut Plan, c: &Case, backend: Backend, ew: Buf) -> LaunchBuilder {
    let (b, t, nl) = (c.batch, c.t, c.shape.layers);
    let st = state(p, c, nl, b);
    let ring = spec_ring(p, c, nl, b, t);
    let slots = p.ints("slots", seq(b));
    // Every draft accepted: the floor's case (accept lengths count the bonus token).
    let accept = p.ints("accept_lens", vec![t as i32; b]);
    let c = *c;
    let be = backend_code(backend);
    Box::new(move |m, set, stream| {
        let mut prm = capi::replayssm_fold_params::default();
        set_ring_problem!(&mut prm, m, ring, set, &c);
        prm.base.state = m.ptr(st, set);
        prm.base.slots = m.ptr(slots, 0);
        prm.accept_lens = m.ptr(accept, 0);
        prm.base.error_word = m.ptr(ew, 0);
        prm.base.batch = b as i32;
        prm.base.num_slots = b as i32;
        prm.base.num_layers = nl as i32;
        prm.ring.window = t as i32;
        // SAFETY: as in `recurrent`.
        status("fold", unsafe { capi::replayssm_fold(be, &prm, stream) })
    })
}

/// FT over all layers: a ring of T positions per slot holding a verified [`draft_tree`], and
/// every request's accepted path its deepest ([`deepest_path`]), the path a tree step commits
/// when every draft on it is accepted.
fn fold_tree(p: &mut Plan, c: &Case, backend: Backend, ew: Buf) -> LaunchBuilder {
    let (b, t, nl) = (c.batch, c.t, c.shape.layers);
    let st = state(p, c, nl, b);
    let ring = spec_ring(p, c, nl, b, t);
    let slots = p.ints("slots", seq(b));
    let path = deepest_path(t);
    let width = path.len();
    let paths = p.ints("accept_paths", path.repeat(b));
    let c = *c;
    let be = backend_code(backend);
    Box::new(move |m, set, stream| {
        let mut prm = capi::replayssm_fold_params::default();
        set_ring_problem!(&mut prm, m, ring, set, &c);
        prm.base.state = m.ptr(st, set);
        prm.base.slots = m.ptr(slots, 0);
        prm.accept_paths = m.ptr(paths, 0);
        prm.path_width = width as i32;
        prm.base.error_word = m.ptr(ew, 0);
        prm.base.batch = b as i32;
        prm.base.num_slots = b as i32;
        prm.base.num_layers = nl as i32;
        prm.ring.window = t as i32;
        // SAFETY: as in `recurrent`.
        status("fold", unsafe { capi::replayssm_fold(be, &prm, stream) })
    })
}

fn replay(p: &mut Plan, c: &Case, backend: Backend, ew: Buf) -> LaunchBuilder {
    let (b, t) = (c.batch, c.t);
    let st = state(p, c, 1, b);
    let ring = spec_ring(p, c, 1, b, t);
    let slots = p.ints("slots", seq(b));
    let counts = p.ints("counts", vec![t as i32; b]);
    let c = *c;
    let be = backend_code(backend);
    Box::new(move |m, set, stream| {
        let mut prm = capi::replayssm_replay_params::default();
        set_ring_problem!(&mut prm, m, ring, set, &c);
        prm.base.state = m.ptr(st, set);
        prm.base.slots = m.ptr(slots, 0);
        prm.counts = m.ptr(counts, 0);
        prm.base.error_word = m.ptr(ew, 0);
        prm.base.batch = b as i32;
        prm.base.num_slots = b as i32;
        prm.base.num_layers = 1;
        prm.base.layer = 0;
        prm.ring.window = t as i32;
        // SAFETY: as in `recurrent`.
        status("replay", unsafe { capi::replayssm_replay(be, &prm, stream) })
    })
}

fn decode(p: &mut Plan, c: &Case, backend: Backend, ew: Buf, flush: bool) -> LaunchBuilder {
    let (b, l) = (c.batch, c.t);
    let d = c.shape.dims;
    let tok = tokens(p, c, b);
    let st = state(p, c, 1, b);
    let recs = b * l;
    let ring_d = p.per_set("ring_d", Elem::F32, recs * d.hv * d.v, UNIT);
    let ring_k = p.per_set("ring_k", Elem::F32, recs * d.h * d.k, Fill::Uniform(-0.1, 0.1));
    let ring_g = p.per_set(
        "ring_g",
        Elem::F32,
        recs * d.hv * d.gate_width(c.shape.variant),
        Fill::Uniform(-0.1, 0.0),
    );
    // Flush: every row at m = L-1. Non-flush: the cursors of a serving batch, whose requests sit
    // at independent phases of their cache cycle: row r at the middle of stratum r of 0..L-2, so
    // any batch (B = 1 included: the middle cursor) reads (L-2)/2 pending records on average, as
    // the floor model assumes. (Before, r % (L-1) put a single row at cursor 0: no records.)
    let positions: Vec<i32> = (0..b)
        .map(|r| if flush { l - 1 } else { spread_cursor(r, b, l) } as i32)
        .collect();
    let pos = p.ints("positions", positions);
    let slots = p.ints("slots", seq(b));
    let c = *c;
    let be = backend_code(backend);
    Box::new(move |m, set, stream| {
        let mut prm = capi::replayssm_decode_params::default();
        set_tokens!(&mut prm, m, tok, set, &c);
        prm.base.slots = m.ptr(slots, 0);
        prm.positions = m.ptr(pos, 0);
        prm.base.state = m.ptr(st, set);
        prm.ring_d = m.ptr(ring_d, set);
        prm.ring_k = m.ptr(ring_k, set);
        prm.ring_g = m.ptr(ring_g, set);
        prm.base.error_word = m.ptr(ew, 0);
        prm.base.batch = b as i32;
        prm.base.num_slots = b as i32;
        prm.base.num_layers = 1;
        prm.base.layer = 0;
        prm.cache_len = l as i32;
        // SAFETY: as in `recurrent`.
        status("decode", unsafe { capi::replayssm_decode(be, &prm, stream) })
    })
}

fn copy(p: &mut Plan, c: &Case, backend: Backend) -> LaunchBuilder {
    let (b, nl) = (c.batch, c.shape.layers);
    let row = b * c.shape.dims.state_elems() * 4;
    // Per layer: B checkpoints, then the B accepted snapshots copied over them.
    let pool = p.per_set(
        "state+snapshots",
        Elem::F32,
        nl * 2 * b * c.shape.dims.state_elems(),
        UNIT,
    );
    Box::new(move |m, set, stream| {
        let base: *mut u8 = m.ptr(pool, set);
        match backend {
            #[cfg(replayssm_cuda)]
            Backend::Cuda => {
                // One strided copy of all layers while the pitch stays under the runtime's limit
                // (2^31 - 1 bytes); past it (the largest batches) one copy per layer, each over
                // a gigabyte, so the extra launches cost nothing measurable.
                let pitch = 2 * row;
                let code = if pitch <= i32::MAX as usize {
                    // SAFETY: nl rows of `pitch` bytes; each copies its upper half onto its lower.
                    unsafe {
                        replayssm::ffi::rssm_cuda_memcpy_2d_dtod_async(
                            base.cast(),
                            pitch as u64,
                            base.wrapping_add(row).cast(),
                            pitch as u64,
                            row as u64,
                            nl as u64,
                            stream,
                        )
                    }
                } else {
                    (0..nl)
                        .map(|layer| {
                            let lo = base.wrapping_add(layer * pitch);
                            // SAFETY: as above, one layer.
                            unsafe {
                                replayssm::ffi::rssm_cuda_memcpy_dtod_async(
                                    lo.cast(),
                                    lo.wrapping_add(row).cast(),
                                    row as u64,
                                    stream,
                                )
                            }
                        })
                        .find(|&c| c != 0)
                        .unwrap_or(0)
                };
                if code != 0 {
                    return Err(format!(
                        "device-to-device copy: {}",
                        replayssm::cuda::error_string(code)
                    ));
                }
            }
            _ => {
                let _ = stream;
                for layer in 0..nl {
                    let lo = base.wrapping_add(layer * 2 * row);
                    // SAFETY: host memory of nl * 2 * row bytes; the halves do not overlap.
                    unsafe { std::ptr::copy_nonoverlapping(lo.wrapping_add(row), lo, row) };
                }
            }
        }
        Ok(())
    })
}

/// The non-flush cursor of row `r` of `b`: the middle of the r-th of b equal strata of 0..=L-2.
pub fn spread_cursor(r: usize, b: usize, l: usize) -> usize {
    if l < 2 {
        return 0;
    }
    (2 * r + 1) * (l - 1) / (2 * b)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_tree_cases_use_a_binary_tree_and_its_deepest_path() {
        assert_eq!(super::draft_tree(6), [-1, 0, 0, 1, 1, 2]);
        assert_eq!(super::deepest_path(6), [0, 2, 5]);
        assert_eq!(super::deepest_path(2), [0, 1]);
        assert_eq!(super::deepest_path(8), [0, 1, 3, 7]);
        assert_eq!("ft".parse::<super::Kernel>(), Ok(super::Kernel::FT));
        assert!(!super::Kernel::ALL.contains(&super::Kernel::VT));
    }

    #[test]
    fn a_serving_batch_spreads_its_cursors_over_the_cycle() {
        // B = 1 sits at the middle of 0..=L-2, not at 0 (where it reads no record).
        assert_eq!(super::spread_cursor(0, 1, 4), 1);
        assert_eq!(super::spread_cursor(0, 1, 8), 3);
        for (b, l) in [(64, 4), (128, 8), (7, 6), (3, 2)] {
            let c: Vec<usize> = (0..b).map(|r| super::spread_cursor(r, b, l)).collect();
            assert!(c.iter().all(|&m| m <= l - 2), "{b} {l}: {c:?}");
            let mean = c.iter().sum::<usize>() as f64 / b as f64;
            assert!((mean - (l - 2) as f64 / 2.0).abs() <= 0.5, "{b} {l}: mean {mean}");
        }
    }
}
