//! The main job (`replayssm demo`): kernel R against the f64 reference, then a simulated
//! speculative-decoding run, ReplaySSM (V then F) and its deferred fold (VF, the pending records
//! folded by the next step's VF) side by side with the recurrent baseline that writes one state
//! snapshot per draft token, on the same backend; `--mode decode` (kernel D) and `--mode buffered`
//! (kernel VB, [`buffered`]) against their baselines.

mod buffered;
pub use buffered::run_buffered;

use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::floor::{decode_step_bytes, ring_record_bytes, step_bytes};
use crate::workload::{RecurrentData, WorkloadSpec};
use replayssm::backend::Backend;
use replayssm::config::{resolve, EngineFlags};
use replayssm::dtype::{ActBuffer, DType};
use replayssm::kernels::recurrent::RecurrentOutputs;
use replayssm::numerics::{compare, Tolerance};
use replayssm::pool::CheckpointPool;
use replayssm::problem::{HeadDims, Variant};
use replayssm::reference;
use replayssm::ring::{RingShape, SpecRing};
use replayssm::DeferredRing;

use crate::outln;
use crate::output::StdoutError;
use crate::staged::{fold, recurrent, verify, verify_fold};

/// Why the demo stopped before its verdict.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// A kernel, the pool or a ring refused or failed.
    #[error(transparent)]
    Run(#[from] replayssm::error::Error),
    /// stdout could not be written: the CLI's clean exit 1.
    #[error(transparent)]
    Stdout(#[from] StdoutError),
}

type Result<T> = std::result::Result<T, DemoError>;

/// Outputs are bf16: its rounding (2^-8 relative) dominates every output comparison here.
const BF16_OUT_TOL: Tolerance = Tolerance { atol: 1e-4, rtol: 8e-3 };

fn bits_equal(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "PASS"
    } else {
        "FAIL"
    }
}

/// The windows of the speculative demos: GDN, raw softplus gate, L2-normalised q and k, `batch`
/// live requests of `t` tokens each, 2 spare slots.
fn step_spec(dims: HeadDims, dtype: DType, t: usize, batch: usize) -> WorkloadSpec {
    WorkloadSpec {
        variant: Variant::Gdn,
        dims,
        dtype,
        seqlens: vec![t; batch],
        null_requests: vec![],
        spare_slots: 2,
        raw_gate: true,
        gate_form: replayssm::GateForm::Softplus,
        qk_l2norm: true,
    }
}

/// The recurrent baseline's step on one layer (`layer_pool`, `[NS, HV, V, K]`): kernel R over
/// the window `w` writing T snapshots, then the commit copying each row's accepted snapshot
/// (`accept[b]` of `t`, 0: none) onto its slot's checkpoint. Returns R's outputs.
/// One layer's window of one step (`index` = step · layers + layer): fresh inputs drawn from the
/// run's seed, on the run's slots; every mode draws the same ones.
fn step_window(spec: &WorkloadSpec, seed: u64, index: usize, slots: &[i32]) -> RecurrentData {
    let mut w = RecurrentData::random(spec, seed.wrapping_mul(7919).wrapping_add(index as u64));
    w.slots = slots.to_vec();
    w
}

fn baseline_step(
    backend: Backend,
    w: &RecurrentData,
    layer_pool: &mut [f32],
    accept: &[i32],
    t: usize,
) -> Result<ActBuffer> {
    let (n, d) = (w.num_tokens(), w.dims);
    let per_slot = d.state_elems();
    let mut o = ActBuffer::nan(w.dtype, n * d.hv * d.v);
    let mut snaps = vec![f32::NAN; w.slots.len() * t * per_slot];
    recurrent(
        backend,
        &w.inputs(),
        &mut RecurrentOutputs {
            o: o.dense_mut(n, d.hv * d.v),
            state: layer_pool,
            write_state: false,
            snapshots: Some(&mut snaps),
        },
    )?;
    for (b, (&slot, &a)) in w.slots.iter().zip(accept).enumerate() {
        if a > 0 && slot >= 0 {
            let at = (b * t + a as usize - 1) * per_slot;
            let dst = slot as usize * per_slot;
            layer_pool[dst..dst + per_slot].copy_from_slice(&snaps[at..at + per_slot]);
        }
    }
    Ok(o)
}

