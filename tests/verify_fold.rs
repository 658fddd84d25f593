//! Kernel VF, the deferred fold (fold-then-verify): over long chains of steps the checkpoints
//! under VF are bit-identical to V + F's and to kernel R's, with random windows and accept lengths
//! (0 and W included), null rows, track slots and flushes in random places; VF's outputs are V's
//! (bit for bit against V's DEFAULT, within tolerance of its other implementations). The pending
//! table refuses reads, copies and hand-outs of unflushed slots; garbage pending entries given to
//! the kernel layer are flagged and skipped; the device-memory protocol (the defer kernel) matches
//! the host one.
mod common;

use common::spec_chain::{draw_windows, each_impl, recurrent_commit, rng, run_verify, spec_pool, Commit};
use common::*;
use rand::Rng;
use replayssm::backend::Backend;
use replayssm::config::{resolve, EngineFlags};
use replayssm::ffi;
use replayssm::ring::{RingShape, SpecRing};
use replayssm::spec::{fold, Track};
use replayssm::tuning::{self, Choice, Kernel};
use replayssm::{ActBuffer, CheckpointPool, DType, DeferredRing, Error, HeadDims, Variant};
use replayssm_tools::workload::RecurrentData;

/// Steps per variant of the long chains; `REPLAYSSM_CHAIN_COMMITS` overrides (CI keeps the
/// design §6 minimum of 10 000).
fn chain_steps(default: usize) -> usize {
    std::env::var("REPLAYSSM_CHAIN_COMMITS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// A pool resolved with `--enable-linear-replayssm-spec --linear-replayssm-spec-deferred-fold`.
fn deferred_pool(shape: &RingShape, state: &[f32]) -> CheckpointPool {
    let cfg = resolve(&EngineFlags {
        linear_replayssm_spec_deferred_fold: true,
        ..EngineFlags::spec_ring(shape.variant)
    })
    .unwrap();
    let mut pool = CheckpointPool::new(&cfg, shape.dims, shape.layers, shape.slots).unwrap();
    pool.state_mut().copy_from_slice(state);
    pool
}

fn slot_range(shape: &RingShape, layer: usize, slot: usize) -> std::ops::Range<usize> {
    let at = shape.pool_offset(layer, slot);
    at..at + shape.dims.state_elems()
}

/// VF's outputs against V's: the same bits when V ran DEFAULT (VF's verify is DEFAULT's phase 4
/// on the same state), else within the output tolerance of each other.
fn outputs_agree(vf: &ActBuffer, v: &ActBuffer, bitwise: bool, what: &str) {
    let (a, b) = (vf.to_f32(), v.to_f32());
    if bitwise {
        if let Err(e) = bits_equal(&a, &b) {
            panic!("{what}: VF outputs != V's: {e}");
        }
        return;
    }
    let tol = output_tolerance(vf.dtype());
    for (i, (&x, &y)) in a.iter().zip(&b).enumerate() {
        let ok = x.is_finite() && (x - y).abs() <= 2.0 * (tol.atol as f32 + tol.rtol as f32 * y.abs());
        assert!(ok, "{what}: output {i}: VF {x} vs V {y}");
    }
}

/// One chain: every step draws fresh windows, runs V on every layer then F (the V + F world),
/// R over the accepted tokens (the baseline), and VF on every layer then the commit (the deferred
/// world). At each step, before F, every live slot's checkpoints under VF (which has just folded
/// its previous step) must equal V + F's and R's bit for bit, and so must each track snapshot VF
/// stored; random flushes must make a slot equal right away.
#[allow(clippy::too_many_arguments)]
fn chain_once(
    backend: Backend,
    variant: Variant,
    dims: HeadDims,
    dtype: DType,
    layers: usize,
    batch: usize,
    steps: usize,
    seed: u64,
) {
    let window = 4usize;
    let mut r = rng(seed);
    let live_slots = &[3i32, 0, 4][..batch];
    let track_of = [1i32, 2, 5];
    let num_slots = 7;
    let shape = RingShape {
        variant,
        dims,
        dtype,
        layers,
        slots: num_slots,
        window,
    };
    let start: Vec<f32> = (0..shape.pool_elems()).map(|_| r.gen_range(-0.5f32..0.5)).collect();
    let mut pool_f = spec_pool(&shape, &start);
    let mut pool_r = start.clone();
    let mut pool_vf = deferred_pool(&shape, &start);
    let mut ring = SpecRing::new(shape, true).unwrap();
    let mut dring = DeferredRing::for_pool(&pool_vf, window, dtype, true).unwrap();
    // Per row: the track F stored at the row's last live step, which VF stores when it folds
    // that step (the row's next live step), or -1.
    let mut pending_track: Vec<(i32, i32)> = vec![(-1, -1); batch];
    // VF's outputs are V's bits when both run their default (DEFAULT V's phase 4 on F's state);
    // a staged one is V's within V's tolerance.
    let v_default = [Kernel::V, Kernel::VF]
        .iter()
        .all(|&k| tuning::forced(k).is_none_or(|c| c == Choice::DEFAULT));
    let (mut folded, mut flushes, mut tracks) = (0usize, 0usize, 0usize);
    for step in 0..steps {
        // Null rows now and then (the same in every world).
        let slots: Vec<i32> = live_slots
            .iter()
            .map(|&x| if r.gen_range(0..7) == 0 { -1 } else { x })
            .collect();
        let windows = draw_windows(variant, dims, dtype, layers, window, num_slots, &slots, seed, step);
        // V + F world: the verify.
        let mut outs_v = vec![];
        for (l, w) in windows.iter().enumerate() {
            outs_v.push(run_verify(backend, w, &pool_f, l, Some(&mut ring)).unwrap());
        }
        // Deferred world: every layer's VF, with the tracks of the step it folds.
        let ts: Vec<i32> = (0..batch)
            .map(|b| if slots[b] >= 0 { pending_track[b].0 } else { -1 })
            .collect();
        let tsteps: Vec<i32> = (0..batch)
            .map(|b| if ts[b] >= 0 { pending_track[b].1 } else { -1 })
            .collect();
        for (l, w) in windows.iter().enumerate() {
            let d = w.dims;
            let n = w.num_tokens();
            let mut o = ActBuffer::nan(dtype, n * d.hv * d.v);
            let track = ts.iter().any(|&t| t >= 0).then_some(Track {
                slots: &ts[..],
                steps: &tsteps[..],
            });
            replayssm_tools::staged::verify_fold(
                backend,
                &w.inputs(),
                &mut pool_vf,
                l,
                &mut o.dense_mut(n, d.hv * d.v),
                &mut dring,
                track,
            )
            .unwrap();
            let what = format!("{backend} {variant} {dtype} step {step} layer {l}");
            outputs_agree(&o, &outs_v[l], v_default || backend == Backend::Reference, &what);
        }
        for b in 0..batch {
            if ts[b] >= 0 {
                pending_track[b] = (-1, -1);
                tracks += 1;
            }
        }
        // Before F: VF has folded every live slot's previous step.
        for l in 0..layers {
            for &slot in slots.iter().filter(|&&x| x >= 0) {
                let range = slot_range(&shape, l, slot as usize);
                if let Err(e) = bits_equal(&pool_vf.state()[range.clone()], &pool_f.state()[range.clone()]) {
                    panic!("{backend} {variant} {dtype} step {step} layer {l} slot {slot}: VF != V + F: {e}");
                }
                if let Err(e) = bits_equal(&pool_vf.state()[range.clone()], &pool_r[range]) {
                    panic!("{backend} {variant} {dtype} step {step} layer {l} slot {slot}: VF != R: {e}");
                }
            }
            for &t in ts.iter().filter(|&&t| t >= 0) {
                let range = slot_range(&shape, l, t as usize);
                if let Err(e) = bits_equal(&pool_vf.state()[range.clone()], &pool_f.state()[range]) {
                    panic!("{backend} {variant} {dtype} step {step} layer {l}: VF's track snapshot in slot {t} != F's: {e}");
                }
            }
        }
        let commit = Commit::draw(&mut r, &slots, window, &track_of, 0.3);
        let (accept, track_slots, track_steps) = (&commit.accept, &commit.track_slots, &commit.track_steps);
        fold(backend, &mut pool_f, &ring, &slots, accept, Some(commit.track())).unwrap();
        let lens = commit.lens();
        folded += lens.iter().sum::<usize>();
        recurrent_commit(backend, &shape, &mut pool_r, &windows, &lens, false);
        // Deferred world: the commit (nothing folded yet: the records stay pending).
        dring.commit(&slots, accept).unwrap();
        for b in 0..batch {
            if slots[b] >= 0 {
                pending_track[b] = (track_slots[b], track_steps[b]);
                let s = slots[b] as usize;
                assert_eq!(dring.pending(s).unwrap(), accept[b] as usize);
                if accept[b] > 0 {
                    let e = dring.checkpoint(&pool_vf, 0, s).unwrap_err();
                    assert!(matches!(e, Error::PendingFold { slot, .. } if slot == s), "{e}");
                }
            }
        }
        // A flush now and then: the slot is current at once (its track is F's business only).
        if r.gen_range(0..5) == 0 {
            let b = r.gen_range(0..batch);
            let slot = live_slots[b];
            replayssm_tools::staged::defer_flush(backend, &mut pool_vf, &mut dring, &[slot]).unwrap();
            pending_track[b] = (-1, -1);
            flushes += 1;
            for l in 0..layers {
                let range = slot_range(&shape, l, slot as usize);
                let got = dring.checkpoint(&pool_vf, l, slot as usize).unwrap();
                if let Err(e) = bits_equal(got, &pool_f.state()[range]) {
                    panic!("{backend} {variant} {dtype} step {step} layer {l} slot {slot}: flushed VF != V + F: {e}");
                }
            }
        }
    }
    // The end: flush everything; every slot but the track slots (written at different times in
    // the two worlds) is bit-identical.
    replayssm_tools::staged::defer_flush(backend, &mut pool_vf, &mut dring, live_slots).unwrap();
    for l in 0..layers {
        for slot in [0usize, 3, 4, 6] {
            let range = slot_range(&shape, l, slot);
            if let Err(e) = bits_equal(&pool_vf.state()[range.clone()], &pool_f.state()[range.clone()]) {
                panic!("{backend} {variant} {dtype} end, layer {l} slot {slot}: VF != V + F: {e}");
            }
            if let Err(e) = bits_equal(&pool_vf.state()[range.clone()], &pool_r[range]) {
                panic!("{backend} {variant} {dtype} end, layer {l} slot {slot}: VF != R: {e}");
            }
        }
    }
    println!(
        "{backend} {variant} {dtype} {dims:?}: {steps} steps, {folded} tokens folded, {flushes} flushes, {tracks} VF track snapshots, bit-identical to V + F and R"
    );
}

#[allow(clippy::too_many_arguments)]
fn chain(
    backend: Backend,
    variant: Variant,
    dims: HeadDims,
    dtype: DType,
    layers: usize,
    batch: usize,
    steps: usize,
    seed: u64,
) {
    each_impl(backend, || {
        chain_once(backend, variant, dims, dtype, layers, batch, steps, seed)
    });
}

const SMALL: HeadDims = HeadDims {
    h: 1,
    hv: 1,
    k: 32,
    v: 16,
};

#[test]
fn vf_is_bit_identical_to_v_plus_f_and_recurrent_over_10000_steps_gdn() {
    let seed = 177 + std::process::id() as u64;
    let _v = tuning::force(Kernel::V, Choice::DEFAULT);
    chain_once(
        Backend::Emulated,
        Variant::Gdn,
        SMALL,
        DType::BF16,
        1,
        2,
        chain_steps(10_000),
        seed,
    );
}

#[test]
fn vf_is_bit_identical_to_v_plus_f_and_recurrent_over_10000_steps_kda() {
    let seed = 178 + std::process::id() as u64;
    let _v = tuning::force(Kernel::V, Choice::DEFAULT);
    chain_once(
        Backend::Emulated,
        Variant::Kda,
        SMALL,
        DType::F16,
        1,
        2,
        chain_steps(10_000),
        seed,
    );
}

#[test]
fn staged_vf_is_bit_identical_to_v_plus_f_and_recurrent_over_10000_steps() {
    let seed = 182 + std::process::id() as u64;
    let _v = tuning::force(Kernel::V, Choice::DEFAULT);
    for (variant, dtype, vf) in [
        (Variant::Gdn, DType::BF16, Choice::all(Kernel::VF)[1]),
        (Variant::Kda, DType::F16, Choice::all(Kernel::VF)[2]),
    ] {
        println!("{variant} {dtype}: VF {vf}");
        let _vf = tuning::force(Kernel::VF, vf);
        chain_once(
            Backend::Emulated,
            variant,
            SMALL,
            dtype,
            1,
            2,
            chain_steps(10_000),
            seed,
        );
    }
}

#[test]
fn vf_with_three_requests_two_layers_gqa_and_every_f_and_v_implementation() {
    let dims = HeadDims {
        h: 2,
        hv: 4,
        k: 64,
        v: 32,
    };
    let seed = 179 + std::process::id() as u64;
    chain(Backend::Emulated, Variant::Gdn, dims, DType::F16, 2, 3, 60, seed);
    chain(Backend::Emulated, Variant::Kda, dims, DType::BF16, 2, 3, 60, seed + 1);
}

#[test]
fn vf_at_k96_is_bit_identical_to_v_plus_f_and_recurrent() {
    let seed = 196 + std::process::id() as u64;
    chain(Backend::Emulated, Variant::Gdn, K96, DType::BF16, 1, 2, 40, seed);
    chain(Backend::Emulated, Variant::Kda, K96, DType::F32, 1, 2, 40, seed + 1);
}

#[test]
fn reference_backend_vf_is_bit_identical_to_its_v_plus_f() {
    let dims = HeadDims {
        h: 1,
        hv: 2,
        k: 16,
        v: 8,
    };
    chain_once(Backend::Reference, Variant::Gdn, dims, DType::F32, 2, 3, 300, 5);
    chain_once(Backend::Reference, Variant::Kda, dims, DType::BF16, 2, 3, 300, 6);
}

/// A raw VF launch of one layer on host buffers (the kernel layer: no host checks, as CUDA under
/// graph replay), two requests on slots 1 and 2 of a 4-slot pool, window W = 4 (ring 2W).
struct RawVf {
    data: RecurrentData,
    o: ActBuffer,
    state: Vec<f32>,
    ring_v: Vec<f32>,
    ring_k: Vec<f32>,
    ring_g: Vec<f32>,
    ring_beta: Vec<f32>,
    pending: Vec<i32>,
    error_word: u32,
    choice: Choice,
}

const RAW_W: usize = 4;

impl RawVf {
    fn new(seed: u64, choice: Choice) -> RawVf {
        let dims = HeadDims {
            h: 1,
            hv: 2,
            k: 32,
            v: 32,
        };
        let mut s = spec(Variant::Gdn, dims, DType::F32, &[3, 2]);
        s.raw_gate = false;
        let mut data = RecurrentData::random(&s, seed);
        data.slots = vec![1, 2];
        let ns = 4;
        let mut r = rng(seed);
        let mut rand = |n: usize| -> Vec<f32> { (0..n).map(|_| r.gen_range(-0.5f32..0.5)).collect() };
        let per = 2 * RAW_W;
        let mut pending = vec![0i32; ns * (2 + RAW_W)];
        // Slot 1: three records pending in half 0; slot 2: two in half 1.
        pending[(2 + RAW_W)..2 * (2 + RAW_W)].copy_from_slice(&[3, 0, 0, 1, 2, -1]);
        pending[2 * (2 + RAW_W)..3 * (2 + RAW_W)].copy_from_slice(&[2, 1, 4, 5, -1, -1]);
        let n = data.num_tokens();
        RawVf {
            o: ActBuffer::nan(DType::F32, n * 64),
            state: rand(ns * dims.state_elems()),
            ring_v: rand(ns * 2 * per * 32),
            ring_k: rand(ns * per * 32),
            ring_g: rand(ns * 2 * per).iter().map(|x| -x.abs()).collect(),
            ring_beta: rand(ns * 2 * per).iter().map(|x| x.abs()).collect(),
            pending,
            error_word: 0,
            data,
            choice,
        }
    }

    fn launch(&mut self) -> ffi::rssm_status {
        let replayssm_tools::workload::GateData::Precomputed { g, beta } = &self.data.gate else {
            unreachable!()
        };
        let n = self.data.num_tokens() as i32;
        let verify = ffi::rssm_verify_params {
            base: ffi::rssm_base_params {
                slots: self.data.slots.as_ptr(),
                state: self.state.as_mut_ptr(),
                error_word: &mut self.error_word,
                batch: 2,
                num_slots: 4,
                num_layers: 1,
                layer: 0,
                H: 1,
                HV: 2,
                K: 32,
                V: 32,
                dtype: ffi::rssm_dtype_RSSM_DTYPE_F32 as i32,
                variant: ffi::rssm_variant_RSSM_VARIANT_GDN as i32,
                qk_l2norm: 1,
                impl_: self.choice.imp.to_ffi(),
                block_rows: self.choice.block_rows as i32,
                ..Default::default()
            },
            tokens: ffi::rssm_token_params {
                q: self.data.q.as_bytes().as_ptr().cast(),
                k: self.data.k.as_bytes().as_ptr().cast(),
                v: self.data.v.as_bytes().as_ptr().cast(),
                g: g.as_ptr(),
                beta: beta.as_ptr(),
                o: self.o.as_bytes_mut().as_mut_ptr().cast(),
                q_stride: 32,
                k_stride: 32,
                v_stride: 64,
                o_stride: 64,
                scale: 0.17,
                ..Default::default()
            },
            ring: ffi::rssm_ring_params {
                v: self.ring_v.as_mut_ptr().cast(),
                k: self.ring_k.as_mut_ptr().cast(),
                g: self.ring_g.as_mut_ptr(),
                beta: self.ring_beta.as_mut_ptr(),
                window: 2 * RAW_W as i32,
                ..Default::default()
            },
            cu_seqlens: self.data.cu_seqlens.as_ptr(),
            num_tokens: n,
            max_seqlen: 3,
            ..Default::default()
        };
        let p = ffi::rssm_verify_fold_params {
            verify,
            pending: self.pending.as_ptr(),
            track_slots: std::ptr::null(),
            track_steps: std::ptr::null(),
        };
        // SAFETY: host buffers sized for these params; only the pending entries may be garbage.
        unsafe { ffi::rssm_emu_verify_fold(&p, std::ptr::null_mut()) }
    }
}

/// Garbage in a slot's pending entry (a count past W or negative, a half that is neither 0 nor 1,
/// positions outside the half or out of order) is flagged in the error word; that request is
/// skipped (its checkpoint, its ring records and every other slot untouched, its outputs zero)
/// while the other request is served as with a clean table. Every implementation of VF.
#[test]
fn garbage_pending_entries_are_flagged_and_the_row_skipped() {
    for choice in Choice::all(Kernel::VF).into_iter().take(3) {
        println!("VF {choice}");
        garbage_pending_entries(choice);
    }
}

fn garbage_pending_entries(choice: Choice) {
    let mut clean = RawVf::new(41, choice);
    assert_eq!(clean.launch(), ffi::rssm_status_RSSM_OK);
    assert_eq!(clean.error_word, 0, "a clean table flagged {:#x}", clean.error_word);
    let e = 2 + RAW_W;
    let per_slot = 2 * 32 * 32;
    let cases: [(&str, [i32; 6], u32); 6] = [
        ("count past W", [99, 0, 0, 1, 2, 3], ffi::RSSM_DEVERR_BAD_LENGTH),
        ("negative count", [-3, 0, 0, 1, 2, 3], ffi::RSSM_DEVERR_BAD_LENGTH),
        ("half 7", [2, 7, 0, 1, -1, -1], ffi::RSSM_DEVERR_BAD_LENGTH),
        (
            "position in the other half",
            [2, 0, 0, 5, -1, -1],
            ffi::RSSM_DEVERR_BAD_TREE,
        ),
        ("positions out of order", [3, 0, 2, 1, 3, -1], ffi::RSSM_DEVERR_BAD_TREE),
        (
            "position far outside",
            [1, 0, i32::MIN, -1, -1, -1],
            ffi::RSSM_DEVERR_BAD_TREE,
        ),
    ];
    for (what, entry, bit) in cases {
        let mut w = RawVf::new(41, choice);
        w.pending[e..2 * e].copy_from_slice(&entry);
        let before = (w.state.clone(), w.ring_v.clone(), w.ring_k.clone(), w.ring_g.clone());
        assert_eq!(w.launch(), ffi::rssm_status_RSSM_OK, "{what}");
        assert_eq!(w.error_word, bit, "{what}: error word {:#x}", w.error_word);
        // Slot 1 (request 0) skipped: its checkpoint and ring records as before.
        assert!(
            bits_equal(&w.state[per_slot..2 * per_slot], &before.0[per_slot..2 * per_slot]).is_ok(),
            "{what}: the skipped slot's checkpoint was written"
        );
        let ring_v_slot = 2 * 2 * RAW_W * 32;
        assert!(
            w.ring_v[ring_v_slot..2 * ring_v_slot] == before.1[ring_v_slot..2 * ring_v_slot],
            "{what}: the skipped slot's ring was written"
        );
        // Its outputs are zero; request 1 (slot 2) is served exactly as with a clean table.
        let (o, oc) = (w.o.to_f32(), clean.o.to_f32());
        assert!(
            o[..3 * 64].iter().all(|x| x.to_bits() == 0),
            "{what}: outputs of the skipped request not zero"
        );
        assert!(
            bits_equal(&o[3 * 64..], &oc[3 * 64..]).is_ok(),
            "{what}: the other request changed"
        );
        assert!(
            bits_equal(&w.state[2 * per_slot..], &clean.state[2 * per_slot..]).is_ok(),
            "{what}: the other slot's fold changed"
        );
        assert!(
            bits_equal(&w.state[..per_slot], &before.0[..per_slot]).is_ok(),
            "{what}: an idle slot changed"
        );
    }
}

/// The pending table refuses what would read or hand out a checkpoint that misses its records,
/// and the gates refuse a deferred ring on a pool resolved without the flag.
#[test]
fn unflushed_slots_cannot_be_read_copied_or_handed_out() {
    let shape = RingShape {
        variant: Variant::Gdn,
        dims: SMALL,
        dtype: DType::BF16,
        layers: 2,
        slots: 4,
        window: 4,
    };
    let start = vec![0.25f32; shape.pool_elems()];
    let plain = spec_pool(&shape, &start);
    let e = DeferredRing::for_pool(&plain, 4, DType::BF16, true).unwrap_err();
    assert!(matches!(&e, Error::Gate(g) if g.rule() == "P1"), "{e}");
    assert!(e.to_string().contains("--linear-replayssm-spec-deferred-fold"), "{e}");
    let mut pool = deferred_pool(&shape, &start);
    let e = DeferredRing::for_pool(&pool, 17, DType::BF16, true).unwrap_err();
    assert!(e.to_string().contains("W = 17"), "{e}");
    let mut dring = DeferredRing::for_pool(&pool, 4, DType::BF16, true).unwrap();
    assert_eq!(dring.shape().window, 8, "the ring holds two windows");
    dring.commit(&[1, -1, 2], &[3, 0, 0]).unwrap();
    assert_eq!(dring.pending(1).unwrap(), 3);
    assert_eq!(
        dring.pending_positions(1).unwrap(),
        &[4, 5, 6],
        "records of the window VF wrote: half 1"
    );
    let pending = |e: Error, s: usize| matches!(e, Error::PendingFold { slot, pending: 3, .. } if slot == s);
    assert!(pending(dring.checkpoint(&pool, 0, 1).unwrap_err(), 1));
    assert!(pending(dring.allocate(1).unwrap_err(), 1));
    assert!(pending(dring.copy_slot(&mut pool, 1, 3).unwrap_err(), 1));
    assert!(pending(dring.copy_slot(&mut pool, 3, 1).unwrap_err(), 1));
    let e = dring.checkpoint(&pool, 0, 1).unwrap_err().to_string();
    assert!(e.contains("slot 1 has 3 accepted records not yet folded"), "{e}");
    // Slot 2 committed nothing: free to read and copy.
    dring.checkpoint(&pool, 1, 2).unwrap();
    dring.copy_slot(&mut pool, 2, 3).unwrap();
    // Bad commits are refused whole, naming the field.
    let e = dring.commit(&[1, 2], &[5, 0]).unwrap_err().to_string();
    assert!(e.contains("accept_lens[0] = 5"), "{e}");
    let e = dring.commit(&[1, 1], &[1, 1]).unwrap_err().to_string();
    assert!(e.contains("slot"), "{e}");
    assert_eq!(dring.pending(1).unwrap(), 3, "a refused commit changed the table");
    // A flush folds them (the ring holds NaN poison here: flushed state is NaN, but no longer
    // refused); a release drops them.
    dring.flush(Backend::Emulated, &mut pool, &[1]).unwrap();
    assert_eq!(dring.pending(1).unwrap(), 0);
    dring.checkpoint(&pool, 0, 1).unwrap();
    dring.allocate(1).unwrap();
    dring.commit(&[2], &[2]).unwrap();
    dring.release(2).unwrap();
    dring.allocate(2).unwrap();
}

/// The device-memory protocol (VF, the defer kernel's commit, gather and reset) on the emulator
/// matches the host one step for step: pools, rings and pending tables bit for bit.
#[test]
fn device_protocol_matches_the_host_protocol() {
    device_protocol(Backend::Emulated);
}

/// On a GPU: the long chain (VF against V + F and R, CUDA kernels throughout) and the device-memory
/// protocol on a CUDA stream. Skips, saying why, without a GPU; fails under REPLAYSSM_REQUIRE_GPU=1.
#[test]
fn vf_chain_and_device_protocol_on_the_gpu() {
    if !replayssm_tools::testing::gpu_available("vf_chain_and_device_protocol_on_the_gpu") {
        return;
    }
    let seed = 181 + std::process::id() as u64;
    let _v = tuning::force(Kernel::V, Choice::DEFAULT);
    let dims = HeadDims {
        h: 2,
        hv: 4,
        k: 128,
        v: 128,
    };
    for vf in [Choice::DEFAULT, Choice::all(Kernel::VF)[1]] {
        println!("VF {vf}");
        let _vf = tuning::force(Kernel::VF, vf);
        chain_once(
            Backend::Cuda,
            Variant::Gdn,
            dims,
            DType::BF16,
            2,
            3,
            chain_steps(2_000),
            seed,
        );
        chain_once(
            Backend::Cuda,
            Variant::Kda,
            dims,
            DType::F16,
            2,
            3,
            chain_steps(2_000),
            seed + 1,
        );
    }
    device_protocol(Backend::Cuda);
}

fn device_protocol(backend: Backend) {
    use replayssm::memory::{DeviceAct, DeviceVec, Stream};
    use replayssm_tools::staged::DeviceTokens;
    let (variant, dtype, window) = (Variant::Kda, DType::BF16, 4usize);
    let shape = RingShape {
        variant,
        dims: SMALL,
        dtype,
        layers: 2,
        slots: 5,
        window,
    };
    let mut r = rng(7 + std::process::id() as u64);
    let start: Vec<f32> = (0..shape.pool_elems()).map(|_| r.gen_range(-0.5f32..0.5)).collect();
    let mut pool = deferred_pool(&shape, &start);
    let mut dring = DeferredRing::for_pool(&pool, window, dtype, true).unwrap();
    let stream = Stream::new(backend).unwrap();
    let mut dpool = pool.to_device(&stream).unwrap();
    let mut dd = dring.to_device(&stream, &dpool).unwrap();
    let live = [2i32, 0, 4];
    for step in 0..120 {
        let slots: Vec<i32> = live
            .iter()
            .map(|&x| if r.gen_range(0..6) == 0 { -1 } else { x })
            .collect();
        let mut s = spec(variant, SMALL, dtype, &[window; 3]);
        s.spare_slots = 2;
        for l in 0..2 {
            let mut w = RecurrentData::random(&s, 1000 + step * 2 + l as u64);
            w.slots = slots.clone();
            let n = w.num_tokens();
            let mut o = ActBuffer::nan(dtype, n * 16);
            replayssm::verify_fold(
                backend,
                &w.inputs(),
                None,
                &mut pool,
                l,
                &mut o.dense_mut(n, 16),
                &mut dring,
                None,
            )
            .unwrap();
            let t = DeviceTokens::upload(&stream, &w.inputs()).unwrap();
            let mut od = DeviceAct::from_host(&stream, &ActBuffer::nan(dtype, n * 16)).unwrap();
            stream
                .verify_fold(
                    &t.inputs(),
                    None,
                    &mut dpool,
                    l,
                    &mut od.view_mut(0, n, 16, 16),
                    &mut dd,
                    None,
                )
                .unwrap();
            let got = od.to_host(&stream).unwrap();
            bits_equal(&got.to_f32(), &o.to_f32()).unwrap_or_else(|e| panic!("step {step} layer {l}: outputs {e}"));
        }
        let accept: Vec<i32> = slots
            .iter()
            .map(|&x| if x < 0 { 0 } else { r.gen_range(0..=4) })
            .collect();
        dring.commit(&slots, &accept).unwrap();
        let (ds, da) = (
            DeviceVec::from_host(&stream, &slots).unwrap(),
            DeviceVec::from_host(&stream, &accept).unwrap(),
        );
        stream.defer_commit(&mut dd, ds.as_slice(), da.as_slice()).unwrap();
        if step % 9 == 4 {
            let flush = [live[step as usize % 3]];
            replayssm_tools::staged::defer_flush(backend, &mut pool, &mut dring, &flush).unwrap();
            let fs = DeviceVec::from_host(&stream, &flush).unwrap();
            let mut scratch = DeviceVec::<i32>::zeros(backend, window).unwrap();
            stream
                .defer_flush(&mut dpool, &mut dd, fs.as_slice(), scratch.as_mut_slice())
                .unwrap();
            dd.check_flushed(&stream, &[flush[0] as usize], "reading it").unwrap();
        }
        stream.check_errors().unwrap();
        let host = dd.to_host(&stream, &pool).unwrap();
        let dstate = dpool.to_host(&stream).unwrap();
        bits_equal(dstate.state(), pool.state()).unwrap_or_else(|e| panic!("step {step}: pools {e}"));
        for slot in 0..5 {
            assert_eq!(
                host.pending(slot).unwrap(),
                dring.pending(slot).unwrap(),
                "step {step} slot {slot}"
            );
            assert_eq!(
                host.pending_positions(slot).unwrap(),
                dring.pending_positions(slot).unwrap()
            );
        }
        // The device refuses, as the host does, a slot with records pending.
        for &slot in live.iter().filter(|&&s| dring.pending(s as usize).unwrap() > 0) {
            let e = dd
                .check_flushed(&stream, &[slot as usize], "copying from it")
                .unwrap_err();
            assert!(matches!(e, Error::PendingFold { .. }), "{e}");
        }
    }
}
