//! The bytes floor of every kernel (design §8): the bytes a kernel must move at least, per model
//! shape, batch `B` and window `T` (cache length `L` for D). Every kernel here is memory-bound, so
//! a measured time is reported as percent of `floor bytes / copy bandwidth`; the bandwidth is the
//! device-to-device copy rate measured in the same run (about 4.3 TB/s on an H200).
//! `replayssm floor` prints the table; the demo's byte lines use the same functions.

use replayssm::dtype::DType;
use replayssm::problem::{HeadDims, Variant};

/// Bytes of one ring record per slot and position (design §8): `E = HV·V·2 + H·K·2 + HV·8`.
pub fn ring_record_bytes(d: &HeadDims, act: DType) -> usize {
    d.hv * d.v * act.size() + d.h * d.k * act.size() + d.hv * 8
}

/// design §8 bandwidth floors of one layer and one step, in bytes.
#[derive(Clone, Copy, Debug)]
pub struct StepBytes {
    /// ReplaySSM verify: checkpoint read + ring write + inputs + outputs.
    pub verify: usize,
    /// ReplaySSM fold of `n` tokens: checkpoint read and write + `n` ring records.
    pub fold: usize,
    /// Recurrent verify with snapshots: checkpoint read + `T` snapshots + inputs + outputs.
    pub recurrent_snapshots: usize,
    /// Deferred fold (VF): checkpoint read and write + the `n` pending records of the last step
    /// + the verify's ring write, inputs and outputs.
    pub verify_fold: usize,
}

pub fn step_bytes(d: &HeadDims, act: DType, batch: usize, t: usize, accepted: usize) -> StepBytes {
    let state = d.state_elems() * 4;
    let e = ring_record_bytes(d, act);
    let inputs = t * (2 * d.h * d.k + d.hv * d.v + 2 * d.hv) * act.size();
    let outputs = t * d.hv * d.v * act.size();
    StepBytes {
        verify: batch * (state + t * e + inputs + outputs),
        fold: batch * 2 * state + accepted * e,
        recurrent_snapshots: batch * ((1 + t) * state + inputs + outputs),
        verify_fold: batch * (2 * state + t * e + inputs + outputs) + accepted * e,
    }
}

/// Bytes of one record's correction u per slot and position (VB's ring_u, f32): `HV·V·4`.
pub fn correction_bytes(d: &HeadDims) -> usize {
    d.hv * d.v * 4
}

/// Bytes VB reads per history record: its key, its decay (`HV·4`, KDA `HV·K·4`: one per key
/// channel) and its correction u (not its v and beta: the correction replaces them).
pub fn history_record_bytes(d: &HeadDims, variant: Variant, act: DType) -> usize {
    d.h * d.k * act.size() + d.hv * d.gate_width(variant) * 4 + correction_bytes(d)
}

/// The buffered speculative step (kernel VB, design §4 VB) over a cycle of flushes, with `a`
/// tokens accepted per step (0..=T) and cache length `l` (L >= 2 T): a slot's history grows by `a`
/// per step and flushes at the commit that leaves no room for the next window, so a cycle is
/// `c = floor((L - T) / a) + 1` steps (one step when nothing is accepted). Per verify (one layer):
/// the checkpoint, the history read (on average `a (c - 1) / 2` records of
/// [`history_record_bytes`]), the window's T records and corrections written, the inputs and
/// outputs; per cycle the flush reads and writes the checkpoint and reads `c a` raw records.
/// Returns `(verify per layer, flush per layer)` averaged per step.
pub fn buffered_step_bytes(
    d: &HeadDims,
    variant: Variant,
    act: DType,
    batch: usize,
    t: usize,
    l: usize,
    a: usize,
) -> (f64, f64) {
    let state = (d.state_elems() * 4) as f64;
    let e = ring_record_bytes(d, act) as f64;
    let (eh, u) = (history_record_bytes(d, variant, act) as f64, correction_bytes(d) as f64);
    let io = (t * (2 * d.h * d.k + 2 * d.hv * d.v + 2 * d.hv) * act.size()) as f64;
    // Nothing accepted: one step per "cycle", nothing to flush.
    let c = l.saturating_sub(t).checked_div(a).map_or(1.0, |k| (k + 1) as f64);
    let (af, tf, b) = (a as f64, t as f64, batch as f64);
    let verify = b * (state + af * (c - 1.0) / 2.0 * eh + tf * (e + u) + io);
    let flush = if a == 0 {
        0.0
    } else {
        b * (2.0 * state + c * af * e) / c
    };
    (verify, flush)
}

