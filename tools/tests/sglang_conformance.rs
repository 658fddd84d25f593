//! Conformance with SGLang 0.5.23's ReplaySSM Triton kernels, from the goldens of
//! `tests/cases/sglang/` (written by `scripts/sglang-peer`, which ran SGLang's kernels under the
//! Triton interpreter; see that folder's README). For every `*.golden.safetensors`, on the
//! emulated backend:
//! (a) our verify of every layer (SGLang's slots as they are: the verify, as SGLang's, has no
//!     null block; a negative slot is a null row) writes
//!     exactly the ring bytes the golden recorded as ours, and against SGLang's ring: raw v and
//!     k bit-identical, g within [`MAX_G_ULP`] and beta within [`MAX_BETA_ULP`] ulp (our g within
//!     [`MAX_G_ULP_F64`] of its f64 value), every slot no live row owns untouched; our outputs within the act dtype's case tolerance of SGLang's on live rows (bf16:
//!     within [`MAX_BF16_O_ULP`] bf16 ulp, the goldens' bf16 rounded to nearest even),
//!     zero on null rows;
//! (b) our fold of every layer (tracks included) of SGLang's ring into state_in matches SGLang's
//!     fold of it within [`STATE_TOL`], slots neither folded nor tracked bit-equal to state_in;
//! (c) the same for our fold and SGLang's fold of our ring;
//! and (d) every `*.fold.safetensors` case (SGLang's outputs and layer-0 fold as expectations)
//! passes `case::run`, and fails once an expectation is moved.
//! For every `*.decode.safetensors` (SGLang's buffered decode, step by step), our kernel D through
//! the Rust API with a ring of the golden's record dtype (f32, or the activations' f16/bf16):
//! cursors identical to SGLang's `write_pos`, outputs and the final checkpoint within
//! [`decode_tolerance`] of SGLang's, null rows zero, untouched slots bit-equal, the pending keys
//! SGLang's bytes, and both sides' distance from an f64 recurrence of the same inputs reported.
//!
//! SGLang's conventions our API takes differently, mapped here as an engine adapter would:
//! in the fold a slot <= null_block_id is a null row (slot -1); a track entry counts only when its row is
//! live, its track slot > null_block_id and its step lies in the committed prefix (SGLang skips
//! the others in-kernel, ours refuses them: it takes track slot -1 for "none").
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use replayssm::backend::Backend;
use replayssm::config::{resolve, EngineFlags};
use replayssm::dtype::{ActBuffer, DType};
use replayssm::numerics::{compare, Comparison, Tolerance};
use replayssm::reference::{self, log_decay};
use replayssm::{
    decode, fold, verify, CheckpointPool, DecodeInputs, DecodeRing, ForceFlush, Gate, GateForm, HeadDims, RawGate,
    SpecRing, Track, Variant,
};
use replayssm_tools::case;
use replayssm_tools::workload::{GateData, RecurrentData};
use safetensors::tensor::{Dtype, SafeTensors};

/// Ring g, ours vs SGLang's: SGLang forms softplus as `log(1 + exp(x))` in f32, which loses the
/// low bits of `exp(x)` when it is small; ours as `log1pf(expf(x))`. Measured: 15 ulp at most on
/// the goldens (SGLang's up to 15 ulp from the f64 value, ours up to [`MAX_G_ULP_F64`]).
const MAX_G_ULP: i64 = 16;
/// Our ring g vs the f64 value of the same f32 inputs (measured 2).
const MAX_G_ULP_F64: i64 = 2;
/// The safe gate `g = lower_bound sigmoid(y)`, `y = exp(A_log) x`: its relative condition in `y`
/// is `|y| sigmoid(-y)`, so the f32 roundings of `exp(A_log)` and of the product alone move `g` by
/// up to about `|y|` ulp (the goldens' `|y|` reaches ~40). Ours is held to `4 + 2|y|` ulp of the
/// f64 value per element ([`safe_g_allowed_ulp`]); ours vs SGLang's measured 33 ulp at most.
const SAFE_MAX_G_ULP: i64 = 48;
/// Ring beta (`1 / (1 + exp(-b))` on both sides, the exp of each implementation): measured 2.
const MAX_BETA_ULP: i64 = 2;
/// Checkpoints after a fold, ours vs SGLang's: two f32 implementations of the same recurrence
/// whose reduction order and exp differ; measured 1.2e-7 at most on states of magnitude ~1
/// (one f32 ulp at 1).
const STATE_TOL: Tolerance = Tolerance {
    atol: 2.5e-7,
    rtol: 1e-6,
};

/// bf16 outputs, ours vs SGLang's, in bf16 ulps: measured 0 (every live output equal) on goldens
/// whose SGLang side rounded f32 -> bf16 to nearest even, as the GPU does. Under the Triton
/// interpreter's own truncating casts half of them were one ulp toward zero (`scripts/sglang-peer
/// --truncating-bf16`), which the case tolerance (atol 1e-4, rtol 8e-3) used to let through.
const MAX_BF16_O_ULP: i64 = 0;
/// How the goldens' SGLang side must have rounded f32 -> bf16 (`bf16_rounding` metadata).
const BF16_ROUNDING: &str = "nearest even (the interpreter patched to the GPU's rounding)";

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/cases/sglang")
}

fn files(suffix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir())
        .unwrap_or_else(|e| panic!("{}: {e}", dir().display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    v.sort();
    assert!(!v.is_empty(), "no {suffix} in {}", dir().display());
    v
}

fn tolerance(dtype: DType) -> Tolerance {
    // The shipped case files' tolerances (tools/tests/cases).
    match dtype {
        DType::F32 => Tolerance { atol: 1e-6, rtol: 1e-5 },
        DType::F16 => Tolerance { atol: 1e-5, rtol: 1e-3 },
        DType::BF16 => Tolerance { atol: 1e-4, rtol: 8e-3 },
    }
}

/// An f32 in a total order of its bit pattern, so that the difference of two is their distance
/// in ulps (+0 and -0 coincide).
fn ordered(x: f32) -> i64 {
    let i = x.to_bits() as i32 as i64;
    if i < 0 {
        -(i & 0x7fff_ffff)
    } else {
        i
    }
}

/// Largest ulp distance between `a` and `b` and how many elements differ at all.
fn ulps(a: &[f32], b: &[f32]) -> (i64, usize) {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).fold((0, 0), |(m, n), (&x, &y)| {
        let d = (ordered(x) - ordered(y)).abs();
        (m.max(d), n + usize::from(d != 0))
    })
}

