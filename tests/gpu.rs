//! Kernel R on a real GPU (Cuda backend) against the f64 reference, and bit-identical to
//! itself across runs. Each test skips with a printed reason when no GPU is usable, and fails
//! instead under REPLAYSSM_REQUIRE_GPU=1 (what scripts/device-check sets).
mod common;

use common::*;
use replayssm::backend::Backend;
use replayssm::{DType, HeadDims, Variant};
use replayssm_tools::workload::RecurrentData;

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
                if dtype == DType::BF16 && variant == Variant::Kda {
                    s.gate_form = safe_gate(); // the safe gate through the device's expf
                }
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

#[test]
fn cuda_verify_matches_f64_and_writes_the_same_ring_as_the_emulator() {
    use common::spec_chain::{pool_for, run_verify};
    use replayssm::numerics::compare;
    use replayssm::reference;
    use replayssm::ring::SpecRing;
    if !gpu_available("cuda_verify_matches_f64_and_writes_the_same_ring_as_the_emulator") {
        return;
    }
    let mut seed = 9000 + std::process::id() as u64;
    for dims in [
        HeadDims {
            h: 2,
            hv: 4,
            k: 64,
            v: 32,
        },
        HeadDims {
            h: 4,
            hv: 8,
            k: 128,
            v: 128,
        },
        HeadDims {
            h: 1,
            hv: 2,
            k: 256,
            v: 64,
        },
    ] {
        for t in [1usize, 2, 4, 6, 8, 16] {
            for variant in [Variant::Gdn, Variant::Kda] {
                for dtype in DType::ALL {
                    seed += 1;
                    let mut s = spec(variant, dims, dtype, &[t, t.div_ceil(2), t]);
                    s.null_requests = vec![1];
                    let data = RecurrentData::random(&s, seed);
                    let (shape, pool) = pool_for(&data, 2, t + 1, seed);
                    let layer_pool = &pool.state()[shape.pool_offset(1, 0)..shape.pool_offset(2, 0)];
                    let f64ref = reference::recurrent::<f64>(&data.inputs(), layer_pool);
                    let mut ring_gpu = SpecRing::new(shape, true).unwrap();
                    let mut ring_emu = SpecRing::new(shape, true).unwrap();
                    let o = run_verify(Backend::Cuda, &data, &pool, 1, Some(&mut ring_gpu)).unwrap();
                    run_verify(Backend::Emulated, &data, &pool, 1, Some(&mut ring_emu)).unwrap();
                    let c = compare(&o.to_f32(), &f64ref.o, output_tolerance(dtype));
                    let what = format!("{variant} {dtype} {dims:?} T={t}");
                    println!("{what}: cuda verify {c}");
                    assert!(c.passed(), "{what}: {c}");
                    assert_eq!(ring_gpu.k, ring_emu.k, "{what}: raw k in the ring");
                    assert_eq!(ring_gpu.v, ring_emu.v, "{what}: raw v in the ring");
                    let again = run_verify(Backend::Cuda, &data, &pool, 1, None).unwrap();
                    assert_eq!(o, again, "{what}: ring writing changed the outputs");
                }
            }
        }
    }
}

#[test]
fn cuda_fold_and_replay_are_bit_identical_to_cuda_recurrent() {
    use common::spec_chain::chain;
    if !gpu_available("cuda_fold_and_replay_are_bit_identical_to_cuda_recurrent") {
        return;
    }
    let seed = 123 + std::process::id() as u64;
    chain(
        Backend::Cuda,
        Variant::Gdn,
        HeadDims {
            h: 1,
            hv: 1,
            k: 32,
            v: 16,
        },
        DType::BF16,
        1,
        2,
        2000,
        seed,
    );
    chain(
        Backend::Cuda,
        Variant::Kda,
        HeadDims {
            h: 1,
            hv: 1,
            k: 32,
            v: 16,
        },
        DType::F16,
        1,
        2,
        2000,
        seed + 1,
    );
    chain(
        Backend::Cuda,
        Variant::Gdn,
        HeadDims {
            h: 2,
            hv: 4,
            k: 128,
            v: 128,
        },
        DType::BF16,
        2,
        3,
        300,
        seed + 2,
    );
    chain(
        Backend::Cuda,
        Variant::Kda,
        HeadDims {
            h: 2,
            hv: 4,
            k: 128,
            v: 128,
        },
        DType::F32,
        2,
        3,
        300,
        seed + 3,
    );
}
