//! Owned, randomly drawn inputs for kernel R (tests, benches, the demo and case files): fresh
//! non-zero values from a seeded generator, in the ranges real models produce.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use replayssm::dtype::{ActBuffer, DType};
use replayssm::kernels::decode::DecodeInputs;
use replayssm::kernels::recurrent::default_scale;
use replayssm::problem::{HeadDims, Variant};
use replayssm::tokens::RecurrentInputs;
use replayssm::tokens::{Gate, GateForm, RawGate};
use replayssm::tree::DraftTree;

/// Owned gate inputs.
#[derive(Clone, Debug)]
pub enum GateData {
    Raw {
        a: ActBuffer,
        b: ActBuffer,
        a_log: Vec<f32>,
        dt_bias: Vec<f32>,
        form: GateForm,
    },
    Precomputed {
        g: Vec<f32>,
        beta: Vec<f32>,
    },
}

/// What to draw.
#[derive(Clone, Debug)]
pub struct WorkloadSpec {
    pub variant: Variant,
    pub dims: HeadDims,
    pub dtype: DType,
    /// Tokens per request.
    pub seqlens: Vec<usize>,
    /// Requests whose slot is `-1`.
    pub null_requests: Vec<usize>,
    /// Extra slots in the pool that no request uses (they must stay untouched).
    pub spare_slots: usize,
    pub raw_gate: bool,
    /// How a raw gate forms `g` (unused with a precomputed gate).
    pub gate_form: GateForm,
    pub qk_l2norm: bool,
}

/// Dense inputs of one kernel-R launch plus its checkpoint pool.
#[derive(Clone, Debug)]
pub struct RecurrentData {
    pub variant: Variant,
    pub dims: HeadDims,
    pub dtype: DType,
    /// `[N, H*K]`
    pub q: ActBuffer,
    /// `[N, H*K]`
    pub k: ActBuffer,
    /// `[N, HV*V]`
    pub v: ActBuffer,
    pub gate: GateData,
    pub cu_seqlens: Vec<i32>,
    pub slots: Vec<i32>,
    /// `[NS, HV, V, K]`
    pub state: Vec<f32>,
    pub scale: f32,
    pub qk_l2norm: bool,
}

fn uniform(rng: &mut ChaCha8Rng, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    (0..n).map(|_| rng.gen_range(lo..hi)).collect()
}

impl RecurrentData {
    /// Draws a workload from `seed`. Slots are a random permutation of the pool, so request
    /// order and slot order differ.
    pub fn random(spec: &WorkloadSpec, seed: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let d = spec.dims;
        let n: usize = spec.seqlens.iter().sum();
        let batch = spec.seqlens.len();
        let gw = d.gate_width(spec.variant);
        // Without in-kernel normalisation the caller passes unit-scale keys.
        let kmag = if spec.qk_l2norm { 1.0 } else { 1.0 / (d.k as f32).sqrt() };
        let q = ActBuffer::from_f32(spec.dtype, &uniform(&mut rng, n * d.h * d.k, -kmag, kmag));
        let k = ActBuffer::from_f32(spec.dtype, &uniform(&mut rng, n * d.h * d.k, -kmag, kmag));
        let v = ActBuffer::from_f32(spec.dtype, &uniform(&mut rng, n * d.hv * d.v, -1.0, 1.0));
        let gate = if spec.raw_gate {
            GateData::Raw {
                a: ActBuffer::from_f32(spec.dtype, &uniform(&mut rng, n * d.hv * gw, -3.0, 3.0)),
                b: ActBuffer::from_f32(spec.dtype, &uniform(&mut rng, n * d.hv, -3.0, 3.0)),
                a_log: uniform(&mut rng, d.hv, -1.5, 0.5),
                dt_bias: uniform(&mut rng, d.hv * gw, -1.0, 1.0),
                form: spec.gate_form,
            }
        } else {
            GateData::Precomputed {
                g: uniform(&mut rng, n * d.hv * gw, -1.0, -0.01),
                beta: uniform(&mut rng, n * d.hv, 0.05, 0.95),
            }
        };
        let mut cu_seqlens = vec![0i32];
        for &l in &spec.seqlens {
            cu_seqlens.push(cu_seqlens.last().unwrap() + l as i32);
        }
        let num_slots = batch + spec.spare_slots;
        let mut perm: Vec<i32> = (0..num_slots as i32).collect();
        for i in (1..perm.len()).rev() {
            perm.swap(i, rng.gen_range(0..=i));
        }
        let slots = (0..batch)
            .map(|r| if spec.null_requests.contains(&r) { -1 } else { perm[r] })
            .collect();
        let state = uniform(&mut rng, num_slots * d.state_elems(), -0.5, 0.5);
        RecurrentData {
            variant: spec.variant,
            dims: d,
            dtype: spec.dtype,
            q,
            k,
            v,
            gate,
            cu_seqlens,
            slots,
            state,
            scale: default_scale(d.k),
            qk_l2norm: spec.qk_l2norm,
        }
    }