/// Largest distance in ulps of the act dtype (`a`, `b` hold values of that dtype, widened).
fn act_ulps(dtype: DType, a: &[f32], b: &[f32]) -> i64 {
    if dtype == DType::F32 {
        return ulps(a, b).0;
    }
    let ord = |x: f32| {
        let i = match dtype {
            DType::BF16 => half::bf16::from_f32(x).to_bits(),
            _ => half::f16::from_f32(x).to_bits(),
        } as i16 as i64;
        if i < 0 {
            -(i & 0x7fff)
        } else {
            i
        }
    };
    a.iter()
        .zip(b)
        .map(|(&x, &y)| (ord(x) - ord(y)).abs())
        .max()
        .unwrap_or(0)
}

/// Bytes that differ.
fn byte_diffs(a: &[u8], b: &[u8]) -> usize {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).filter(|(x, y)| x != y).count()
}

fn widen(x: &[f32]) -> Vec<f64> {
    x.iter().map(|&v| v as f64).collect()
}

/// One golden: its tensors and metadata.
struct Golden<'a> {
    name: String,
    st: SafeTensors<'a>,
    meta: HashMap<String, String>,
}

impl<'a> Golden<'a> {
    /// The golden in `bytes`, read from `path` (named by its file name).
    fn parse(path: &Path, bytes: &'a [u8]) -> Self {
        let (_, header) = SafeTensors::read_metadata(bytes).unwrap();
        Golden {
            name: path.file_name().unwrap().to_string_lossy().into_owned(),
            st: SafeTensors::deserialize(bytes).unwrap(),
            meta: header.metadata().clone().unwrap_or_default(),
        }
    }

    fn meta<T: std::str::FromStr>(&self, key: &str) -> T {
        let s = self
            .meta
            .get(key)
            .unwrap_or_else(|| panic!("{}: no metadata {key}", self.name));
        s.parse()
            .unwrap_or_else(|_| panic!("{}: metadata {key} = {s:?} does not parse", self.name))
    }

    /// The tensor's bytes, its shape and dtype checked.
    fn raw(&self, name: &str, shape: &[usize], dtype: Dtype) -> &[u8] {
        let t = self
            .st
            .tensor(name)
            .unwrap_or_else(|_| panic!("{}: no tensor {name}", self.name));
        assert_eq!(t.shape(), shape, "{}: {name}'s shape", self.name);
        assert_eq!(t.dtype(), dtype, "{}: {name}'s dtype", self.name);
        t.data()
    }

    fn f32s(&self, name: &str, shape: &[usize]) -> Vec<f32> {
        f32s(self.raw(name, shape, Dtype::F32))
    }

