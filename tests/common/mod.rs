//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod child;
pub mod golden;
pub mod refusals;
pub mod spec_chain;

use replayssm::backend::Backend;
use replayssm::numerics::{compare, Comparison, Tolerance};
use replayssm::reference;
use replayssm::{ActBuffer, DType, HeadDims, RecurrentOutputs, Variant};
use replayssm_tools::workload::{RecurrentData, WorkloadSpec};

#[allow(unused_imports)]
pub use replayssm_tools::testing::{gpu_available, say};

/// Per-dtype tolerances of kernel-R outputs against f64. Outputs are stored in the act dtype,
/// so its rounding (bf16: 2^-8 relative) dominates; the state is always f32.
/// (f16: 2^-11 relative; f32: accumulated rounding over K-long dot products and T tokens.)
pub fn output_tolerance(dtype: DType) -> Tolerance {
    match dtype {
        DType::F32 => Tolerance { atol: 1e-6, rtol: 1e-5 },
        DType::F16 => Tolerance { atol: 1e-5, rtol: 1e-3 },
        DType::BF16 => Tolerance { atol: 1e-4, rtol: 8e-3 },
    }
}
/// The per-run part of every fresh test seed: `REPLAYSSM_TEST_SEED` when set (to reproduce a
/// failure: a failing case prints its seed, `base + run_seed() + i`), else the process id, so
/// each run draws new inputs.
pub fn run_seed() -> u64 {
    match std::env::var("REPLAYSSM_TEST_SEED") {
        Ok(s) => s
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("REPLAYSSM_TEST_SEED = {s:?}, must be an integer in 0..=2^64-1")),
        Err(_) => std::process::id() as u64,
    }
}

/// The largest error a reordered f32 computation (the chunked verify, its tree form) may show
/// where the naive f32 recurrence shows `naive_err`: twice that, plus 4 f32 ulps of the largest
/// reference output. Summation order alone moves an f32 result by an ulp or so, so where the
/// naive error is itself at that level (f32 outputs), twice it alone fails by chance (CI, seed
/// 21748: 4.4e-8 against 2 x 1.7e-8). Measured over 720 f32 verify cases (T = 4, 8, 16): at most
/// 0.72 ulp above twice the naive error. A precision loss in the kernel (an operand kept in
/// bf16, a dropped term) still fails it by orders of magnitude.
pub fn reordered_bound(naive_err: f64, reference: &[f64]) -> f64 {
    let scale = reference.iter().fold(0.0f64, |m, &x| m.max(x.abs()));
    2.0 * naive_err + 4.0 * f32::EPSILON as f64 * scale
}

pub const STATE_TOLERANCE: Tolerance = Tolerance { atol: 1e-6, rtol: 1e-5 };

/// K = 96: a lane holds three channels, the one compiled head dim with no vector width (the head
/// size of SGLang's batched-fold and ring-fused tests).
pub const K96: HeadDims = HeadDims {
    h: 1,
    hv: 2,
    k: 96,
    v: 32,
};

/// The safe gate (Kimi's KDA, SGLang's `lower_bound`) at the bound Kimi's models use.
pub fn safe_gate() -> replayssm::GateForm {
    replayssm::GateForm::Bounded(replayssm::LowerBound::new(-5.0).expect("a negative bound"))
}

pub fn spec(variant: Variant, dims: HeadDims, dtype: DType, seqlens: &[usize]) -> WorkloadSpec {
    WorkloadSpec {
        variant,
        dims,
        dtype,
        seqlens: seqlens.to_vec(),
        null_requests: vec![],
        spare_slots: 2,
        raw_gate: true,
        gate_form: replayssm::GateForm::Softplus,
        qk_l2norm: true,
    }
}

/// Everything one backend run of kernel R produced.
pub struct Run {
    pub o: ActBuffer,
    pub state: Vec<f32>,
    pub snapshots: Vec<f32>,
}

/// Runs kernel R with poisoned outputs (NaN) and snapshots, writing the state back.
pub fn run(backend: Backend, data: &RecurrentData, snapshots: bool) -> replayssm::Result<Run> {
    run_with_records(backend, data, snapshots, DType::F32)
}

