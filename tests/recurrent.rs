//! Kernel R on the Reference and Emulated backends against the f64 reference (SPEC §6).
mod common;

use common::*;
use replayssm::backend::Backend;
use replayssm::{DType, HeadDims, Variant};

const SHAPES: &[(HeadDims, &[usize])] = &[
    (HeadDims { h: 2, hv: 2, k: 64, v: 32 }, &[3, 1, 5]),   // K != V
    (HeadDims { h: 1, hv: 2, k: 32, v: 48 }, &[4, 2]),      // HV = 2 H, V not a multiple of 16
    (HeadDims { h: 1, hv: 1, k: 128, v: 128 }, &[16, 7]),  // K = V = 128, T = 16
    (HeadDims { h: 2, hv: 4, k: 256, v: 64 }, &[2, 3]),    // widest K
];

#[test]
fn emulated_matches_f64_reference_at_all_shapes() {
    let mut seed = 1000;
    for &(dims, seqlens) in SHAPES {
        for variant in [Variant::Gdn, Variant::Kda] {
            for dtype in DType::ALL {
                seed += 1;
                let data = replayssm::workload::RecurrentData::random(&spec(variant, dims, dtype, seqlens), seed);
                let tol = output_tolerance(dtype);
                let emu = run(Backend::Emulated, &data, true).unwrap();
                let naive = run(Backend::Reference, &data, true).unwrap();
                let je = judge(&data, &emu, tol);
                let jn = judge(&data, &naive, tol);
                let what = format!("{variant} {dtype} {dims:?} {seqlens:?}");
                println!("{what}: o {} | state {} | naive o {:.2e} state {:.2e}", je.o, je.state, jn.o.max_abs_err, jn.state.max_abs_err);
                assert!(je.o.passed(), "{what}: outputs: {}", je.o);
                assert!(je.state.passed(), "{what}: state: {}", je.state);
                assert!(je.snapshots.passed(), "{what}: snapshots: {}", je.snapshots);
                assert!(jn.o.passed() && jn.state.passed(), "{what}: naive f32 reference: {} / {}", jn.o, jn.state);
            }
        }
    }
}