    /// An index tensor as the golden's `index_dtype` says SGLang took it (int32, or int64 as
    /// SGLang's unit tests are reported to pass them), narrowed to the library's i32 with a range check.
    fn i32s(&self, name: &str, shape: &[usize]) -> Vec<i32> {
        let wide = self.meta.get("index_dtype").is_some_and(|d| d == "int64");
        if !wide {
            return self
                .raw(name, shape, Dtype::I32)
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
                .collect();
        }
        self.raw(name, shape, Dtype::I64)
            .chunks_exact(8)
            .map(|c| {
                let v = i64::from_le_bytes(c.try_into().unwrap());
                i32::try_from(v).unwrap_or_else(|_| panic!("{}: {name} holds {v}, outside i32", self.name))
            })
            .collect()
    }
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn act(dtype: DType, b: &[u8]) -> ActBuffer {
    match dtype {
        DType::F32 => ActBuffer::F32(f32s(b)),
        DType::F16 => ActBuffer::F16(
            b.chunks_exact(2)
                .map(|c| half::f16::from_le_bytes([c[0], c[1]]))
                .collect(),
        ),
        DType::BF16 => ActBuffer::BF16(
            b.chunks_exact(2)
                .map(|c| half::bf16::from_le_bytes([c[0], c[1]]))
                .collect(),
        ),
    }
}

fn st_dtype(d: DType) -> Dtype {
    match d {
        DType::F32 => Dtype::F32,
        DType::F16 => Dtype::F16,
        DType::BF16 => Dtype::BF16,
    }
}

/// A spec ring's four buffers as bytes: v, k (act), g, beta (f32).
struct RingBytes {
    parts: [Vec<u8>; 4],
}

const RING_PARTS: [&str; 4] = ["v", "k", "g", "beta"];

fn ring_bytes(r: &SpecRing) -> RingBytes {
    let f = |x: &[f32]| x.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>();
    RingBytes {
        parts: [r.v.as_bytes().to_vec(), r.k.as_bytes().to_vec(), f(&r.g), f(&r.beta)],
    }
}

/// What a golden describes, decoded.
struct Scenario {
    name: String,
    variant: Variant,
    dtype: DType,
    dims: HeadDims,
    nl: usize,
    ns: usize,
    w: usize,
    null: i32,
    cu: Vec<i32>,
    /// SGLang's slots, ours for the verify (SGLang's: only a negative slot is a null row) and
    /// ours for the fold (<= null_block_id -> -1).
    sg_slots: Vec<i32>,
    verify_slots: Vec<i32>,
    slots: Vec<i32>,
    accept: Vec<i32>,
    /// Track slots as ours takes them (-1 where SGLang's kernel skips the entry) and steps.
    track_slots: Vec<i32>,
    track_steps: Vec<i32>,
    /// Per layer: the token inputs (ours).
    layers: Vec<RecurrentData>,
    state_in: Vec<f32>,
}

impl Scenario {
    fn t(&self) -> usize {
        *self.cu.last().unwrap() as usize
    }
    fn gw(&self) -> usize {
        self.dims.gate_width(self.variant)
    }
    /// Elements per slot of each ring buffer.
    fn ring_slot_elems(&self) -> [usize; 4] {
        let d = self.dims;
        [
            d.hv * self.w * d.v,
            d.h * self.w * d.k,
            d.hv * self.w * self.gw(),
            d.hv * self.w,
        ]
    }
    fn ring_shapes(&self) -> [Vec<usize>; 4] {
        let (d, nl, ns, w) = (self.dims, self.nl, self.ns, self.w);
        let g = if self.gw() == 1 {
            vec![nl, ns, d.hv, w]
        } else {
            vec![nl, ns, d.hv, w, d.k]
        };
        [
            vec![nl, ns, d.hv, w, d.v],
            vec![nl, ns, d.h, w, d.k],
            g,
            vec![nl, ns, d.hv, w],
        ]
    }
    /// Tokens of live rows and of null rows (of the verify).
    fn rows(&self, live: bool) -> Vec<usize> {
        (0..self.verify_slots.len())
            .filter(|&r| (self.verify_slots[r] >= 0) == live)
            .flat_map(|r| self.cu[r] as usize..self.cu[r + 1] as usize)
            .collect()
    }
    fn pool(&self) -> CheckpointPool {
        let cfg = resolve(&EngineFlags::spec_ring(self.variant)).unwrap();
        let mut pool = CheckpointPool::new(&cfg, self.dims, self.nl, self.ns).unwrap();
        pool.state_mut().copy_from_slice(&self.state_in);
        pool
    }
    /// A ring for `pool` holding `bytes` (or zeros, as SGLang allocates its ring).
    fn ring(&self, pool: &CheckpointPool, bytes: Option<&RingBytes>) -> SpecRing {
        let mut r = SpecRing::for_pool(pool, self.w, self.dtype, true).unwrap();
        match bytes {
            None => {
                r.v.as_bytes_mut().fill(0);
                r.k.as_bytes_mut().fill(0);
                r.g.fill(0.0);
                r.beta.fill(0.0);
            }
            Some(b) => {
                r.v.as_bytes_mut().copy_from_slice(&b.parts[0]);
                r.k.as_bytes_mut().copy_from_slice(&b.parts[1]);
                r.g.copy_from_slice(&f32s(&b.parts[2]));
                r.beta.copy_from_slice(&f32s(&b.parts[3]));
            }
        }
        r
    }
    /// Our fold of every layer of `ring` into state_in.
    fn fold(&self, ring: &RingBytes) -> Vec<f32> {
        let mut pool = self.pool();
        let r = self.ring(&pool, Some(ring));
        let track = Track {
            slots: &self.track_slots[..],
            steps: &self.track_steps[..],
        };
        fold(Backend::Emulated, &mut pool, &r, &self.slots, &self.accept, Some(track)).unwrap();
        pool.state().to_vec()
    }
}

fn load(g: &Golden<'_>) -> Scenario {
    assert_eq!(g.meta::<String>("format"), "replayssm-sglang-golden-1", "{}", g.name);
    assert_eq!(g.meta::<String>("use_qk_l2norm"), "true", "{}", g.name);
    // The safe gate (SGLang's `lower_bound`), else softplus with SGLang's parameters at ours.
    let form = match g.meta.get("lower_bound") {
        Some(b) => GateForm::from_lower_bound(b.parse().unwrap()).unwrap(),
        None => GateForm::Softplus,
    };
    if form == GateForm::Softplus {
        assert_eq!(
            g.meta::<f32>("softplus_beta"),
            1.0,
            "{}: our gate is softplus with beta 1",
            g.name
        );
        assert_eq!(
            g.meta::<f32>("softplus_threshold"),
            20.0,
            "{}: ours switches at 20",
            g.name
        );
    }
    assert_eq!(
        g.meta::<String>("bf16_rounding"),
        BF16_ROUNDING,
        "{}: regenerate it with scripts/sglang-peer",
        g.name
    );
    let variant: Variant = g.meta::<String>("variant").parse().unwrap();
    let dtype: DType = g.meta::<String>("act_dtype").parse().unwrap();
    let dims = HeadDims {
        h: g.meta("H"),
        hv: g.meta("HV"),
        k: g.meta("K"),
        v: g.meta("V"),
    };
    let (nl, ns, w): (usize, usize, usize) = (g.meta("num_layers"), g.meta("num_slots"), g.meta("window"));
    let null: i32 = g.meta("null_block_id");
    let scale: f32 = g.meta("scale");
    let gw = dims.gate_width(variant);
    let cu = g.i32s("cu_seqlens", &[g.st.tensor("cu_seqlens").unwrap().shape()[0]]);
    let b = cu.len() - 1;
    let t = *cu.last().unwrap() as usize;
    let sg_slots = g.i32s("state_indices", &[b]);
    let verify_slots: Vec<i32> = sg_slots.iter().map(|&s| s.max(-1)).collect();
    let slots: Vec<i32> = sg_slots.iter().map(|&s| if s > null { s } else { -1 }).collect();
    let accept = g.i32s("accept_lens", &[b]);
    let sg_track = g.i32s("track_slots", &[b]);
    let track_steps = g.i32s("track_steps", &[b]);
    let track_slots = (0..b)
        .map(|r| {
            let due = slots[r] >= 0 && sg_track[r] > null && (0..accept[r]).contains(&track_steps[r]);
            if due {
                sg_track[r]
            } else {
                -1
            }
        })
        .collect();
    let sd = st_dtype(dtype);
    let q = g.raw("q", &[nl, 1, t, dims.h, dims.k], sd);
    let k = g.raw("k", &[nl, 1, t, dims.h, dims.k], sd);
    let v = g.raw("v", &[nl, 1, t, dims.hv, dims.v], sd);
    let a_shape = if gw == 1 {
        vec![nl, t, dims.hv]
    } else {
        vec![nl, t, dims.hv * dims.k]
    };
    let a = g.raw("a", &a_shape, sd);
    let bb = g.raw("b", &[nl, t, dims.hv], sd);
    let a_log = g.f32s("A_log", &[nl, dims.hv]);
    let dt_bias = g.f32s("dt_bias", &[nl, dims.hv * gw]);
    fn per(x: &[u8], nl: usize, l: usize) -> &[u8] {
        let n = x.len() / nl;
        &x[l * n..(l + 1) * n]
    }
    let layers = (0..nl)
        .map(|l| RecurrentData {
            variant,
            dims,
            dtype,
            q: act(dtype, per(q, nl, l)),
            k: act(dtype, per(k, nl, l)),
            v: act(dtype, per(v, nl, l)),
            gate: GateData::Raw {
                a: act(dtype, per(a, nl, l)),
                b: act(dtype, per(bb, nl, l)),
                a_log: a_log[l * dims.hv..(l + 1) * dims.hv].to_vec(),
                dt_bias: dt_bias[l * dims.hv * gw..(l + 1) * dims.hv * gw].to_vec(),
                form,
            },
            cu_seqlens: cu.clone(),
            slots: verify_slots.clone(),
            state: Vec::new(),
            scale,
            qk_l2norm: true,
        })
        .collect();
    let state_in = g.f32s("state_in", &[nl, ns, dims.hv, dims.v, dims.k]);
    Scenario {
        name: g.name.clone(),
        variant,
        dtype,
        dims,
        nl,
        ns,
        w,
        null,
        cu,
        sg_slots,
        verify_slots,
        slots,
        accept,
        track_slots,
        track_steps,
        layers,
        state_in,
    }
}

/// The golden's ring `ring_*_<who>` as bytes.
fn golden_ring(g: &Golden<'_>, sc: &Scenario, who: &str) -> RingBytes {
    let shapes = sc.ring_shapes();
    let dt = [st_dtype(sc.dtype), st_dtype(sc.dtype), Dtype::F32, Dtype::F32];
    let part = |i: usize| {
        g.raw(&format!("ring_{}_{who}", RING_PARTS[i]), &shapes[i], dt[i])
            .to_vec()
    };
    RingBytes {
        parts: [part(0), part(1), part(2), part(3)],
    }
}

/// (a): our verify of every layer; returns our ring and our outputs `[NL, T, HV, V]` (widened).
fn our_verify(sc: &Scenario) -> (RingBytes, Vec<f32>) {
    let pool = sc.pool();
    let mut ring = sc.ring(&pool, None);
    let (t, row) = (sc.t(), sc.dims.hv * sc.dims.v);
    let mut outs = Vec::with_capacity(sc.nl * t * row);
    for (l, data) in sc.layers.iter().enumerate() {
        let mut o = ActBuffer::nan(sc.dtype, t * row);
        verify(
            Backend::Emulated,
            &data.inputs(),
            None,
            &pool,
            l,
            &mut o.dense_mut(t, row),
            Some(&mut ring),
        )
        .unwrap();
        outs.extend(o.to_f32());
    }
    assert_eq!(
        pool.state(),
        &sc.state_in[..],
        "{}: verify wrote the checkpoint",
        sc.name
    );
    (ring_bytes(&ring), outs)
}

/// A per-slot view of ring buffer `i` of `layer`, `slot`.
fn slot_part<'b>(sc: &Scenario, r: &'b RingBytes, i: usize, layer: usize, slot: usize) -> &'b [u8] {
    let elem = if i < 2 { sc.dtype.size() } else { 4 };
    let n = sc.ring_slot_elems()[i] * elem;
    let at = (layer * sc.ns + slot) * n;
    &r.parts[i][at..at + n]
}