    pub fn num_tokens(&self) -> usize {
        *self.cu_seqlens.last().unwrap_or(&0) as usize
    }

    /// Dense views of everything.
    pub fn inputs(&self) -> RecurrentInputs<'_> {
        let d = self.dims;
        let n = self.num_tokens();
        RecurrentInputs {
            variant: self.variant,
            dims: d,
            q: self.q.dense(n, d.h * d.k),
            k: self.k.dense(n, d.h * d.k),
            v: self.v.dense(n, d.hv * d.v),
            gate: self.gate_view(n),
            cu_seqlens: &self.cu_seqlens,
            slots: &self.slots,
            scale: self.scale,
            qk_l2norm: self.qk_l2norm,
        }
    }

    /// The tokens as one decode step of kernel D: row `b` is token `b` (slots come from the
    /// step, not from here).
    pub fn decode_inputs(&self) -> DecodeInputs<'_> {
        let d = self.dims;
        let n = self.num_tokens();
        DecodeInputs {
            variant: self.variant,
            dims: d,
            q: self.q.dense(n, d.h * d.k),
            k: self.k.dense(n, d.h * d.k),
            v: self.v.dense(n, d.hv * d.v),
            gate: self.gate_view(n),
            scale: self.scale,
            qk_l2norm: self.qk_l2norm,
        }
    }

    fn gate_view(&self, n: usize) -> Gate<'_> {
        let d = self.dims;
        let gw = d.gate_width(self.variant);
        match &self.gate {
            GateData::Raw {
                a,
                b,
                a_log,
                dt_bias,
                form,
            } => Gate::Raw(RawGate {
                a: a.dense(n, d.hv * gw),
                b: b.dense(n, d.hv),
                a_log,
                dt_bias,
                form: *form,
            }),
            GateData::Precomputed { g, beta } => Gate::Precomputed { g, beta },
        }
    }

    /// A workload made of the listed tokens of this one (same bits: values are copied within
    /// one dtype), with new `cu_seqlens`. `None` is a filler row of finite values (for a null
    /// row of a decode step). Slots, pool and gate parameters are kept.
    pub fn gather(&self, tokens: &[Option<usize>], cu_seqlens: Vec<i32>) -> RecurrentData {
        let pick = |src: &[f32], row: usize| -> Vec<f32> {
            tokens
                .iter()
                .flat_map(|t| match t {
                    Some(i) => src[i * row..(i + 1) * row].to_vec(),
                    None => vec![0.5; row],
                })
                .collect()
        };
        let act = |b: &ActBuffer, row: usize| ActBuffer::from_f32(b.dtype(), &pick(&b.to_f32(), row));
        let d = self.dims;
        let gw = d.gate_width(self.variant);
        RecurrentData {
            q: act(&self.q, d.h * d.k),
            k: act(&self.k, d.h * d.k),
            v: act(&self.v, d.hv * d.v),
            gate: match &self.gate {
                GateData::Raw {
                    a,
                    b,
                    a_log,
                    dt_bias,
                    form,
                } => GateData::Raw {
                    a: act(a, d.hv * gw),
                    b: act(b, d.hv),
                    a_log: a_log.clone(),
                    dt_bias: dt_bias.clone(),
                    form: *form,
                },
                GateData::Precomputed { g, beta } => GateData::Precomputed {
                    g: pick(g, d.hv * gw),
                    beta: pick(beta, d.hv),
                },
            },
            cu_seqlens,
            ..self.clone()
        }
    }
}