/// The shapes the byte models are printed for: the demo's own and a Qwen3-Next-like layer
/// (H=16, HV=32, K=V=128) at B=64.
fn modelled_shapes(dims: HeadDims, batch: usize) -> [(&'static str, HeadDims, usize); 2] {
    let qwen3_next = HeadDims {
        h: 16,
        hv: 32,
        k: 128,
        v: 128,
    };
    [("this demo", dims, batch), ("Qwen3-Next-like layer", qwen3_next, 64)]
}

fn judge_recurrent(backend: Backend, seed: u64) -> Result<bool> {
    let dims = HeadDims {
        h: 4,
        hv: 8,
        k: 128,
        v: 128,
    };
    let dtype = DType::BF16;
    let spec = WorkloadSpec {
        variant: Variant::Gdn,
        dims,
        dtype,
        seqlens: vec![4; 8],
        null_requests: vec![7],
        spare_slots: 4,
        raw_gate: true,
        gate_form: replayssm::GateForm::Softplus,
        qk_l2norm: true,
    };
    let out_tol = BF16_OUT_TOL;
    let state_tol = Tolerance { atol: 1e-6, rtol: 1e-5 };
    let mut ok = true;
    outln!("[1] kernel R (recurrent baseline) on the {backend} backend vs the f64 reference")?;
    outln!(
        "    B=8 requests x 4 tokens, H={} HV={} K={} V={}, {dtype} activations, f32 checkpoint",
        dims.h,
        dims.hv,
        dims.k,
        dims.v
    )?;
    for (i, variant) in [Variant::Gdn, Variant::Kda].into_iter().enumerate() {
        let data = RecurrentData::random(
            &WorkloadSpec {
                variant,
                ..spec.clone()
            },
            seed + i as u64,
        );
        let n = data.num_tokens();
        let mut o = ActBuffer::nan(dtype, n * dims.hv * dims.v);
        let mut state = data.state.clone();
        recurrent(
            backend,
            &data.inputs(),
            &mut RecurrentOutputs {
                o: o.dense_mut(n, dims.hv * dims.v),
                state: &mut state,
                write_state: true,
                snapshots: None,
            },
        )?;
        let f64ref = reference::recurrent::<f64>(&data.inputs(), &data.state);
        let per_slot = dims.state_elems();
        let mut expected: Vec<f64> = data.state.iter().map(|&x| x as f64).collect();
        for (r, s) in f64ref.final_state.iter().enumerate() {
            if let Some(s) = s {
                let slot = data.slots[r] as usize;
                expected[slot * per_slot..(slot + 1) * per_slot].copy_from_slice(s);
            }
        }
        let oc = compare(&o.to_f32(), &f64ref.o, out_tol);
        let sc = compare(&state, &expected, state_tol);
        ok &= oc.passed() && sc.passed();
        outln!(
            "    {variant}: largest error vs f64: outputs {:.3e} (bf16 rounding; tol {:.0e}+{:.0e}|r|), checkpoint {:.3e} (tol {:.0e}+{:.0e}|r|): {}",
            oc.max_abs_err,
            out_tol.atol,
            out_tol.rtol,
            sc.max_abs_err,
            state_tol.atol,
            state_tol.rtol,
            if oc.passed() && sc.passed() { "pass" } else { "FAIL" }
        )?;
    }
    Ok(ok)
}

/// Runs the demo; `Ok(true)` when every check held.
pub fn run(backend: Backend, seed: u64, steps: usize) -> Result<bool> {
    outln!("replayssm demo on the {backend} backend")?;
    let r_ok = judge_recurrent(backend, seed)?;

    let dims = HeadDims {
        h: 1,
        hv: 2,
        k: 64,
        v: 64,
    };
    let (layers, batch, t) = (3usize, 4usize, 4usize);
    let dtype = DType::BF16;
    let shape = RingShape {
        variant: Variant::Gdn,
        dims,
        dtype,
        layers,
        slots: batch + 2,
        window: t,
    };
    outln!("[2] speculative decoding, {steps} steps: ReplaySSM (verify, then fold-every-commit) and ReplaySSM deferred (VF: fold the previous step's records, then verify) vs the recurrent verify with per-token snapshots")?;
    outln!(
        "    {layers} GDN layers, B={batch} requests, T={t} draft tokens (incl. bonus), H={} HV={} K={} V={}, {dtype}, random accept lengths 0..=T",
        dims.h, dims.hv, dims.k, dims.v
    )?;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let slots: Vec<i32> = vec![4, 0, 5, 2];
    let cfg = resolve(&EngineFlags::spec_ring(Variant::Gdn)).map_err(replayssm::error::Error::from)?;
    let mut pool_rs = CheckpointPool::new(&cfg, dims, layers, shape.slots)?;
    for x in pool_rs.state_mut() {
        *x = rng.gen_range(-0.5f32..0.5);
    }
    let mut pool_base = pool_rs.state().to_vec();
    let mut ring = SpecRing::for_pool(&pool_rs, t, dtype, true)?;
    // The deferred world: same start, same windows and accept lengths, VF + commit per step.
    let cfg_vf = resolve(&EngineFlags {
        linear_replayssm_spec_deferred_fold: true,
        ..EngineFlags::spec_ring(Variant::Gdn)
    })
    .map_err(replayssm::error::Error::from)?;
    let mut pool_vf = CheckpointPool::new(&cfg_vf, dims, layers, shape.slots)?;
    pool_vf.state_mut().copy_from_slice(pool_rs.state());
    let mut dring = DeferredRing::for_pool(&pool_vf, t, dtype, true)?;
    let per_slot = dims.state_elems();
    let (mut max_diff, mut identical, mut accepted_total) = (0f64, true, 0usize);
    let (mut t_rs, mut t_base, mut t_vf) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    let (mut vf_out_max, mut vf_out_ok, mut vf_out_bits) = (0f64, true, true);
    let (mut vf_vs_rs, mut vf_vs_base, mut vf_compared) = (true, true, 0usize);
    let spec = step_spec(dims, dtype, t, batch);
    for step in 0..steps {
        let accept: Vec<i32> = (0..batch).map(|_| rng.gen_range(0..=t as i32)).collect();
        accepted_total += accept.iter().sum::<i32>() as usize;
        for layer in 0..layers {
            let w = step_window(&spec, seed, step * layers + layer, &slots);
            let n = w.num_tokens();
            // ReplaySSM verify: outputs from the checkpoint, raw window into the ring.
            let mut o_rs = ActBuffer::nan(dtype, n * dims.hv * dims.v);
            let t0 = Instant::now();
            verify(
                backend,
                &w.inputs(),
                None,
                &pool_rs,
                layer,
                &mut o_rs.dense_mut(n, dims.hv * dims.v),
                Some(&mut ring),
            )?;
            t_rs += t0.elapsed();
            // Deferred: VF folds this layer's records of the previous step, then verifies the
            // same window from the folded state.
            let mut o_vf = ActBuffer::nan(dtype, n * dims.hv * dims.v);
            let t0 = Instant::now();
            verify_fold(
                backend,
                &w.inputs(),
                &mut pool_vf,
                layer,
                &mut o_vf.dense_mut(n, dims.hv * dims.v),
                &mut dring,
                None,
            )?;
            t_vf += t0.elapsed();
            let (a, b) = (o_vf.to_f32(), o_rs.to_f32());
            let b64: Vec<f64> = b.iter().map(|&x| x as f64).collect();
            let c = compare(&a, &b64, BF16_OUT_TOL);
            vf_out_ok &= c.passed();
            vf_out_max = vf_out_max.max(c.max_abs_err);
            vf_out_bits &= bits_equal(&a, &b);
            // This layer's checkpoints now hold every step before this one: V + F's (F of this
            // step has not run) and the baseline's (not yet written this step) must match.
            let layer_range = shape.pool_offset(layer, 0)..shape.pool_offset(layer + 1, 0);
            let vf_layer = &pool_vf.state()[layer_range.clone()];
            vf_vs_rs &= bits_equal(vf_layer, &pool_rs.state()[layer_range.clone()]);
            vf_vs_base &= bits_equal(vf_layer, &pool_base[layer_range]);
            vf_compared += 1;
            let layer_pool = &mut pool_base[shape.pool_offset(layer, 0)..shape.pool_offset(layer + 1, 0)];
            let t0 = Instant::now();
            let o_base = baseline_step(backend, &w, layer_pool, &accept, t)?;
            t_base += t0.elapsed();
            let a = o_rs.to_f32();
            let b: Vec<f64> = o_base.to_f32().iter().map(|&x| x as f64).collect();
            max_diff = max_diff.max(compare(&a, &b, Tolerance { atol: 0.0, rtol: 0.0 }).max_abs_err);
        }
        let t0 = Instant::now();
        fold(backend, &mut pool_rs, &ring, &slots, &accept, None)?;
        t_rs += t0.elapsed();
        // Deferred: the accepted records stay pending until the next step's VF (or the flush).
        let t0 = Instant::now();
        dring.commit(&slots, &accept)?;
        t_vf += t0.elapsed();
        identical &= bits_equal(pool_rs.state(), &pool_base);
    }
    // The run ends: every request finishes, so its pending records are folded (the flush).
    let t0 = Instant::now();
    crate::staged::defer_flush(backend, &mut pool_vf, &mut dring, &slots)?;
    t_vf += t0.elapsed();
    // Read through the ring, which refuses a slot still pending: every checkpoint must be current.
    let mut refused = (0usize, None);
    for layer in 0..layers {
        for slot in 0..shape.slots {
            let base = &pool_base[shape.pool_offset(layer, slot)..shape.pool_offset(layer, slot) + per_slot];
            let (rs_ok, base_ok) = match dring.checkpoint(&pool_vf, layer, slot) {
                Ok(got) => (bits_equal(got, pool_rs.slot_state(layer, slot)?), bits_equal(got, base)),
                Err(e) => {
                    refused.0 += 1;
                    refused.1.get_or_insert(format!("layer {layer}: {e}"));
                    (false, false)
                }
            };
            vf_vs_rs &= rs_ok;
            vf_vs_base &= base_ok;
        }
    }
    if let (n, Some(first)) = refused {
        outln!("    deferred fold: {n} checkpoints unreadable after the final flush, first: {first}")?;
    }
    outln!(
        "    largest |output difference| ReplaySSM vs baseline: {max_diff:.3e} (bf16 outputs: the chunked form rounds differently)"
    )?;
    outln!(
        "    committed checkpoints after {steps} steps ({accepted_total} accepted tokens, {} layers): {}",
        layers,
        if identical {
            "BIT-IDENTICAL to the baseline"
        } else {
            "DIFFERENT from the baseline"
        }
    )?;
    outln!(
        "    deferred (VF) outputs vs ReplaySSM verify over {vf_compared} layer-steps: largest |difference| {vf_out_max:.3e}{} (tol {:.0e}+{:.0e}|r|): {}",
        if vf_out_bits { ", bit-identical" } else { "" },
        BF16_OUT_TOL.atol,
        BF16_OUT_TOL.rtol,
        verdict(vf_out_ok)
    )?;
    let same = |ok: bool| if ok { "BIT-IDENTICAL" } else { "DIFFERENT" };
    outln!(
        "    deferred (VF) committed checkpoints vs ReplaySSM V+F, at every step and after the final flush: {}: {}",
        same(vf_vs_rs),
        verdict(vf_vs_rs)
    )?;
    outln!(
        "    deferred (VF) committed checkpoints vs the baseline, at every step and after the final flush: {}: {}",
        same(vf_vs_base),
        verdict(vf_vs_base)
    )?;
    outln!(
        "    wall time on this backend: ReplaySSM V+F {:.2} s, deferred VF {:.2} s, baseline {:.2} s{}",
        t_rs.as_secs_f64(),
        t_vf.as_secs_f64(),
        t_base.as_secs_f64(),
        if backend == Backend::Cuda {
            " (including host<->device copies: not a kernel timing)"
        } else {
            " (emulated: not a performance figure)"
        }
    )?;
    let scratch_rs = layers * shape.slots * t * ring_record_bytes(&dims, dtype);
    let scratch_base = layers * batch * t * per_slot * 4;
    // Two windows per slot (pending + new) and the pending table, `[NS, 2 + W]` i32.
    let scratch_vf = 2 * scratch_rs + shape.slots * dring.entry_len() * 4;
    outln!(
        "    speculative scratch: ReplaySSM ring {} B (NL x NS x W x E), deferred ring {} B (NL x NS x 2W x E + NS x (2+W) x 4), baseline snapshots {} B (NL x B x T x HV x V x K x 4)",
        scratch_rs, scratch_vf, scratch_base
    )?;
    outln!("[3] modelled bytes per step and layer (design §8 floors; divide by ~4.3 TB/s on an H200):")?;
    for (name, d, b) in modelled_shapes(dims, batch) {
        let avg_n = (accepted_total as f64 / (steps * batch).max(1) as f64).round() as usize;
        let sb = step_bytes(&d, dtype, b, t, b * avg_n);
        let rs = sb.verify + sb.fold;
        outln!(
            "    {name} (B={b}, T={t}, H={} HV={} K={} V={}): ReplaySSM verify {} + fold {} = {} B; recurrent with snapshots {} B ({:.2}x); verify alone moves {:.2}x the baseline's bytes",
            d.h,
            d.hv,
            d.k,
            d.v,
            sb.verify,
            sb.fold,
            rs,
            sb.recurrent_snapshots,
            sb.recurrent_snapshots as f64 / rs as f64,
            sb.verify as f64 / sb.recurrent_snapshots as f64
        )?;
        outln!(
            "      deferred VF (fold of the previous step's records + verify) {} B: {:.2}x fewer than recurrent with snapshots, {:.2}x fewer than verify + fold (modelled)",
            sb.verify_fold,
            sb.recurrent_snapshots as f64 / sb.verify_fold as f64,
            rs as f64 / sb.verify_fold as f64
        )?;
    }
    let ok = r_ok && identical && vf_out_ok && vf_vs_rs && vf_vs_base;
    outln!("result: backend={backend} {}", if ok { "PASS" } else { "FAIL" })?;
    Ok(ok)
}

/// `replayssm demo --mode decode`: buffered decode (kernel D, cache length `l`) vs the recurrent
/// decode (kernel R) over `steps` tokens per request on the same backend, both against f64.
pub fn run_decode(backend: Backend, seed: u64, steps: usize, l: usize) -> Result<bool> {
    outln!("replayssm demo (buffered decode) on the {backend} backend")?;
    let dims = if backend == Backend::Cuda {
        HeadDims {
            h: 4,
            hv: 8,
            k: 128,
            v: 128,
        }
    } else {
        HeadDims {
            h: 1,
            hv: 2,
            k: 64,
            v: 64,
        }
    };
    let dtype = DType::BF16;
    let batch = 4;
    let spec = WorkloadSpec {
        variant: Variant::Gdn,
        dims,
        dtype,
        seqlens: vec![steps; batch],
        null_requests: vec![],
        spare_slots: 2,
        raw_gate: true,
        gate_form: replayssm::GateForm::Softplus,
        qk_l2norm: true,
    };
    let data = RecurrentData::random(&spec, seed);
    outln!(
        "    GDN, B={batch} requests x {steps} decode steps, cache length L={l}, H={} HV={} K={} V={}, {dtype}",
        dims.h,
        dims.hv,
        dims.k,
        dims.v
    )?;
    let n = data.num_tokens();
    let t0 = Instant::now();
    let mut o_r = ActBuffer::nan(dtype, n * dims.hv * dims.v);
    let mut state_r = data.state.clone();
    recurrent(
        backend,
        &data.inputs(),
        &mut RecurrentOutputs {
            o: o_r.dense_mut(n, dims.hv * dims.v),
            state: &mut state_r,
            write_state: true,
            snapshots: None,
        },
    )?;
    let t_r = t0.elapsed();
    let t0 = Instant::now();
    let d = crate::sequence::decode_sequence(backend, &data, l, None, |_, _, _| {})?;
    let t_d = t0.elapsed();
    let f64ref = reference::recurrent::<f64>(&data.inputs(), &data.state);
    let tol = Tolerance { atol: 1e-4, rtol: 8e-3 };
    let c_d = compare(&d.o.to_f32(), &f64ref.o, tol);
    let c_r = compare(&o_r.to_f32(), &f64ref.o, tol);
    let o_same =
        d.o.to_f32()
            .iter()
            .zip(o_r.to_f32())
            .all(|(a, b)| a.to_bits() == b.to_bits());
    let s_same = d.state.iter().zip(&state_r).all(|(a, b)| a.to_bits() == b.to_bits());
    outln!("    buffered decode vs f64: {c_d}")?;
    outln!("    recurrent decode vs f64: {c_r}")?;
    outln!(
        "    outputs {} and final checkpoints {} to the recurrent decode; {} flushes over {} row-steps",
        if o_same { "BIT-IDENTICAL" } else { "DIFFERENT" },
        if s_same { "BIT-IDENTICAL" } else { "DIFFERENT" },
        d.flushes,
        n
    )?;
    outln!(
        "    wall time: buffered {:.2} s (one launch per step), recurrent {:.2} s (one launch){}",
        t_d.as_secs_f64(),
        t_r.as_secs_f64(),
        if backend == Backend::Cuda {
            " (including host<->device copies: not a kernel timing)"
        } else {
            " (emulated: not a performance figure)"
        }
    )?;
    outln!("    modelled bytes per decode step and layer (divide by ~4.3 TB/s on an H200):")?;
    for (name, dd, b) in modelled_shapes(dims, batch) {
        let (rec, buf) = decode_step_bytes(&dd, Variant::Gdn, dtype, b, l);
        outln!(
            "      {name} (B={b}, L={l}): recurrent {rec:.0} B, buffered {buf:.0} B ({:.2}x the recurrent bytes)",
            buf / rec
        )?;
    }
    let ok = o_same && s_same && c_d.passed();
    outln!("result: backend={backend} {}", if ok { "PASS" } else { "FAIL" })?;
    Ok(ok)
}