/// How far (ulp) an f32 safe gate may lie from its f64 value at `y = exp(A_log) x`: `4 + 2|y|`
/// (see [`SAFE_MAX_G_ULP`]).
fn safe_g_allowed_ulp(a_log: f32, x: f32) -> f64 {
    4.0 + 2.0 * ((a_log as f64).exp() * x as f64).abs()
}

/// The written g records of `ring` (live rows) against the f64 value of the gate: `x = a +
/// dt_bias` added in f32 (as both kernels do), then the f64 reference's gate (`g = -exp(A_log)
/// softplus(x)`, softplus linear above 20, or the safe gate). Returns the largest distance in ulp
/// and the largest ratio of distance to what the form allows ([`MAX_G_ULP_F64`] for softplus,
/// [`safe_g_allowed_ulp`] for the safe gate).
fn g_ulps_f64(sc: &Scenario, ring: &RingBytes) -> (i64, f64) {
    let (d, gw) = (sc.dims, sc.gw());
    let g = f32s(&ring.parts[2]);
    let (mut worst, mut ratio) = (0, 0f64);
    for (l, data) in sc.layers.iter().enumerate() {
        let GateData::Raw {
            a,
            a_log,
            dt_bias,
            form,
            ..
        } = &data.gate
        else {
            unreachable!("the goldens carry raw gates")
        };
        for (r, &slot) in sc.verify_slots.iter().enumerate() {
            if slot < 0 {
                continue;
            }
            for (j, tok) in (sc.cu[r] as usize..sc.cu[r + 1] as usize).enumerate() {
                for hv in 0..d.hv {
                    for c in 0..gw {
                        let x = a.get((tok * d.hv + hv) * gw + c) + dt_bias[hv * gw + c];
                        let want = log_decay::<f64>(x as f64, 0.0, a_log[hv] as f64, *form) as f32;
                        let at = (((l * sc.ns + slot as usize) * d.hv + hv) * sc.w + j) * gw + c;
                        let u = (ordered(g[at]) - ordered(want)).abs();
                        let allowed = match form {
                            GateForm::Softplus => MAX_G_ULP_F64 as f64,
                            GateForm::Bounded(_) => safe_g_allowed_ulp(a_log[hv], x),
                        };
                        worst = worst.max(u);
                        ratio = ratio.max(u as f64 / allowed);
                    }
                }
            }
        }
    }
    (worst, ratio)
}

