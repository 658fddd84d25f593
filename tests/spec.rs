//! Kernels V, F, P (SPEC §4) on the Emulated and Reference backends: verify outputs against the
//! f64 reference, ring contents, read-only checkpoint; fold and replay bit-identical to kernel R
//! over long chains of commits; track snapshots; every S1 rejection.
mod common;

use common::spec_chain::{chain, pool_for, rng, run_verify, spec_pool};

use common::*;
use rand::Rng;
use replayssm::backend::Backend;
use replayssm::config::{resolve, EngineFlags};
use replayssm::numerics::compare;
use replayssm::reference;
use replayssm::ring::{RingShape, SpecRing};
use replayssm::spec::{fold, replay, track_step, Track};
use replayssm::{ActBuffer, CheckpointPool, DType, Error, HeadDims, RecurrentOutputs, Variant};
use replayssm_tools::workload::RecurrentData;

#[test]
fn verify_matches_f64_reference_for_every_window_length() {
    let shapes = [
        HeadDims {
            h: 2,
            hv: 4,
            k: 64,
            v: 32,
        },
        HeadDims {
            h: 1,
            hv: 1,
            k: 128,
            v: 128,
        },
        HeadDims {
            h: 1,
            hv: 2,
            k: 32,
            v: 48,
        },
    ];
    let mut seed = 3000 + std::process::id() as u64;
    for (si, &dims) in shapes.iter().enumerate() {
        for t in [1usize, 2, 4, 6, 8, 16] {
            for variant in [Variant::Gdn, Variant::Kda] {
                let dtype = DType::ALL[(t + si) % 3];
                seed += 1;
                let mut s = spec(variant, dims, dtype, &[t, t.div_ceil(2), t]);
                s.null_requests = vec![1];
                s.raw_gate = t % 4 != 2;
                let data = RecurrentData::random(&s, seed);
                let (shape, pool) = pool_for(&data, 2, t + 1, seed);
                let pool_copy = pool.state().to_vec();
                let layer_pool = &pool.state()[shape.pool_offset(1, 0)..shape.pool_offset(2, 0)];
                let f64ref = reference::recurrent::<f64>(&data.inputs(), layer_pool);
                let naive = reference::recurrent::<f32>(&data.inputs(), layer_pool);
                let tol = output_tolerance(dtype);
                let naive_o: Vec<f32> = naive.o.iter().map(|&x| dtype.round(x)).collect();
                let naive_err = compare(&naive_o, &f64ref.o, tol);
                let mut ring = SpecRing::new(shape, data.qk_l2norm).unwrap();
                let o = run_verify(Backend::Emulated, &data, &pool, 1, Some(&mut ring)).unwrap();
                let c = compare(&o.to_f32(), &f64ref.o, tol);
                let what = format!("{variant} {dtype} {dims:?} T={t} raw_gate={} seed {seed}", s.raw_gate);
                println!("{what}: verify {c} | naive {:.2e}", naive_err.max_abs_err);
                assert!(c.passed(), "{what}: {c}");
                assert!(
                    c.max_abs_err <= 2.0 * naive_err.max_abs_err.max(f64::MIN_POSITIVE),
                    "{what}: {:.3e} > 2x naive {:.3e}",
                    c.max_abs_err,
                    naive_err.max_abs_err
                );
                // Ring writing does not change the outputs (bit-equal without a ring).
                let again = run_verify(Backend::Emulated, &data, &pool, 1, None).unwrap();
                assert_eq!(o, again, "{what}: ring writing changed the outputs");
                check_ring(&data, &shape, &ring, 1);
                // The checkpoint is read only: the kernel got a pointer to it, so check the bits.
                assert!(
                    bits_equal(pool.state(), &pool_copy).is_ok(),
                    "{what}: verify changed the checkpoint pool"
                );
                // And V agrees with R (same backend) within the output tolerance.
                let mut r_state = layer_pool.to_vec();
                let n = data.num_tokens();
                let mut r_o = ActBuffer::nan(dtype, n * dims.hv * dims.v);
                replayssm::recurrent(
                    Backend::Emulated,
                    &data.inputs(),
                    &mut RecurrentOutputs {
                        o: r_o.dense_mut(n, dims.hv * dims.v),
                        state: &mut r_state,
                        write_state: false,
                        snapshots: None,
                    },
                )
                .unwrap();
                let r64: Vec<f64> = r_o.to_f32().iter().map(|&x| x as f64).collect();
                let vr = compare(&o.to_f32(), &r64, tol);
                assert!(
                    vr.non_finite == 0 && vr.max_abs_err <= 2.0 * c.max_abs_err.max(naive_err.max_abs_err) + tol.atol,
                    "{what}: V vs R {vr}"
                );
            }
        }
    }
}