/// The cache lengths of the buffered rows: (L, one layer's VB, the whole step); a row needs
/// L >= 2 T.
pub const BUFFERED_CACHE_LENS: [(usize, &str, &str); 4] = [
    (8, "VB-L8", "step-VB-L8"),
    (16, "VB-L16", "step-VB-L16"),
    (32, "VB-L32", "step-VB-L32"),
    (64, "VB-L64", "step-VB-L64"),
];

/// Bytes of one buffered-decode record (design §4 D, f32 ring): `u [HV, V]`, `k̂ [H, K]`, `g`.
pub fn decode_record_bytes(d: &HeadDims, variant: Variant) -> usize {
    (d.hv * d.v + d.h * d.k + d.hv * d.gate_width(variant)) * 4
}

/// Bytes of one buffered-decode launch (one layer) in its two phases, `(non-flush, flush)`,
/// with cache length `l`. A slot's cursor `m` runs 0..L-1: a non-flush step (m < L-1, on average
/// (L-2)/2) reads the state and `m` records and appends one; the flush step (m = L-1) reads the
/// state and L-1 records and writes the state. Both read the inputs and write the output.
pub fn decode_phase_bytes(d: &HeadDims, variant: Variant, act: DType, batch: usize, l: usize) -> (f64, f64) {
    let state = (d.state_elems() * 4) as f64;
    let io = ((2 * d.h * d.k + 2 * d.hv * d.v + 2 * d.hv) * act.size()) as f64;
    let e = decode_record_bytes(d, variant) as f64;
    let (b, lf) = (batch as f64, l as f64);
    let nonflush = b * (state + (lf - 2.0).max(0.0) / 2.0 * e + e + io);
    let flush = b * (2.0 * state + (lf - 1.0) * e + io);
    (nonflush, flush)
}

/// Modelled bytes of one decode step and layer, `(recurrent, buffered)`: recurrent reads and
/// writes the state; buffered is D's per-cycle average `((L-1)·non-flush + flush) / L`.
pub fn decode_step_bytes(d: &HeadDims, variant: Variant, act: DType, batch: usize, l: usize) -> (f64, f64) {
    let state = (d.state_elems() * 4) as f64;
    let io = ((2 * d.h * d.k + 2 * d.hv * d.v + 2 * d.hv) * act.size()) as f64;
    let (nonflush, flush) = decode_phase_bytes(d, variant, act, batch, l);
    let lf = l as f64;
    let recurrent = batch as f64 * (2.0 * state + io);
    (recurrent, ((lf - 1.0) * nonflush + flush) / lf)
}

/// A model's linear-attention layer as one GPU sees it (after tensor parallelism).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelShape {
    pub name: &'static str,
    pub dims: HeadDims,
    /// Linear-attention layers (what F folds in one launch).
    pub layers: usize,
    pub variant: Variant,
}

const fn dims(h: usize, hv: usize, k: usize, v: usize) -> HeadDims {
    HeadDims { h, hv, k, v }
}

/// The shapes of the performance targets.
pub const MODEL_SHAPES: [ModelShape; 4] = [
    ModelShape {
        name: "Qwen3-Next",
        dims: dims(16, 32, 128, 128),
        layers: 36,
        variant: Variant::Gdn,
    },
    ModelShape {
        name: "Qwen3.5-122B",
        dims: dims(16, 64, 128, 128),
        layers: 36,
        variant: Variant::Gdn,
    },
    ModelShape {
        name: "Qwen3.5-397B-TP4",
        dims: dims(4, 16, 128, 128),
        layers: 45,
        variant: Variant::Gdn,
    },
    ModelShape {
        name: "Kimi-K3-TP8",
        dims: dims(12, 12, 128, 128),
        layers: 69,
        variant: Variant::Kda,
    },
];