fn check_golden(path: &Path) {
    let bytes = std::fs::read(path).unwrap();
    let g = Golden::parse(path, &bytes);
    let sc = load(&g);
    let (d, t) = (sc.dims, sc.t());
    let live_rows = sc.rows(true);
    let null_rows = sc.rows(false);
    assert!(
        !live_rows.is_empty() && !null_rows.is_empty(),
        "{}: live and null rows",
        sc.name
    );
    println!(
        "{} (sglang {}, {} {}, H={} HV={} K={} V={}, {} layers, {} slots, W={}, null_block_id={}, slots {:?} -> ours {:?}, track {:?} @ {:?}):",
        sc.name,
        g.meta::<String>("sglang_version"),
        sc.variant.name(),
        sc.dtype,
        d.h,
        d.hv,
        d.k,
        d.v,
        sc.nl,
        sc.ns,
        sc.w,
        sc.null,
        sc.sg_slots,
        sc.slots,
        sc.track_slots,
        sc.track_steps
    );

    // (a) our verify: the golden's record of our ring, byte for byte.
    let (ours, o) = our_verify(&sc);
    let recorded = golden_ring(&g, &sc, "ours");
    for (i, p) in RING_PARTS.iter().enumerate() {
        let n = byte_diffs(&ours.parts[i], &recorded.parts[i]);
        assert_eq!(n, 0, "{}: ring {p}: {n} bytes differ from ring_{p}_ours", sc.name);
    }
    // ... and against SGLang's ring, slot by slot.
    let theirs = golden_ring(&g, &sc, "sglang");
    let (mut gate_ulp, mut gate_diff, mut gate_len, mut live_bytes) = ([0i64; 2], [0usize; 2], [0usize; 2], 0usize);
    for l in 0..sc.nl {
        for s in 0..sc.ns {
            let live = sc.verify_slots.contains(&(s as i32));
            let sg_only = !live && sc.sg_slots.contains(&(s as i32));
            for i in 0..4 {
                let (a, b) = (slot_part(&sc, &ours, i, l, s), slot_part(&sc, &theirs, i, l, s));
                if live && i >= 2 {
                    let (u, n) = ulps(&f32s(a), &f32s(b));
                    gate_ulp[i - 2] = gate_ulp[i - 2].max(u);
                    gate_diff[i - 2] += n;
                    gate_len[i - 2] += a.len() / 4;
                } else if sg_only {
                    // A slot SGLang's verify writes but we treat as the null block: ours is
                    // untouched (zeros), SGLang's written.
                    assert!(
                        a.iter().all(|&x| x == 0),
                        "{}: ring {} of null slot {s}",
                        sc.name,
                        RING_PARTS[i]
                    );
                    assert!(
                        b.iter().any(|&x| x != 0),
                        "{}: SGLang left null slot {s} alone",
                        sc.name
                    );
                } else {
                    let n = byte_diffs(a, b);
                    assert_eq!(
                        n, 0,
                        "{}: ring {} layer {l} slot {s}: {n} bytes differ",
                        sc.name, RING_PARTS[i]
                    );
                    if live {
                        live_bytes += a.len();
                        assert!(a.iter().any(|&x| x != 0), "{}: live slot {s} unwritten", sc.name);
                    } else {
                        assert!(a.iter().all(|&x| x == 0), "{}: untouched slot {s} written", sc.name);
                    }
                }
            }
        }
    }
    assert!(live_bytes > 0);
    println!(
        "  (a) ring: ours == ring_*_ours (all bytes); vs SGLang: v, k bit-identical ({live_bytes} bytes of live slots), g max {} ulp ({} of {} elements differ), beta max {} ulp ({} of {} differ); other slots as SGLang's",
        gate_ulp[0], gate_diff[0], gate_len[0], gate_ulp[1], gate_diff[1], gate_len[1]
    );
    let max_g_ulp = match sc.layers[0].gate {
        GateData::Raw {
            form: GateForm::Bounded(_),
            ..
        } => SAFE_MAX_G_ULP,
        _ => MAX_G_ULP,
    };
    assert!(
        gate_ulp[0] <= max_g_ulp && gate_ulp[1] <= MAX_BETA_ULP && gate_len.iter().all(|&n| n > 0),
        "{}: g/beta {gate_ulp:?} ulp",
        sc.name
    );
    // Our g against its f64 value from the same f32 inputs, and SGLang's (for the record).
    let ((mine, my_ratio), (sglang, sg_ratio)) = (g_ulps_f64(&sc, &ours), g_ulps_f64(&sc, &theirs));
    println!(
        "  (a) ring g from its f64 value: ours max {mine} ulp ({my_ratio:.2} of the allowed), SGLang's max {sglang} ulp ({sg_ratio:.2})"
    );
    assert!(
        my_ratio <= 1.0,
        "{}: our g is up to {mine} ulp from f64 ({my_ratio:.2} of the allowed)",
        sc.name
    );
    // Outputs: live rows within the dtype's case tolerance of SGLang's; null rows zero.
    let row = d.hv * d.v;
    let o_sg = act(
        sc.dtype,
        g.raw("o_sglang", &[sc.nl, 1, t, d.hv, d.v], st_dtype(sc.dtype)),
    )
    .to_f32();
    let pick = |x: &[f32], rows: &[usize]| -> Vec<f32> {
        (0..sc.nl)
            .flat_map(|l| {
                rows.iter()
                    .flat_map(move |&r| (0..row).map(move |j| (l * t + r) * row + j))
            })
            .map(|i| x[i])
            .collect()
    };
    let (ol, sl) = (pick(&o, &live_rows), pick(&o_sg, &live_rows));
    let tol = tolerance(sc.dtype);
    let c = compare(&ol, &widen(&sl), tol);
    let equal = ol.iter().zip(&sl).filter(|(a, b)| a == b).count();
    let u = act_ulps(sc.dtype, &ol, &sl);
    println!(
        "  (a) o, live rows vs SGLang: {c} (atol {}, rtol {}), {equal} of {} equal, max {u} ulp of {}",
        tol.atol,
        tol.rtol,
        ol.len(),
        sc.dtype
    );
    assert!(c.passed() && c.len > 0, "{}: o {c}", sc.name);
    if sc.dtype == DType::BF16 {
        assert!(u <= MAX_BF16_O_ULP, "{}: bf16 outputs {u} ulp from SGLang's", sc.name);
    }
    let on = pick(&o, &null_rows);
    assert!(
        !on.is_empty() && on.iter().all(|&x| x == 0.0),
        "{}: null rows' outputs",
        sc.name
    );
    let sg_null_nonzero = pick(&o_sg, &null_rows).iter().filter(|&&x| x != 0.0).count();
    println!(
        "  (a) o, null rows: ours all {} zero (SGLang's: {sg_null_nonzero} nonzero, computed from a zero state or the null block's)",
        on.len()
    );

    // (b), (c): our fold of SGLang's ring and of ours, vs SGLang's fold of each.
    let folded_slots: Vec<usize> = sc
        .slots
        .iter()
        .chain(&sc.track_slots)
        .filter(|&&s| s >= 0)
        .map(|&s| s as usize)
        .collect();
    let per = d.state_elems();
    let shape = [sc.nl, sc.ns, d.hv, d.v, d.k];
    for (what, ring, expected) in [
        ("(b) fold of SGLang's ring", &theirs, "state_folded_sglang"),
        ("(c) fold of our ring", &ours, "state_sglang_fold_of_ours"),
    ] {
        let got = sc.fold(ring);
        let want = g.f32s(expected, &shape);
        let (mut sel_got, mut sel_want, mut moved) = (vec![], vec![], 0usize);
        for l in 0..sc.nl {
            for s in 0..sc.ns {
                let at = (l * sc.ns + s) * per;
                let (a, b, i) = (&got[at..at + per], &want[at..at + per], &sc.state_in[at..at + per]);
                if folded_slots.contains(&s) {
                    sel_got.extend_from_slice(a);
                    sel_want.extend_from_slice(b);
                    moved += usize::from(a != i);
                } else {
                    // Neither folded nor tracked: bit-equal to state_in, in ours and SGLang's.
                    assert!(
                        a.iter().zip(i).all(|(x, y)| x.to_bits() == y.to_bits()),
                        "{}: {what}: slot {s} moved",
                        sc.name
                    );
                    assert!(
                        b.iter().zip(i).all(|(x, y)| x.to_bits() == y.to_bits()),
                        "{}: {expected}: slot {s} moved",
                        sc.name
                    );
                }
            }
        }
        assert_eq!(
            moved,
            sc.nl * folded_slots.len(),
            "{}: {what}: a folded slot kept state_in",
            sc.name
        );
        let c = compare(&sel_got, &widen(&sel_want), STATE_TOL);
        let (_, n) = ulps(&sel_got, &sel_want);
        let scale = sel_want.iter().fold(0f32, |m, x| m.max(x.abs()));
        println!(
            "  {what} vs {expected}: {c} (slots {folded_slots:?}, max |state| {scale:.3}: {:.2e} of it), {n} of {} differ",
            c.max_abs_err / scale as f64,
            sel_got.len()
        );
        assert!(c.passed() && c.len > 0, "{}: {what}: {c}", sc.name);
    }
}