/// [`run`] with kernel R rounding its updates as a decode ring of `records` holds them.
pub fn run_with_records(
    backend: Backend,
    data: &RecurrentData,
    snapshots: bool,
    records: DType,
) -> replayssm::Result<Run> {
    let d = data.dims;
    let n = data.num_tokens();
    let batch = data.cu_seqlens.len() - 1;
    let t = data
        .cu_seqlens
        .windows(2)
        .map(|w| (w[1] - w[0]) as usize)
        .max()
        .unwrap_or(1)
        .max(1);
    let mut o = ActBuffer::nan(data.dtype, n * d.hv * d.v);
    let mut state = data.state.clone();
    let mut snaps = vec![f32::NAN; if snapshots { batch * t * d.state_elems() } else { 0 }];
    let mut out = RecurrentOutputs {
        o: o.dense_mut(n, d.hv * d.v),
        state: &mut state[..],
        write_state: true,
        snapshots: snapshots.then_some(&mut snaps[..]),
    };
    replayssm_tools::staged::recurrent_with_records(backend, &data.inputs(), &mut out, records)?;
    Ok(Run {
        o,
        state,
        snapshots: snaps,
    })
}

/// Errors of one backend run against the f64 reference.
pub struct Judgement {
    pub o: Comparison,
    pub state: Comparison,
    pub snapshots: Comparison,
}

/// Compares a run with the f64 reference: outputs, the whole state pool (untouched slots
/// must keep their values) and the snapshots of live requests.
pub fn judge(data: &RecurrentData, run: &Run, out_tol: Tolerance) -> Judgement {
    let d = data.dims;
    let per_slot = d.state_elems();
    let f64ref = reference::recurrent::<f64>(&data.inputs(), &data.state);
    let mut expected_pool: Vec<f64> = data.state.iter().map(|&x| x as f64).collect();
    let batch = data.cu_seqlens.len() - 1;
    let t = data
        .cu_seqlens
        .windows(2)
        .map(|w| (w[1] - w[0]) as usize)
        .max()
        .unwrap_or(1)
        .max(1);
    let (mut snap_got, mut snap_ref) = (vec![], vec![]);
    for r in 0..batch {
        if let Some(s) = &f64ref.final_state[r] {
            let slot = data.slots[r] as usize;
            expected_pool[slot * per_slot..(slot + 1) * per_slot].copy_from_slice(s);
        }
        if let (Some(s), false) = (&f64ref.snapshots[r], run.snapshots.is_empty()) {
            let base = r * t * per_slot;
            snap_got.extend_from_slice(&run.snapshots[base..base + s.len()]);
            snap_ref.extend_from_slice(s);
        }
    }
    Judgement {
        o: compare(&run.o.to_f32(), &f64ref.o, out_tol),
        state: compare(&run.state, &expected_pool, STATE_TOLERANCE),
        snapshots: compare(&snap_got, &snap_ref, STATE_TOLERANCE),
    }
}

/// The first `lens[r]` tokens of each request of `data` (same bits), as a new workload.
pub fn prefix(data: &RecurrentData, lens: &[usize]) -> RecurrentData {
    let mut toks = vec![];
    let mut cu = vec![0i32];
    for (r, &n) in lens.iter().enumerate() {
        let bos = data.cu_seqlens[r] as usize;
        assert!(n <= (data.cu_seqlens[r + 1] as usize - bos));
        toks.extend((bos..bos + n).map(Some));
        cu.push(cu.last().unwrap() + n as i32);
    }
    data.gather(&toks, cu)
}

/// Bit equality of two f32 slices, with the first difference for the message.
pub fn bits_equal(a: &[f32], b: &[f32]) -> Result<(), String> {
    if a.len() != b.len() {
        return Err(format!("lengths {} vs {}", a.len(), b.len()));
    }
    match a.iter().zip(b).position(|(x, y)| x.to_bits() != y.to_bits()) {
        None => Ok(()),
        Some(i) => Err(format!("element {i}: {:e} vs {:e}", a[i], b[i])),
    }
}

/// The buffered step's commit on device memory: `accept` uploaded, then
/// `Stream::buffered_fold` with `BufferedFold::Commit` (the flush lengths into `flush_lens`).
#[allow(dead_code)] // not every test binary commits a buffered ring
pub fn buffered_commit(
    stream: &replayssm::memory::Stream,
    pool: &mut replayssm::CheckpointPool<replayssm::Device>,
    bring: &mut replayssm::BufferedRing<replayssm::Device>,
    slots: replayssm::memory::DeviceSlice<'_, i32>,
    accept: &[i32],
    flush_lens: replayssm::memory::DeviceSliceMut<'_, i32>,
) -> replayssm::error::Result<()> {
    let accept = replayssm::memory::DeviceVec::from_host(stream, accept)?;
    let fold = replayssm::BufferedFold::Commit {
        accept_lens: accept.as_slice(),
    };
    stream.buffered_fold(pool, bring, slots, fold, flush_lens)
}
