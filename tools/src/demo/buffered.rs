//! `replayssm demo --mode buffered`: the buffered speculative verify (kernel VB: the accepted
//! history stays in the ring, the checkpoint is written only at a flush) against the recurrent
//! baseline with per-token snapshots, on device memory and the backend's stream.

use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{baseline_step, bits_equal, modelled_shapes, step_spec, step_window, verdict, Result, BF16_OUT_TOL};
use crate::floor::{buffered_step_bytes, step_bytes};
use crate::outln;
use crate::staged::DeviceTokens;
use replayssm::backend::Backend;
use replayssm::config::{resolve, EngineFlags};
use replayssm::dtype::{ActBuffer, DType};
use replayssm::memory::{DeviceAct, DeviceVec, Stream};
use replayssm::numerics::compare;
use replayssm::pool::CheckpointPool;
use replayssm::problem::{HeadDims, Variant};
use replayssm::reference;
use replayssm::{BufferedFold, BufferedRing};

/// Runs `steps` speculative steps with cache length `l` (2 T..=64); see the module comment.
pub fn run_buffered(backend: Backend, seed: u64, steps: usize, l: usize) -> Result<bool> {
    outln!("replayssm demo (buffered speculative verify) on the {backend} backend")?;
    let dims = HeadDims {
        h: 1,
        hv: 2,
        k: 64,
        v: 64,
    };
    let (layers, batch, t, dtype) = (3usize, 4usize, 4usize, DType::BF16);
    let num_slots = batch + 2;
    outln!(
        "    {layers} GDN layers, B={batch} requests x {steps} steps, T={t} draft tokens (incl. bonus), cache length L={l}, H={} HV={} K={} V={}, {dtype}, random accept lengths 0..=T",
        dims.h,
        dims.hv,
        dims.k,
        dims.v
    )?;
    // The gates refuse what VB cannot serve (L < 2 T, L past the ring's capacity), naming the rule.
    let cfg = resolve(&EngineFlags {
        linear_replayssm_spec_buffered: true,
        linear_replayssm_cache_len: Some(l as i64),
        ..EngineFlags::spec_ring(Variant::Gdn)
    })
    .map_err(replayssm::error::Error::from)?;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let slots: Vec<i32> = vec![4, 0, 5, 2];
    let mut host_pool = CheckpointPool::new(&cfg, dims, layers, num_slots)?;
    for x in host_pool.state_mut() {
        *x = rng.gen_range(-0.5f32..0.5);
    }
    let mut pool_base = host_pool.state().to_vec();
    let stream = Stream::new(backend)?;
    let mut dpool = host_pool.to_device(&stream)?;
    let mut bring = BufferedRing::for_pool(&dpool, t, dtype, true)?;
    let dslots = DeviceVec::from_host(&stream, &slots)?;
    let mut flush_lens = DeviceVec::<i32>::zeros(backend, batch)?;
    let per_slot = dims.state_elems();
    let layer_len = num_slots * per_slot;
    let cols = dims.hv * dims.v;
    let spec = step_spec(dims, dtype, t, batch);
    let (mut t_vb, mut t_base) = (Duration::ZERO, Duration::ZERO);
    let (mut out_ok, mut out_max, mut flushed_same) = (true, 0f64, true);
    let (mut flushes, mut accepted_total) = (0usize, 0usize);
    for step in 0..steps {
        let accept: Vec<i32> = (0..batch).map(|_| rng.gen_range(0..=t as i32)).collect();
        accepted_total += accept.iter().sum::<i32>() as usize;
        for layer in 0..layers {
            let w = step_window(&spec, seed, step * layers + layer, &slots);
            let n = w.num_tokens();
            let layer_pool = &mut pool_base[layer * layer_len..(layer + 1) * layer_len];
            // VB's outputs against the f64 reference from the baseline's committed state.
            let f64ref = reference::recurrent::<f64>(&w.inputs(), layer_pool);
            let t0 = Instant::now();
            let tokens = DeviceTokens::upload(&stream, &w.inputs())?;
            let mut od = DeviceAct::from_host(&stream, &ActBuffer::nan(dtype, n * cols))?;
            stream.verify_buffered(
                &tokens.inputs(),
                &dpool,
                layer,
                &mut od.view_mut(0, n, cols, cols),
                &mut bring,
            )?;
            let got = od.to_host(&stream)?.to_f32();
            t_vb += t0.elapsed();
            let c = compare(&got, &f64ref.o, BF16_OUT_TOL);
            out_ok &= c.passed();
            out_max = out_max.max(c.max_abs_err);
            // Baseline: recurrent verify writing T snapshots; the commit copies the accepted one.
            let t0 = Instant::now();
            baseline_step(backend, &w, layer_pool, &accept, t)?;
            t_base += t0.elapsed();
        }
        // Once per step: the histories grow by the accepted records; a row whose next window
        // would not fit flushes (kernel F folds its history into every layer's checkpoint).
        let t0 = Instant::now();
        let da = DeviceVec::from_host(&stream, &accept)?;
        stream.buffered_fold(
            &mut dpool,
            &mut bring,
            dslots.as_slice(),
            BufferedFold::Commit {
                accept_lens: da.as_slice(),
            },
            flush_lens.as_mut_slice(),
        )?;
        stream.check_errors()?;
        t_vb += t0.elapsed();
        let lens = flush_lens.to_vec(&stream)?;
        let flushed: Vec<usize> = slots
            .iter()
            .zip(&lens)
            .filter(|(_, &n)| n > 0)
            .map(|(&s, _)| s as usize)
            .collect();
        if !flushed.is_empty() {
            flushes += flushed.len();
            let host = dpool.to_host(&stream)?;
            flushed_same &= same_slots(host.state(), &pool_base, &flushed, layers, layer_len, per_slot);
        }
    }
    // The run ends: every request finishes, so its history is folded (the flush).
    let t0 = Instant::now();
    stream.buffered_fold(
        &mut dpool,
        &mut bring,
        dslots.as_slice(),
        BufferedFold::Flush,
        flush_lens.as_mut_slice(),
    )?;
    stream.check_errors()?;
    t_vb += t0.elapsed();
    let host = dpool.to_host(&stream)?;
    let all: Vec<usize> = (0..num_slots).collect();
    let final_same = same_slots(host.state(), &pool_base, &all, layers, layer_len, per_slot);
    outln!(
        "    VB outputs vs f64 from the baseline's checkpoints: largest |difference| {out_max:.3e} (tol {:.0e}+{:.0e}|r|): {}",
        BF16_OUT_TOL.atol,
        BF16_OUT_TOL.rtol,
        verdict(out_ok)
    )?;
    let same = |ok: bool| if ok { "BIT-IDENTICAL" } else { "DIFFERENT" };
    outln!(
        "    flushed checkpoints vs the baseline at each of the {flushes} flushes during the run ({accepted_total} accepted tokens): {}: {}",
        same(flushed_same),
        verdict(flushed_same)
    )?;
    outln!(
        "    every checkpoint after the final flush vs the baseline: {}: {}",
        same(final_same),
        verdict(final_same)
    )?;
    outln!(
        "    wall time on this backend: buffered (VB + commit) {:.2} s, baseline {:.2} s{}",
        t_vb.as_secs_f64(),
        t_base.as_secs_f64(),
        if backend == Backend::Cuda {
            " (including host<->device copies: not a kernel timing)"
        } else {
            " (emulated: not a performance figure)"
        }
    )?;
    let a = (accepted_total as f64 / (steps * batch).max(1) as f64).round() as usize;
    outln!("    modelled bytes per step and layer at this run's mean accept length a={a} (design §8 floors):")?;
    for (name, d, b) in modelled_shapes(dims, batch) {
        let base = step_bytes(&d, dtype, b, t, b * a).recurrent_snapshots as f64;
        let (verify, flush) = buffered_step_bytes(&d, Variant::Gdn, dtype, b, t, l, a);
        outln!(
            "      {name} (B={b}, T={t}, L={l}): buffered VB {verify:.0} B + amortised flush {flush:.0} B; recurrent with snapshots {base:.0} B ({:.2}x)",
            base / (verify + flush)
        )?;
    }
    let ok = out_ok && flushed_same && final_same;
    outln!("result: backend={backend} {}", if ok { "PASS" } else { "FAIL" })?;
    Ok(ok)
}

/// Every layer of each of `slots`: the buffered world's checkpoint against the baseline's, bit
/// for bit.
fn same_slots(got: &[f32], base: &[f32], slots: &[usize], layers: usize, layer_len: usize, per_slot: usize) -> bool {
    (0..layers).all(|l| {
        slots.iter().all(|&s| {
            let at = l * layer_len + s * per_slot;
            bits_equal(&got[at..at + per_slot], &base[at..at + per_slot])
        })
    })
}