/// The goldens (by name, or by report line) include one that `is` the kind `want`.
fn assert_covers(goldens: &[String], want: &str, is: impl Fn(&str) -> bool) {
    assert!(goldens.iter().any(|g| is(g)), "no {want} golden in {goldens:?}");
}

#[test]
fn our_kernels_match_sglangs_on_every_golden() {
    let goldens = files(".golden.safetensors");
    for f in &goldens {
        check_golden(f);
    }
    // One of each variant and act dtype, with and without a null block.
    let names: Vec<String> = goldens
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for want in [
        "gdn_bf16",
        "gdn_f32",
        "kda_bf16",
        "kda_f32",
        "kda_f32_safe",
        "kda_bf16_safe",
        // K = 96 (SGLang's batched-fold and ring-fused tests' head size), both variants.
        "gdn_bf16_k96",
        "kda_f32_k96",
    ] {
        assert_covers(&names, want, |n| n.starts_with(want));
    }
}

#[test]
fn the_sglang_fold_cases_pass_and_fail_when_moved() {
    for f in files(".fold.safetensors") {
        let c = case::load(&f).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.op, case::Op::Fold);
        let rep = case::run(&c, Backend::Emulated).unwrap();
        println!(
            "{}: o {} / state {}",
            f.file_name().unwrap().to_string_lossy(),
            rep.o,
            rep.state_out.unwrap()
        );
        assert!(rep.passed() && rep.o.len > 0, "{}: {rep:?}", f.display());
        // An expectation moved by a few tolerances fails.
        let mut bad = c.clone();
        let i = bad.expected_o.len() / 2;
        bad.expected_o[i] += 10.0 * (c.tolerance.atol + c.tolerance.rtol * c.expected_o[i].abs() as f64) as f32;
        assert!(
            !case::run(&bad, Backend::Emulated).unwrap().o.passed(),
            "{}",
            f.display()
        );
        let mut bad = c.clone();
        let st = bad.expected_state.as_mut().unwrap();
        st[0] += 10.0 * (c.tolerance.atol + c.tolerance.rtol * st[0].abs() as f64) as f32;
        assert!(
            !case::run(&bad, Backend::Emulated).unwrap().state_out.unwrap().passed(),
            "{}",
            f.display()
        );
    }
}

#[test]
fn the_comparators_see_a_flipped_byte() {
    let a: Vec<u8> = (0..64).collect();
    let mut b = a.clone();
    assert_eq!(byte_diffs(&a, &b), 0);
    b[17] ^= 1;
    assert_eq!(byte_diffs(&a, &b), 1);
    let x = [1.0f32, -2.0, 0.0, 3.5];
    let mut y = x;
    assert_eq!(ulps(&x, &y), (0, 0));
    y[1] = f32::from_bits(y[1].to_bits() + 1);
    assert_eq!(ulps(&x, &y), (1, 1));
    y[2] = -0.0;
    assert_eq!(ulps(&x, &y), (1, 1), "+0 and -0 are 0 ulp apart");
    y[2] = -f32::from_bits(1);
    assert_eq!(ulps(&x, &y), (1, 2), "across zero");
    let c: Comparison = compare(&[1.0, 2.0], &[1.0, 2.1], STATE_TOL);
    assert!(!c.passed());
    // A golden's recorded ring with one byte flipped no longer matches our verify.
    let f = &files(".golden.safetensors")[0];
    let bytes = std::fs::read(f).unwrap();
    let g = Golden::parse(f, &bytes);
    let sc = load(&g);
    let (ours, _) = our_verify(&sc);
    let mut recorded = golden_ring(&g, &sc, "ours");
    assert_eq!(byte_diffs(&ours.parts[0], &recorded.parts[0]), 0);
    let n = recorded.parts[0].len();
    recorded.parts[0][n / 3] ^= 0x40;
    assert_eq!(byte_diffs(&ours.parts[0], &recorded.parts[0]), 1);
}