/// Batches and windows of the benchmark grid.
pub const BATCHES: [usize; 7] = [1, 8, 32, 64, 128, 256, 512];
pub const WINDOWS: [usize; 4] = [2, 4, 6, 8];

/// One kernel's floor at one point of the grid.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KernelFloor {
    /// `R-decode`, `R-window`, `V`, `F`, `P`, `VF`, `D-nonflush`, `D-flush`, `D-cycle`, `copy`,
    /// and the whole speculative step over every layer: `step-R` (R-window per layer + copy),
    /// `step-V+F` (V per layer + F), `step-VF` (VF per layer), `step-VB-L<l>` (VB per layer and
    /// F's flush amortised over its cycle, cache length `l`), and one layer's `VB-L<l>` (its
    /// average history read, no flush).
    pub kernel: &'static str,
    /// What one launch (F: all layers; the others: one layer) must move at least, in bytes.
    pub bytes: f64,
}

/// The floors of every kernel for `shape` at batch `b` and window `t` (all `t` tokens accepted
/// for F, P and VB's steps; cache length `L = t` for D), activations in `act`.
pub fn kernel_floors(shape: &ModelShape, act: DType, b: usize, t: usize) -> Vec<KernelFloor> {
    let d = &shape.dims;
    let bf = b as f64;
    let state = (d.state_elems() * 4) as f64;
    let sb = step_bytes(d, act, b, t, b * t);
    let e = ring_record_bytes(d, act) as f64;
    let (recurrent_decode, d_cycle) = decode_step_bytes(d, shape.variant, act, b, t);
    let (nonflush, flush) = decode_phase_bytes(d, shape.variant, act, b, t);
    let l = t as f64;
    let nl = shape.layers as f64;
    vec![
        KernelFloor {
            kernel: "R-decode",
            bytes: recurrent_decode,
        },
        KernelFloor {
            kernel: "R-window",
            bytes: sb.recurrent_snapshots as f64,
        },
        KernelFloor {
            kernel: "V",
            bytes: sb.verify as f64,
        },
        KernelFloor {
            kernel: "F",
            bytes: shape.layers as f64 * sb.fold as f64,
        },
        KernelFloor {
            kernel: "P",
            bytes: bf * (2.0 * state + l * e),
        },
        KernelFloor {
            kernel: "VF",
            bytes: sb.verify_fold as f64,
        },
        KernelFloor {
            kernel: "D-nonflush",
            bytes: nonflush,
        },
        KernelFloor {
            kernel: "D-flush",
            bytes: flush,
        },
        KernelFloor {
            kernel: "D-cycle",
            bytes: d_cycle,
        },
        // The recurrent commit: each request's accepted snapshot copied into its checkpoint in
        // every layer (read + write).
        KernelFloor {
            kernel: "copy",
            bytes: shape.layers as f64 * bf * 2.0 * state,
        },
        KernelFloor {
            kernel: "step-R",
            bytes: nl * sb.recurrent_snapshots as f64 + nl * bf * 2.0 * state,
        },
        KernelFloor {
            kernel: "step-V+F",
            bytes: nl * sb.verify as f64 + nl * sb.fold as f64,
        },
        KernelFloor {
            kernel: "step-VF",
            bytes: nl * sb.verify_fold as f64,
        },
    ]
    .into_iter()
    .chain(
        BUFFERED_CACHE_LENS
            .iter()
            .filter(|&&(cl, ..)| cl >= 2 * t)
            .flat_map(|&(cl, layer, step)| {
                let (verify, flush) = buffered_step_bytes(d, shape.variant, act, b, t, cl, t);
                [
                    KernelFloor {
                        kernel: layer,
                        bytes: verify,
                    },
                    KernelFloor {
                        kernel: step,
                        bytes: nl * (verify + flush),
                    },
                ]
            }),
    )
    .collect()
}

/// How many times fewer bytes a step row moves than the recurrent step (`step-R`), for the
/// `step-*` rows of [`kernel_floors`]; `None` for per-kernel rows.
pub fn step_ratio(floors: &[KernelFloor], row: &KernelFloor) -> Option<f64> {
    let base = floors.iter().find(|f| f.kernel == "step-R")?.bytes;
    row.kernel.starts_with("step-").then(|| base / row.bytes)
}

