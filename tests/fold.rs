//! Kernel F (design §4 F) on the Emulated and Reference backends: fold, and kernel P's replay
//! with it, bit-identical to kernel R over long chains of commits (tests/common/spec_chain.rs
//! commits each step through F, P and R from one start), track snapshots, every S1 rejection of
//! V and F as a typed error before launch, and garbage device-side slots. P's own tests:
//! tests/replay.rs.
mod common;

use common::spec_chain::{chain, pool_for, rng, run_verify, small, spec_pool};

use common::*;
use rand::Rng;
use replayssm::backend::Backend;
use replayssm::config::{resolve, EngineFlags};
use replayssm::ring::{RingShape, SpecRing};
use replayssm::spec::{fold, track_step, Track};
use replayssm::{CheckpointPool, DType, Error, HeadDims, Variant};
use replayssm_tools::workload::RecurrentData;

/// Commits per variant of the long chains; `REPLAYSSM_CHAIN_COMMITS` overrides (CI keeps the
/// design §6 minimum of 10 000).
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
fn fold_and_replay_are_bit_identical_to_recurrent_at_k96() {
    // Three channels per lane: the one compiled head dim with no vector width. GDN over two layers
    // and two requests, KDA over one layer and three.
    let seed = 96 + std::process::id() as u64;
    chain(Backend::Emulated, Variant::Gdn, K96, DType::BF16, 2, 2, 150, seed);
    chain(Backend::Emulated, Variant::Kda, K96, DType::F32, 1, 3, 150, seed + 1);
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
                Error::BadParam(ref m) if m.starts_with("max_seqlen (draft tokens per request) = 17")
            ),
            "{e}"
        );
        // Layer out of range; a pool not resolved for the spec ring; ring of another shape or
        // dtype; l2norm mismatch.
        let e = run_verify(backend, &data, &pool, 2, None).unwrap_err();
        assert!(
            matches!(e, Error::BadParam(ref m) if m == "layer = 2, must be in 0..=1"),
            "{e}"
        );
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

        // Fold (replay's: tests/replay.rs).
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
            let t = track.as_ref().map(|(s, st)| Track {
                slots: &s[..],
                steps: &st[..],
            });
            let e = fold(backend, &mut p, &ring, &slots, &lens, t).expect_err(what);
            println!("{backend} fold {what}: {e}");
        }
        assert!(
            bits_equal(p.state(), &before).is_ok(),
            "{backend}: a refused fold changed the pool"
        );
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
        for imp in [ffi::rssm_impl_RSSM_IMPL_DEFAULT, ffi::rssm_impl_RSSM_IMPL_PREFETCH] {
            let mut b = buf.clone();
            let mut word = 0u32;
            let d = shape.dims;
            let p = ffi::rssm_fold_params {
                base: ffi::rssm_base_params {
                    state: b[guard..].as_mut_ptr(),
                    slots: slots.as_ptr(),
                    error_word: &mut word,
                    batch: 2,
                    num_slots: shape.slots as i32,
                    num_layers: shape.layers as i32,
                    H: d.h as i32,
                    HV: d.hv as i32,
                    K: d.k as i32,
                    V: d.v as i32,
                    dtype: ffi::rssm_dtype_RSSM_DTYPE_F32 as i32,
                    variant: ffi::rssm_variant_RSSM_VARIANT_GDN as i32,
                    qk_l2norm: 1,
                    impl_: imp as i32,
                    ..Default::default()
                },
                ring: ffi::rssm_ring_params {
                    v: ring.v.as_bytes().as_ptr().cast_mut().cast(),
                    k: ring.k.as_bytes().as_ptr().cast_mut().cast(),
                    g: ring.g.as_ptr().cast_mut(),
                    beta: ring.beta.as_ptr().cast_mut(),
                    window: shape.window as i32,
                    ..Default::default()
                },
                accept_lens: lens.as_ptr(),
                track_slots: tslots.as_ptr(),
                track_steps: tsteps.as_ptr(),
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
}