/// Our buffered decode against SGLang's: `(outputs, final checkpoint)`, about twice what the
/// goldens measure. f32: two f32 implementations (measured 4.5e-8 / 1.2e-7 at most). f16/bf16
/// rings: both store the same rounded records, but SGLang rebuilds the state from them with a
/// 16-bit tensor-core dot (each record multiplied by its decay and rounded again) where ours
/// replays them in f32 (measured: f16 6.1e-5 / 3.7e-4, bf16 4.9e-4 / 2.6e-3 at states ~0.6;
/// each side's outputs are about as far from the f64 recurrence as the other's).
fn decode_tolerance(dtype: DType) -> (Tolerance, Tolerance) {
    match dtype {
        DType::F32 => (Tolerance { atol: 1e-6, rtol: 1e-5 }, STATE_TOL),
        DType::F16 => (
            Tolerance {
                atol: 1.5e-4,
                rtol: 1e-3,
            },
            Tolerance { atol: 1e-3, rtol: 2e-3 },
        ),
        DType::BF16 => (
            Tolerance { atol: 1e-3, rtol: 4e-3 },
            Tolerance { atol: 5e-3, rtol: 1e-2 },
        ),
    }
}

/// The decode golden's f64 recurrence of one row's token (the golden's f32 gate inputs, x = a +
/// dt_bias added in f32 as both kernels add it; keys and queries normalised; no rounding of
/// any record): updates `s` (one value head, `[V, K]`) and returns the output row.
#[allow(clippy::too_many_arguments)]
fn f64_decode_token(
    s: &mut [f64],
    dims: &HeadDims,
    kda: bool,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    a: &[f32],
    b: f32,
    a_log: f32,
    dt_bias: &[f32],
    scale: f64,
) -> Vec<f64> {
    let widen = |x: &[f32]| x.iter().map(|&v| v as f64).collect::<Vec<f64>>();
    let (mut qh, mut kh) = (widen(q), widen(k));
    reference::l2_normalize(&mut qh);
    reference::l2_normalize(&mut kh);
    qh.iter_mut().for_each(|x| *x *= scale);
    let gw = if kda { dims.k } else { 1 };
    let decay: Vec<f64> = (0..gw)
        .map(|c| {
            let x = a[c] + dt_bias[c];
            log_decay::<f64>(x as f64, 0.0, a_log as f64, GateForm::Softplus).exp()
        })
        .collect();
    reference::delta_rule_update(s, dims, &decay, &kh, &widen(v), reference::beta(b as f64));
    let mut o = vec![0.0; dims.v];
    reference::readout(s, dims, &qh, &mut o);
    o
}