/// Raw records equal the inputs bit for bit; g/beta match the f64 gate; null slots and
/// positions past each window are untouched (still NaN).
fn check_ring(data: &RecurrentData, shape: &RingShape, ring: &SpecRing, layer: usize) {
    let d = data.dims;
    let inp = data.inputs();
    let gw = d.gate_width(data.variant);
    for slot in 0..shape.slots {
        let req = data.slots.iter().position(|&s| s == slot as i32);
        let len = req.map_or(0, |r| (data.cu_seqlens[r + 1] - data.cu_seqlens[r]) as usize);
        for l in 0..shape.layers {
            for t in 0..shape.window {
                let written = l == layer && t < len;
                for h in 0..d.h {
                    let i = shape.k_index(l, slot, h, t);
                    for j in 0..d.k {
                        let x = ring.k.get(i + j);
                        if written {
                            let tok = data.cu_seqlens[req.unwrap()] as usize + t;
                            assert_eq!(x.to_bits(), inp.k.at(tok, h * d.k + j).to_bits(), "ring k");
                        } else {
                            assert!(x.is_nan(), "ring k written at layer {l} slot {slot} t {t}");
                        }
                    }
                }
                for hv in 0..d.hv {
                    let i = shape.v_index(l, slot, hv, t);
                    let gi = shape.g_index(l, slot, hv, t);
                    let bi = shape.beta_index(l, slot, hv, t);
                    if written {
                        let tok = data.cu_seqlens[req.unwrap()] as usize + t;
                        for j in 0..d.v {
                            assert_eq!(
                                ring.v.get(i + j).to_bits(),
                                inp.v.at(tok, hv * d.v + j).to_bits(),
                                "ring v"
                            );
                        }
                        let (g, beta) = reference::gate_at::<f64>(&inp.gate, data.variant, &d, tok, hv);
                        for (j, &gj) in g.iter().enumerate().take(gw) {
                            assert!((ring.g[gi + j] as f64 - gj).abs() <= 1e-6 + 1e-6 * gj.abs(), "ring g");
                        }
                        assert!((ring.beta[bi] as f64 - beta).abs() <= 1e-6, "ring beta");
                    } else {
                        assert!(
                            ring.v.get(i).is_nan() && ring.g[gi].is_nan() && ring.beta[bi].is_nan(),
                            "ring v/g/beta written at layer {l} slot {slot} t {t}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn verify_null_slots_get_zero_outputs_and_reference_backend_agrees() {
    let dims = HeadDims {
        h: 1,
        hv: 2,
        k: 32,
        v: 32,
    };
    let mut s = spec(Variant::Kda, dims, DType::F32, &[4, 3, 4]);
    s.null_requests = vec![0, 2];
    let data = RecurrentData::random(&s, 41);
    let (shape, pool) = pool_for(&data, 1, 4, 41);
    for backend in [Backend::Emulated, Backend::Reference] {
        let mut ring = SpecRing::new(shape, true).unwrap();
        let o = run_verify(backend, &data, &pool, 0, Some(&mut ring)).unwrap();
        for tok in (0..4).chain(7..11) {
            for i in 0..dims.hv * dims.v {
                assert_eq!(
                    o.get(tok * dims.hv * dims.v + i).to_bits(),
                    0,
                    "{backend}: null request output"
                );
            }
        }
        check_ring(&data, &shape, &ring, 0);
    }
}

/// Commits per variant of the long chains; `REPLAYSSM_CHAIN_COMMITS` overrides (CI keeps the
/// SPEC §6 minimum of 10 000).
fn chain_commits(default: usize) -> usize {
    std::env::var("REPLAYSSM_CHAIN_COMMITS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

#[test]
fn fold_and_replay_are_bit_identical_to_recurrent_over_10000_commits_gdn() {
    let dims = HeadDims {
        h: 1,
        hv: 1,
        k: 32,
        v: 16,
    };
    chain(
        Backend::Emulated,
        Variant::Gdn,
        dims,
        DType::BF16,
        1,
        2,
        chain_commits(10_000),
        77 + std::process::id() as u64,
    );
}

#[test]
fn fold_and_replay_are_bit_identical_to_recurrent_over_10000_commits_kda() {
    let dims = HeadDims {
        h: 1,
        hv: 1,
        k: 32,
        v: 16,
    };
    chain(
        Backend::Emulated,
        Variant::Kda,
        dims,
        DType::F16,
        1,
        2,
        chain_commits(10_000),
        78 + std::process::id() as u64,
    );
}

#[test]
fn fold_and_replay_are_bit_identical_to_recurrent_at_k128_with_two_layers_and_gqa() {
    let dims = HeadDims {
        h: 1,
        hv: 2,
        k: 128,
        v: 128,
    };
    let seed = 99 + std::process::id() as u64;
    chain(Backend::Emulated, Variant::Gdn, dims, DType::BF16, 2, 2, 200, seed);
    chain(Backend::Emulated, Variant::Kda, dims, DType::F32, 2, 2, 200, seed + 1);
}

#[test]
fn fold_with_three_requests_and_track_slots_on_a_mid_shape() {
    let dims = HeadDims {
        h: 2,
        hv: 4,
        k: 64,
        v: 32,
    };
    chain(
        Backend::Emulated,
        Variant::Gdn,
        dims,
        DType::F16,
        2,
        3,
        300,
        31 + std::process::id() as u64,
    );
}

#[test]
fn reference_backend_fold_is_bit_identical_to_its_recurrent() {
    let dims = HeadDims {
        h: 1,
        hv: 2,
        k: 16,
        v: 8,
    };
    chain(Backend::Reference, Variant::Gdn, dims, DType::F32, 2, 3, 300, 5);
    chain(Backend::Reference, Variant::Kda, dims, DType::BF16, 2, 3, 300, 6);
}

#[test]
fn track_step_matches_a_brute_force_count() {
    let mut r = rng(17);
    for _ in 0..20000 {
        let interval = r.gen_range(1..40u64);
        let pre = r.gen_range(0..500u64);
        let n = r.gen_range(0..20u64);
        // The last step t whose resulting length pre + t + 1 is a multiple of the interval.
        let brute = (0..n).rev().find(|t| (pre + t + 1) % interval == 0);
        assert_eq!(
            track_step(pre, n, interval),
            brute,
            "pre {pre} n {n} interval {interval}"
        );
    }
    assert_eq!(track_step(10, 5, 0), None);
}

fn small() -> (RecurrentData, RingShape, CheckpointPool, SpecRing) {
    let dims = HeadDims {
        h: 1,
        hv: 2,
        k: 32,
        v: 32,
    };
    let data = RecurrentData::random(&spec(Variant::Gdn, dims, DType::F32, &[3, 4]), 8);
    let (shape, pool) = pool_for(&data, 2, 4, 8);
    let ring = SpecRing::new(shape, true).unwrap();
    (data, shape, pool, ring)
}

#[test]
fn every_s1_rejection_is_a_typed_error_before_launch() {
    for backend in [Backend::Emulated, Backend::Reference] {
        let (data, shape, pool, mut ring) = small();
        // W < T.
        let short = RingShape { window: 3, ..shape };
        let mut short_ring = SpecRing::new(short, true).unwrap();
        let e = run_verify(backend, &data, &pool, 0, Some(&mut short_ring)).unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidValue {
                    what: "ring window",
                    ..
                }
            ),
            "{e}"
        );
        // Windows longer than the kernel's maximum.
        let long = RecurrentData::random(&spec(Variant::Gdn, shape.dims, DType::F32, &[17, 1]), 9);
        let (lshape, lpool) = pool_for(&long, 1, 17, 9);
        let _ = lshape;
        let e = run_verify(backend, &long, &lpool, 0, None).unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidValue {
                    what: "verify window",
                    ..
                }
            ),
            "{e}"
        );
        // Layer out of range; a pool not resolved for the spec ring; ring of another shape or
        // dtype; l2norm mismatch.
        let e = run_verify(backend, &data, &pool, 2, None).unwrap_err();
        assert!(matches!(e, Error::InvalidValue { what: "layer", .. }), "{e}");
        let off = CheckpointPool::new(&resolve(&EngineFlags::default()).unwrap(), shape.dims, 2, shape.slots).unwrap();
        let e = run_verify(backend, &data, &off, 0, Some(&mut ring)).unwrap_err();
        assert!(matches!(e, Error::Gate(ref g) if g.rule() == "P1"), "{e}");
        let mut wrong_dtype = SpecRing::new(
            RingShape {
                dtype: DType::BF16,
                ..shape
            },
            true,
        )
        .unwrap();
        let e = run_verify(backend, &data, &pool, 0, Some(&mut wrong_dtype)).unwrap_err();
        assert!(matches!(e, Error::DType { .. }), "{e}");
        let mut other = SpecRing::new(RingShape { layers: 3, ..shape }, true).unwrap();
        let e = run_verify(backend, &data, &pool, 0, Some(&mut other)).unwrap_err();
        assert!(matches!(e, Error::InvalidValue { what: "spec ring", .. }), "{e}");
        let mut unnorm = SpecRing::new(shape, false).unwrap();
        let e = run_verify(backend, &data, &pool, 0, Some(&mut unnorm)).unwrap_err();
        assert!(matches!(e, Error::InvalidValue { what: "spec ring", .. }), "{e}");
        // Slots: out of range and duplicates.
        let mut bad = data.clone();
        bad.slots = vec![0, shape.slots as i32];
        let e = run_verify(backend, &bad, &pool, 0, Some(&mut ring)).unwrap_err();
        assert!(matches!(e, Error::SlotOutOfRange { .. }), "{e}");
        bad.slots = vec![1, 1];
        let e = run_verify(backend, &bad, &pool, 0, Some(&mut ring)).unwrap_err();
        assert!(matches!(e, Error::DuplicateSlot { .. }), "{e}");
        assert!(
            ring.v.to_f32().iter().all(|x| x.is_nan()),
            "a refused verify wrote the ring"
        );

        // Fold and replay.
        run_verify(backend, &data, &pool, 0, Some(&mut ring)).unwrap();
        let mut p = spec_pool(&shape, pool.state());
        let before = p.state().to_vec();
        type Case = (Vec<i32>, Vec<i32>, Option<(Vec<i32>, Vec<i32>)>, &'static str);
        let cases: Vec<Case> = vec![
            (vec![0, 9], vec![1, 1], None, "slot out of range"),
            (vec![0, -3], vec![1, 1], None, "negative slot"),
            (vec![1, 1], vec![1, 1], None, "duplicate live slot"),
            (vec![0, 1], vec![1, 5], None, "accept length > W"),
            (vec![0, 1], vec![-1, 1], None, "negative accept length"),
            (vec![0, 1], vec![1], None, "accept_lens length"),
            (
                vec![0, 1],
                vec![2, 2],
                Some((vec![1, -1], vec![0, -1])),
                "track slot = live slot",
            ),
            (
                vec![0, 1],
                vec![2, 2],
                Some((vec![3, 3], vec![0, 1])),
                "duplicate track slot",
            ),
            (
                vec![0, 1],
                vec![2, 2],
                Some((vec![3, -1], vec![2, -1])),
                "track step >= accept length",
            ),
            (
                vec![0, 1],
                vec![2, 2],
                Some((vec![9, -1], vec![0, -1])),
                "track slot out of range",
            ),
            (vec![0, 1], vec![2, 2], Some((vec![3], vec![0])), "track length"),
        ];
        for (slots, lens, track, what) in cases {
            let t = track.as_ref().map(|(s, st)| Track { slots: s, steps: st });
            let e = fold(backend, &mut p, &ring, &slots, &lens, t).expect_err(what);
            println!("{backend} fold {what}: {e}");
            if track.is_none() {
                let e = replay(backend, &mut p, &ring, 0, &slots, &lens).expect_err(what);
                println!("{backend} replay {what}: {e}");
            }
        }
        assert!(
            bits_equal(p.state(), &before).is_ok(),
            "{backend}: a refused fold or replay changed the pool"
        );
        let e = replay(backend, &mut p, &ring, 2, &[0, 1], &[1, 1]).unwrap_err();
        assert!(matches!(e, Error::InvalidValue { what: "layer", .. }), "{e}");
        let other_pool = RingShape {
            slots: shape.slots + 1,
            ..shape
        };
        let mut q = spec_pool(&other_pool, &vec![0.0; other_pool.pool_elems()]);
        let e = fold(backend, &mut q, &ring, &[0, 1], &[1, 1], None).unwrap_err();
        assert!(matches!(e, Error::InvalidValue { what: "spec ring", .. }), "{e}");
    }
}

#[test]
fn fold_of_a_garbage_device_slot_is_skipped_and_stays_inside_the_pool() {
    use replayssm::ffi;
    let (data, shape, pool, mut ring) = small();
    run_verify(Backend::Emulated, &data, &pool, 0, Some(&mut ring)).unwrap();
    run_verify(Backend::Emulated, &data, &pool, 1, Some(&mut ring)).unwrap();
    // The pool sits between two guard regions of known bits.
    let guard = 4096;
    let mut buf = vec![f32::from_bits(0x7fc0_dead); guard];
    buf.extend_from_slice(pool.state());
    buf.extend(std::iter::repeat_n(f32::from_bits(0x7fc0_beef), guard));
    for (slots, lens, tslots, tsteps, bit) in [
        (
            [0, 1_000_000],
            [2, 3],
            [-1, -1],
            [-1, -1],
            ffi::RSSM_DEVERR_SLOT_OUT_OF_RANGE,
        ),
        ([0, -5], [2, 3], [-1, -1], [-1, -1], ffi::RSSM_DEVERR_SLOT_OUT_OF_RANGE),
        ([0, 1], [2, 99], [-1, -1], [-1, -1], ffi::RSSM_DEVERR_BAD_LENGTH),
        ([0, 1], [2, 3], [-1, 77_777], [-1, 1], ffi::RSSM_DEVERR_TRACK_SLOT),
    ] {
        let mut b = buf.clone();
        let mut word = 0u32;
        let d = shape.dims;
        let p = ffi::rssm_fold_params {
            state: b[guard..].as_mut_ptr(),
            ring_v: ring.v.as_bytes().as_ptr().cast(),
            ring_k: ring.k.as_bytes().as_ptr().cast(),
            ring_g: ring.g.as_ptr(),
            ring_beta: ring.beta.as_ptr(),
            slots: slots.as_ptr(),
            accept_lens: lens.as_ptr(),
            track_slots: tslots.as_ptr(),
            track_steps: tsteps.as_ptr(),
            error_word: &mut word,
            batch: 2,
            num_slots: shape.slots as i32,
            num_layers: shape.layers as i32,
            window: shape.window as i32,
            H: d.h as i32,
            HV: d.hv as i32,
            K: d.k as i32,
            V: d.v as i32,
            dtype: ffi::rssm_dtype_RSSM_DTYPE_F32 as i32,
            variant: ffi::rssm_variant_RSSM_VARIANT_GDN as i32,
            qk_l2norm: 1,
            ..Default::default()
        };
        // SAFETY: host buffers sized for these params; only the device-side indices are garbage.
        let st = unsafe { ffi::rssm_emu_fold(&p, std::ptr::null_mut()) };
        assert_eq!(st, ffi::rssm_status_RSSM_OK);
        assert_ne!(word & bit, 0, "{slots:?} {lens:?} {tslots:?}: not flagged");
        assert!(
            b[..guard].iter().all(|x| x.to_bits() == 0x7fc0_dead),
            "write before the pool"
        );
        assert!(
            b[guard + pool.state().len()..]
                .iter()
                .all(|x| x.to_bits() == 0x7fc0_beef),
            "write after the pool"
        );
        // Request 0 was folded; the skipped request's slot 1 is untouched.
        let per = d.state_elems();
        for l in 0..shape.layers {
            let s1 = shape.pool_offset(l, 1);
            if bit != ffi::RSSM_DEVERR_TRACK_SLOT {
                assert!(
                    bits_equal(&b[guard + s1..guard + s1 + per], &pool.state()[s1..s1 + per]).is_ok(),
                    "skipped slot changed"
                );
            }
            let s0 = shape.pool_offset(l, 0);
            assert!(
                bits_equal(&b[guard + s0..guard + s0 + per], &pool.state()[s0..s0 + per]).is_err(),
                "request 0 not folded"
            );
        }
    }
}

#[test]
fn verify_of_a_garbage_device_slot_is_skipped_and_writes_no_ring_outside_its_buffers() {
    use replayssm::ffi;
    use replayssm_tools::workload::GateData;
    let (data, shape, pool, _) = small();
    let d = shape.dims;
    let n = data.num_tokens();
    let guard = 2048;
    let with_guards = |len: usize| -> Vec<f32> {
        let mut v = vec![f32::from_bits(0x7fc0_dead); guard];
        v.extend(std::iter::repeat_n(f32::NAN, len));
        v.extend(std::iter::repeat_n(f32::from_bits(0x7fc0_beef), guard));
        v
    };
    let ls = shape.layers * shape.slots * shape.window;
    let (mut rv, mut rk, mut rg, mut rb) = (
        with_guards(ls * d.hv * d.v),
        with_guards(ls * d.h * d.k),
        with_guards(ls * d.hv),
        with_guards(ls * d.hv),
    );
    let GateData::Raw { a, b, a_log, dt_bias } = &data.gate else {
        unreachable!()
    };
    let slots = [1, 1 << 30];
    let mut o = vec![f32::NAN; n * d.hv * d.v];
    let mut word = 0u32;
    let p = ffi::rssm_verify_params {
        q: data.q.as_bytes().as_ptr().cast(),
        k: data.k.as_bytes().as_ptr().cast(),
        v: data.v.as_bytes().as_ptr().cast(),
        a: a.as_bytes().as_ptr().cast(),
        b: b.as_bytes().as_ptr().cast(),
        A_log: a_log.as_ptr(),
        dt_bias: dt_bias.as_ptr(),
        cu_seqlens: data.cu_seqlens.as_ptr(),
        slots: slots.as_ptr(),
        state: pool.state().as_ptr(),
        o: o.as_mut_ptr().cast(),
        ring_v: rv[guard..].as_mut_ptr().cast(),
        ring_k: rk[guard..].as_mut_ptr().cast(),
        ring_g: rg[guard..].as_mut_ptr(),
        ring_beta: rb[guard..].as_mut_ptr(),
        error_word: &mut word,
        q_stride: (d.h * d.k) as i64,
        k_stride: (d.h * d.k) as i64,
        v_stride: (d.hv * d.v) as i64,
        a_stride: d.hv as i64,
        b_stride: d.hv as i64,
        o_stride: (d.hv * d.v) as i64,
        num_tokens: n as i32,
        batch: 2,
        max_seqlen: 4,
        num_slots: shape.slots as i32,
        num_layers: shape.layers as i32,
        layer: 1,
        window: shape.window as i32,
        H: d.h as i32,
        HV: d.hv as i32,
        K: d.k as i32,
        V: d.v as i32,
        scale: data.scale,
        dtype: ffi::rssm_dtype_RSSM_DTYPE_F32 as i32,
        variant: ffi::rssm_variant_RSSM_VARIANT_GDN as i32,
        qk_l2norm: 1,
        ..Default::default()
    };
    // SAFETY: host buffers sized for these params; only the second slot index is garbage.
    let st = unsafe { ffi::rssm_emu_verify(&p, std::ptr::null_mut()) };
    assert_eq!(st, ffi::rssm_status_RSSM_OK);
    assert_eq!(word, ffi::RSSM_DEVERR_SLOT_OUT_OF_RANGE);
    for buf in [&rv, &rk, &rg, &rb] {
        assert!(
            buf[..guard].iter().all(|x| x.to_bits() == 0x7fc0_dead),
            "ring write before its buffer"
        );
        assert!(
            buf[buf.len() - guard..].iter().all(|x| x.to_bits() == 0x7fc0_beef),
            "ring write after its buffer"
        );
    }
    // Request 1 (tokens 3..7) got zeros; request 0 real outputs.
    let row = d.hv * d.v;
    assert!(
        o[3 * row..].iter().all(|x| x.to_bits() == 0),
        "skipped request's outputs not zero"
    );
    assert!(
        o[..3 * row].iter().all(|x| x.is_finite()),
        "live request's outputs missing"
    );
}