/// Shapes of random draft trees (tests, benches, case files).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TreeShape {
    /// `parent = i - 1`: what kernel V assumes.
    Chain,
    /// A root with every other node as its child.
    Star,
    /// A complete binary tree in breadth-first order.
    Binary,
    /// EAGLE-style top-k expansion: a root, then levels of up to `k` nodes, each the child of a
    /// random node of the level above.
    TopK(usize),
    /// Any parent among the earlier positions or the checkpoint (a forest).
    Random,
}

impl TreeShape {
    pub const ALL: [TreeShape; 6] = [
        TreeShape::Chain,
        TreeShape::Star,
        TreeShape::Binary,
        TreeShape::TopK(2),
        TreeShape::TopK(4),
        TreeShape::Random,
    ];

    /// Parents of a tree of `nodes` nodes (window positions, -1 = child of the checkpoint).
    pub fn parents(self, nodes: usize, rng: &mut impl Rng) -> Vec<i32> {
        match self {
            TreeShape::Chain => (0..nodes as i32).map(|i| i - 1).collect(),
            TreeShape::Star => (0..nodes).map(|i| if i == 0 { -1 } else { 0 }).collect(),
            TreeShape::Binary => (0..nodes as i32)
                .map(|i| if i == 0 { -1 } else { (i - 1) / 2 })
                .collect(),
            TreeShape::TopK(k) => {
                let mut parent = vec![];
                let mut level: Vec<i32> = vec![];
                while parent.len() < nodes {
                    let next: Vec<i32> = (0..if level.is_empty() { 1 } else { k.max(1) })
                        .take(nodes - parent.len())
                        .map(|_| {
                            let p = if level.is_empty() {
                                -1
                            } else {
                                level[rng.gen_range(0..level.len())]
                            };
                            parent.push(p);
                            parent.len() as i32 - 1
                        })
                        .collect();
                    level = next;
                }
                parent
            }
            TreeShape::Random => (0..nodes as i32).map(|i| rng.gen_range(-1..i)).collect(),
        }
    }

    /// The spelling [`FromStr`](std::str::FromStr) reads: `chain`, `star`, `binary`, `topk<K>`, `random`.
    pub fn name(self) -> String {
        match self {
            TreeShape::Chain => "chain".into(),
            TreeShape::Star => "star".into(),
            TreeShape::Binary => "binary".into(),
            TreeShape::TopK(k) => format!("topk{k}"),
            TreeShape::Random => "random".into(),
        }
    }

    /// A [`DraftTree`] over requests of `seqlens` nodes each.
    pub fn tree(self, seqlens: &[usize], rng: &mut impl Rng) -> replayssm::Result<DraftTree> {
        let mut parent = vec![];
        let mut cu = vec![0i32];
        for &n in seqlens {
            parent.extend(self.parents(n, rng));
            cu.push(cu[cu.len() - 1] + n as i32);
        }
        DraftTree::new(parent, &cu)
    }
}

impl std::str::FromStr for TreeShape {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "chain" => TreeShape::Chain,
            "star" => TreeShape::Star,
            "binary" => TreeShape::Binary,
            "random" => TreeShape::Random,
            _ => match s.strip_prefix("topk").and_then(|k| k.parse::<usize>().ok()) {
                Some(k) if k >= 1 => TreeShape::TopK(k),
                _ => {
                    return Err(format!(
                        "invalid tree shape '{s}' (expected chain, star, binary, topk<K> with K >= 1, or random)"
                    ))
                }
            },
        })
    }
}