/// What one decode golden gave: the report line.
fn check_decode_golden(path: &Path) -> String {
    let bytes = std::fs::read(path).unwrap();
    let g = Golden::parse(path, &bytes);
    let name = g.name.clone();
    let kda = g.meta::<String>("variant") == "kda";
    let variant = if kda { Variant::Kda } else { Variant::Gdn };
    let [h, hv, k, v, ns, l, steps]: [usize; 7] =
        ["H", "HV", "K", "V", "num_slots", "cache_len", "steps"].map(|key| g.meta(key));
    let dtype_of = |key: &str| match g.meta.get(key).map(String::as_str).unwrap_or("f32") {
        "f32" => DType::F32,
        "f16" => DType::F16,
        "bf16" => DType::BF16,
        other => panic!("{name}: {key} = {other}"),
    };
    let (adt, rec) = (dtype_of("act_dtype"), dtype_of("ring_dtype"));
    let dims = HeadDims { h, hv, k, v };
    let b_rows = g.st.tensor("slots").unwrap().shape()[1];
    let width = 2 * h * k + hv * v;
    let gw = if kda { k } else { 1 };
    let act_of = |t: &str, shape: &[usize]| act(adt, g.raw(t, shape, st_dtype(adt)));
    let mixed = act_of("mixed_qkv", &[steps, b_rows, width]);
    let a = act_of(
        "a",
        &if kda {
            vec![steps, b_rows, hv, k]
        } else {
            vec![steps, b_rows, hv]
        },
    );
    let b = act_of("b", &[steps, b_rows, hv]);
    let a_log = g.f32s("A_log", &[hv]);
    let dt_bias = g.f32s("dt_bias", &if kda { vec![hv, k] } else { vec![hv] });
    let state_in = g.f32s("state_in", &[ns, hv, v, k]);
    let slots = g.i32s("slots", &[steps, b_rows]);
    let write_pos = g.i32s("write_pos", &[steps, b_rows]);
    let force = g.i32s("force_flush", &[steps, b_rows]);
    let out_sg = act_of("out_sglang", &[steps, b_rows, 1, hv, v]).to_f32();
    let state_sg = g.f32s("state_sglang", &[ns, hv, v, k]);
    let scale: f32 = g.meta("scale");

    let flags = EngineFlags {
        enable_linear_replayssm: true,
        linear_replayssm_cache_len: Some(l as i64),
        linear_attn_kind: variant,
        ..EngineFlags::default()
    };
    let cfg = resolve(&flags).unwrap();
    let mut pool = CheckpointPool::new(&cfg, dims, 1, ns).unwrap();
    pool.state_mut().copy_from_slice(&state_in);
    let mut ring = DecodeRing::attach_with_records(&pool, rec).unwrap();
    assert_eq!(ring.record_dtype(), rec);
    let (o_tol, st_tol) = decode_tolerance(adt);
    let row = hv * v;
    let head = v * k;
    let mut truth: Vec<f64> = widen(&state_in);
    let (mut ours_o, mut sg_o, mut truth_o) = (vec![], vec![], vec![]);
    let mut flushes = 0;
    for t in 0..steps {
        let st_slots = &slots[t * b_rows..(t + 1) * b_rows];
        let flush_rows: Vec<bool> = force[t * b_rows..(t + 1) * b_rows].iter().map(|&f| f != 0).collect();
        let step = ring.begin_step(st_slots, ForceFlush::Rows(&flush_rows)).unwrap();
        for (r, &slot) in st_slots.iter().enumerate() {
            if slot >= 0 {
                assert_eq!(
                    step.positions()[r],
                    write_pos[t * b_rows + r],
                    "{name}: step {t} row {r}'s cursor"
                );
            }
        }
        let at = t * b_rows * width;
        let inp = DecodeInputs {
            variant,
            dims,
            q: mixed.view(at, b_rows, h * k, width),
            k: mixed.view(at + h * k, b_rows, h * k, width),
            v: mixed.view(at + 2 * h * k, b_rows, hv * v, width),
            gate: Gate::Raw(RawGate {
                a: a.view(t * b_rows * hv * gw, b_rows, hv * gw, hv * gw),
                b: b.view(t * b_rows * hv, b_rows, hv, hv),
                a_log: &a_log[..],
                dt_bias: &dt_bias[..],
                form: GateForm::Softplus,
            }),
            scale,
            qk_l2norm: true,
        };
        let mut o = ActBuffer::nan(adt, b_rows * row);
        decode(
            Backend::Emulated,
            &inp,
            &mut pool,
            &mut ring,
            &step,
            0,
            &mut o.dense_mut(b_rows, row),
        )
        .unwrap_or_else(|e| panic!("{name}: step {t}: {e}"));
        flushes += (0..b_rows).filter(|&r| ring.flushes(&step, r)).count();
        ring.finish_step(step).unwrap();
        for (r, &slot) in st_slots.iter().enumerate() {
            let got: Vec<f32> = (0..row).map(|i| o.get(r * row + i)).collect();
            if slot < 0 {
                assert!(got.iter().all(|&x| x == 0.0), "{name}: step {t}: null row {r} not zero");
                continue;
            }
            ours_o.extend_from_slice(&got);
            sg_o.extend_from_slice(&out_sg[(t * b_rows + r) * row..(t * b_rows + r + 1) * row]);
            let tok = |x: &ActBuffer, off: usize, n: usize| (0..n).map(|i| x.get(off + i)).collect::<Vec<f32>>();
            let base = (t * b_rows + r) * width;
            for head_v in 0..hv {
                let kh = head_v / (hv / h);
                let s = &mut truth[(slot as usize * hv + head_v) * head..(slot as usize * hv + head_v + 1) * head];
                truth_o.extend(f64_decode_token(
                    s,
                    &dims,
                    kda,
                    &tok(&mixed, base + kh * k, k),
                    &tok(&mixed, base + h * k + kh * k, k),
                    &tok(&mixed, base + 2 * h * k + head_v * v, v),
                    &tok(&a, ((t * b_rows + r) * hv + head_v) * gw, gw),
                    b.get((t * b_rows + r) * hv + head_v),
                    a_log[head_v],
                    &dt_bias[head_v * gw..(head_v + 1) * gw],
                    scale as f64,
                ));
            }
        }
    }
    assert!(flushes >= 3, "{name}: only {flushes} flushes");
    let c = compare(&ours_o, &widen(&sg_o), o_tol);
    assert!(c.passed(), "{name}: outputs vs SGLang's: {c}");
    let state = pool.state();
    for slot in 0..ns {
        let (lo, hi) = (slot * hv * head, (slot + 1) * hv * head);
        if state_sg[lo..hi] == state_in[lo..hi] {
            assert_eq!(
                &state[lo..hi],
                &state_in[lo..hi],
                "{name}: slot {slot} was not written by SGLang"
            );
        }
    }
    let cs = compare(state, &widen(&state_sg), st_tol);
    assert!(cs.passed(), "{name}: checkpoint vs SGLang's: {cs}");
    // Against the f64 recurrence: the checkpoints are flushed states (pending records not in
    // them), so only the outputs compare with it step by step.
    let dist = |x: &[f32]| {
        x.iter()
            .zip(&truth_o)
            .map(|(&a, &b)| (a as f64 - b).abs())
            .fold(0.0f64, f64::max)
    };
    let (ours_f64, sg_f64) = (dist(&ours_o), dist(&sg_o));
    let mut line = format!(
        "{name} ({adt} activations, {rec} records, {variant} L={l}, {steps} steps, {flushes} flushes): outputs vs SGLang's {c}; \
         checkpoint vs SGLang's {cs}; outputs vs f64: ours {ours_f64:.3e}, SGLang's {sg_f64:.3e}"
    );
    // The records left in the rings after the last step: the same meaning, layout and write
    // positions on both sides (the cursors are identical). Ours was poisoned with NaN, SGLang's
    // zeroed: a position neither wrote is NaN in ours and 0 in SGLang's, and left out.
    if rec != DType::F32 {
        let written = |ours: &[f32], sg: &[f32]| -> (Vec<f32>, Vec<f32>) {
            let mut kept = (vec![], vec![]);
            for (&x, &y) in ours.iter().zip(sg) {
                if x.is_nan() {
                    assert_eq!(y, 0.0, "{name}: a record SGLang wrote is missing in ours");
                } else {
                    kept.0.push(x);
                    kept.1.push(y);
                }
            }
            kept
        };
        let k_sg = act(rec, g.raw("ring_k_sglang", &[ns, h, l, k], st_dtype(rec))).to_f32();
        let d_sg = act(rec, g.raw("ring_d_sglang", &[ns, hv, l, v], st_dtype(rec))).to_f32();
        let (k_ours, k_sg) = written(&ring.k().to_f32(), &k_sg);
        let (d_ours, d_sg) = written(&ring.d().to_f32(), &d_sg);
        assert!(!k_ours.is_empty() && !d_ours.is_empty(), "{name}: no record written");
        // The keys: k^ rounded from the same f32 value (a division by the norm in ours, a
        // product with its reciprocal in SGLang's: an f32 ulp apart at most, which the rounding
        // hides but for a rare tie).
        let k_differ = k_ours.iter().zip(&k_sg).filter(|(x, y)| x != y).count();
        assert!(
            k_differ * 100 <= k_ours.len(),
            "{name}: {k_differ} of {} written keys differ from SGLang's",
            k_ours.len()
        );
        line += &format!(
            "; records written: k^ {k_differ} of {} differ, d {} of {} differ ({} {rec} ulps at most)",
            k_ours.len(),
            d_ours.iter().zip(&d_sg).filter(|(x, y)| x != y).count(),
            d_ours.len(),
            act_ulps(rec, &d_ours, &d_sg)
        );
    }
    line
}

#[test]
fn our_buffered_decode_matches_sglangs_on_every_decode_golden() {
    let goldens = files(".decode.safetensors");
    let mut kinds = vec![];
    for f in &goldens {
        let line = check_decode_golden(f);
        println!("{line}");
        kinds.push(line);
    }
    // SGLang's bf16 decode rings, both variants, and an f16 one; f32 rings too.
    for want in [
        "f32 records, gdn",
        "f32 records, kda",
        "bf16 records, gdn",
        "bf16 records, kda",
        "f16 records",
    ] {
        assert_covers(&kinds, want, |k| k.contains(want));
    }
}