/// The floor as a time: `bytes / bandwidth`, bandwidth in bytes per second, in microseconds.
pub fn floor_us(bytes: f64, bandwidth: f64) -> f64 {
    bytes / bandwidth * 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    fn qwen3_next() -> ModelShape {
        MODEL_SHAPES[0]
    }

    // Worked by hand for Qwen3-Next (H=16, HV=32, K=V=128), bf16, B=1, T=4:
    // state = 32*128*128*4 = 2_097_152; E = 32*128*2 + 16*128*2 + 32*8 = 12_544;
    // inputs/token = (2*16*128 + 32*128 + 2*32)*2 = 16_512; outputs/token = 32*128*2 = 8_192.
    #[test]
    fn floors_match_the_spec_formulas_worked_by_hand() {
        let f = kernel_floors(&qwen3_next(), DType::BF16, 1, 4);
        let get = |k: &str| f.iter().find(|x| x.kernel == k).map(|x| x.bytes).unwrap();
        // V: state + T*E + T*(inputs + outputs) = 2_097_152 + 50_176 + 66_048 + 32_768.
        assert_eq!(get("V"), 2_246_144.0);
        // Recurrent verify with T snapshots: (1+T)*state + inputs + outputs.
        assert_eq!(get("R-window"), 10_485_760.0 + 98_816.0);
        // F over 36 layers: 36 * (2*state + T*E) = 36 * 4_244_480.
        assert_eq!(get("F"), 36.0 * 4_244_480.0);
        // P, one layer: 2*state + T*E.
        assert_eq!(get("P"), 4_244_480.0);
        // R decode: 2*state + one token's inputs and output.
        assert_eq!(get("R-decode"), 4_194_304.0 + 16_512.0 + 8_192.0);
        // The recurrent commit over 36 layers: read and write one state each.
        assert_eq!(get("copy"), 36.0 * 4_194_304.0);
        // VF, one layer: 2*state + T*E pending + T*E window + inputs + outputs.
        assert_eq!(get("VF"), 4_194_304.0 + 2.0 * 50_176.0 + 66_048.0 + 32_768.0);
        assert_eq!(get("step-VF"), 36.0 * get("VF"));
        assert_eq!(get("step-V+F"), 36.0 * get("V") + get("F"));
        assert_eq!(get("step-R"), 36.0 * get("R-window") + get("copy"));
        // design §8 anchor: verify moves about 0.22x the bytes of a T=4 snapshot verify.
        let ratio = get("V") / get("R-window");
        assert!((0.20..0.23).contains(&ratio), "{ratio}");
    }

    /// The numbers: Qwen3.5-122B, B = 128, T = 4, bf16: the recurrent step moves about
    /// 136 GB, V + F about 59.5 GB (2.29x fewer), VF about 40.2 GB (3.4x fewer).
    #[test]
    fn the_deferred_fold_step_moves_about_a_third_of_the_recurrent_step() {
        let f = kernel_floors(&MODEL_SHAPES[1], DType::BF16, 128, 4);
        let get = |k: &str| f.iter().find(|x| x.kernel == k).unwrap();
        let gb = |k: &str| get(k).bytes / 1e9;
        assert!((gb("step-R") - 136.3).abs() < 0.5, "{}", gb("step-R"));
        assert!((gb("step-V+F") - 59.5).abs() < 0.5, "{}", gb("step-V+F"));
        // (40.2 here: this floor also counts reading the pending records, T·E per request.)
        assert!((gb("step-VF") - 40.2).abs() < 0.5, "{}", gb("step-VF"));
        let vf = step_ratio(&f, get("step-VF")).unwrap();
        assert!((3.3..3.5).contains(&vf), "{vf}");
        let vpf = step_ratio(&f, get("step-V+F")).unwrap();
        assert!((2.2..2.4).contains(&vpf), "{vpf}");
        assert!(step_ratio(&f, get("V")).is_none());
    }

    /// The buffered step at Qwen3.5-122B, B = 128, T = 4, every token accepted: L = 16 flushes
    /// every 4 steps (history 0, 4, 8, 12 records: 6 read per verify on average), L = 32 every 8.
    #[test]
    fn the_buffered_step_reads_the_state_once_and_writes_it_once_a_cycle() {
        let s = MODEL_SHAPES[1];
        let d = s.dims;
        let (state, e) = ((d.state_elems() * 4) as f64, ring_record_bytes(&d, DType::BF16) as f64);
        // A history record read: k (bf16), g (f32) and u (f32); a window record also writes u.
        let (eh, u) = ((16 * 128 * 2 + 64 * 4 + 64 * 128 * 4) as f64, (64 * 128 * 4) as f64);
        let io = (4 * (2 * 16 * 128 + 2 * 64 * 128 + 2 * 64) * 2) as f64;
        let (v16, f16) = buffered_step_bytes(&d, s.variant, DType::BF16, 1, 4, 16, 4);
        assert_eq!(v16, state + 6.0 * eh + 4.0 * (e + u) + io);
        assert_eq!(f16, (2.0 * state + 16.0 * e) / 4.0);
        let (v32, f32_) = buffered_step_bytes(&d, s.variant, DType::BF16, 1, 4, 32, 4);
        assert_eq!(v32, state + 14.0 * eh + 4.0 * (e + u) + io);
        assert_eq!(f32_, (2.0 * state + 32.0 * e) / 8.0);
        // Nothing accepted: no history, no flush.
        assert_eq!(
            buffered_step_bytes(&d, s.variant, DType::BF16, 1, 4, 16, 0),
            (state + 4.0 * (e + u) + io, 0.0)
        );
        let f = kernel_floors(&s, DType::BF16, 128, 4);
        let get = |k: &str| f.iter().find(|x| x.kernel == k).unwrap();
        let (x16, x32) = (
            step_ratio(&f, get("step-VB-L16")).unwrap(),
            step_ratio(&f, get("step-VB-L32")).unwrap(),
        );
        assert!((4.1..4.4).contains(&x16) && (4.5..4.9).contains(&x32), "{x16} {x32}");
        let t6 = kernel_floors(&s, DType::BF16, 128, 6);
        assert!(
            t6.iter().all(|x| x.kernel != "step-VB-L8"),
            "L = 8 < 2 T = 12 has no row"
        );
        assert!(t6.iter().any(|x| x.kernel == "step-VB-L16"));
        assert_eq!(get("VB-L16").bytes, 128.0 * v16);
    }

    #[test]
    fn floors_scale_with_batch_and_the_decode_cycle_averages_its_phases() {
        let s = MODEL_SHAPES[3];
        let one = kernel_floors(&s, DType::BF16, 1, 8);
        let many = kernel_floors(&s, DType::BF16, 64, 8);
        for (a, b) in one.iter().zip(&many) {
            assert_eq!(a.kernel, b.kernel);
            assert!(
                (b.bytes / a.bytes - 64.0).abs() < 1e-9,
                "{} does not scale with B",
                a.kernel
            );
        }
        let get = |k: &str| many.iter().find(|x| x.kernel == k).map(|x| x.bytes).unwrap();
        assert!(((7.0 * get("D-nonflush") + get("D-flush")) / 8.0 / get("D-cycle") - 1.0).abs() < 1e-12);
        // Over a cycle of L steps the cursor visits m = 0..L-1: (L-1)/2 records read per step on
        // average, L-1 records and one state written per cycle (Kimi-K3-TP8, KDA, L = 8).
        let d = s.dims;
        let (state, rec) = (
            (d.state_elems() * 4) as f64,
            ((12 * 128 + 12 * 128 + 12 * 128) * 4) as f64,
        );
        let io = ((2 * 12 * 128 + 2 * 12 * 128 + 2 * 12) * 2) as f64;
        let per_step = state + 3.5 * rec + 7.0 / 8.0 * rec + state / 8.0 + io;
        assert!((get("D-cycle") / (64.0 * per_step) - 1.0).abs() < 1e-12, "D-cycle");
        assert!(get("D-nonflush") < get("R-decode"), "non-flush D must move less than R");
        assert!((floor_us(4.3e12, 4.3e12) - 1e6).abs() < 1e-6);
    }
}
