//! Kernel R on a real GPU (Cuda backend) against the f64 reference, and bit-identical to
//! itself across runs. Each test skips with a printed reason when no GPU is usable, and fails
//! instead under REPLAYSSM_REQUIRE_GPU=1 (what scripts/device-check sets).
mod common;

use common::*;
use replayssm::backend::Backend;
use replayssm::workload::RecurrentData;
use replayssm::{DType, HeadDims, Variant};

const SHAPES: &[(HeadDims, &[usize])] = &[
    (
        HeadDims {
            h: 2,
            hv: 2,
            k: 64,
            v: 32,
        },
        &[3, 1, 5],
    ),
    (
        HeadDims {
            h: 1,
            hv: 2,
            k: 32,
            v: 48,
        },
        &[4, 2],
    ),
    (
        HeadDims {
            h: 4,
            hv: 8,
            k: 128,
            v: 128,
        },
        &[16, 7, 4, 1],
    ),
    (
        HeadDims {
            h: 2,
            hv: 4,
            k: 256,
            v: 64,
        },
        &[2, 3],
    ),
];

#[test]
fn cuda_matches_f64_reference_at_all_shapes() {
    if !gpu_available("cuda_matches_f64_reference_at_all_shapes") {
        return;
    }
    let mut seed = 5000 + std::process::id() as u64;
    for &(dims, seqlens) in SHAPES {
        for variant in [Variant::Gdn, Variant::Kda] {
            for dtype in DType::ALL {
                seed += 1;
                let mut s = spec(variant, dims, dtype, seqlens);
                s.null_requests = vec![1];
                let data = RecurrentData::random(&s, seed);
                let tol = output_tolerance(dtype);
                let gpu = run(Backend::Cuda, &data, true).unwrap();
                let naive = run(Backend::Reference, &data, true).unwrap();
                let (jg, jn) = (judge(&data, &gpu, tol), judge(&data, &naive, tol));
                let what = format!("{variant} {dtype} {dims:?} {seqlens:?} seed {seed}");
                println!("{what}: cuda o {} | state {}", jg.o, jg.state);
                assert!(
                    jg.o.passed() && jg.state.passed() && jg.snapshots.passed(),
                    "{what}: {} / {} / {}",
                    jg.o,
                    jg.state,
                    jg.snapshots
                );
                assert!(
                    jg.o.max_abs_err <= 2.0 * jn.o.max_abs_err,
                    "{what}: output error > 2x naive"
                );
                assert!(
                    jg.state.max_abs_err <= 2.0 * jn.state.max_abs_err,
                    "{what}: state error > 2x naive"
                );
                let again = run(Backend::Cuda, &data, true).unwrap();
                assert_eq!(gpu.o, again.o, "{what}: outputs not deterministic");
                assert!(
                    gpu.state
                        .iter()
                        .zip(&again.state)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{what}: state not deterministic"
                );
            }
        }
    }
}

#[test]
fn cuda_bad_inputs_are_refused_before_launch() {
    if !gpu_available("cuda_bad_inputs_are_refused_before_launch") {
        return;
    }
    let dims = HeadDims {
        h: 2,
        hv: 4,
        k: 64,
        v: 32,
    };
    let mut data = RecurrentData::random(&spec(Variant::Gdn, dims, DType::BF16, &[2, 2]), 1);
    data.slots[1] = 1000;
    let err = run(Backend::Cuda, &data, false)
        .err()
        .expect("slot out of range must be refused");
    assert!(matches!(err, replayssm::Error::SlotOutOfRange { .. }), "{err:?}");
}
