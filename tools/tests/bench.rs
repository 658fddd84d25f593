//! The performance harness (src/bench): every kernel's case through the C ABI on the emulator,
//! and, on a GPU, a timed run whose numbers must be sane (every case timed, percent of floor
//! and copy bandwidth in physical ranges, graph replay used for the short kernels).

use replayssm::backend::Backend;
use replayssm_tools::bench::{
    run, BenchOptions, Kernel, Outcome, PreparedCase, TimingOptions, TINY_KDA_SHAPE, TINY_SHAPE,
};
use replayssm_tools::floor::MODEL_SHAPES;

#[test]
fn every_kernel_runs_through_the_harness_on_the_emulator() {
    let o = BenchOptions {
        backend: Backend::Emulated,
        shapes: vec![TINY_SHAPE, TINY_KDA_SHAPE],
        batches: vec![1, 3],
        windows: vec![2, 5],
        ..BenchOptions::default()
    };
    let mut seen = 0;
    let rep = run(&o, &mut |done, total, r| {
        seen += 1;
        assert_eq!(done, seen);
        assert_eq!(total, 2 * 2 * (2 + 9 * 2));
        assert_eq!(r.outcome, Outcome::Ran, "{:?}", r.case);
    })
    .unwrap();
    assert_eq!(seen, rep.results.len());
    assert!(rep.copy_bandwidth.is_none() && rep.no_timing_reason.is_some());
    for k in Kernel::ALL {
        assert!(rep.results.iter().any(|r| r.case.kernel == k), "{k} missing");
    }
}

#[test]
fn the_tree_kernels_run_through_the_harness_on_the_emulator() {
    let o = BenchOptions {
        backend: Backend::Emulated,
        shapes: vec![TINY_SHAPE, TINY_KDA_SHAPE],
        batches: vec![1, 3],
        windows: vec![5],
        kernels: Kernel::TREE.to_vec(),
        ..BenchOptions::default()
    };
    let rep = run(&o, &mut |_, total, r| {
        assert_eq!(total, 2 * 2 * 2);
        assert_eq!(r.outcome, Outcome::Ran, "{:?}", r.case);
        assert!(r.floor_bytes.is_finite() && r.floor_bytes > 0.0, "{:?}", r.case);
    })
    .unwrap();
    for k in Kernel::TREE {
        assert!(rep.results.iter().any(|r| r.case.kernel == k), "{k} missing");
        // A prepared case launches again (the timed path's rotation) and stays clean.
        let case = replayssm_tools::bench::Case {
            kernel: k,
            shape: TINY_KDA_SHAPE,
            batch: 2,
            t: 4,
            dtype: replayssm::DType::F16,
        };
        let p = PreparedCase::new(&o, &case).unwrap_or_else(|e| panic!("{k}: {e:?}"));
        p.run_once().unwrap_or_else(|e| panic!("{k}: {e}"));
    }
}

#[test]
fn a_case_over_the_emulated_limit_is_skipped_with_its_size() {
    let o = BenchOptions {
        backend: Backend::Emulated,
        emulated_max_bytes: 1 << 20,
        ..BenchOptions::default()
    };
    let case = replayssm_tools::bench::Case {
        kernel: Kernel::F,
        shape: MODEL_SHAPES[1],
        batch: 8,
        t: 4,
        dtype: replayssm::DType::BF16,
    };
    match PreparedCase::new(&o, &case) {
        Err(Outcome::Skipped(why)) => assert!(why.contains("GiB"), "{why}"),
        Err(other) => panic!("{other:?}"),
        Ok(_) => panic!("a 4.8 GiB case ran under a 1 MiB limit"),
    }
}

#[test]
fn the_harness_times_every_kernel_on_the_gpu() {
    if !replayssm_tools::testing::gpu_available("the_harness_times_every_kernel_on_the_gpu") {
        return;
    }
    let o = BenchOptions {
        backend: Backend::Cuda,
        shapes: vec![TINY_KDA_SHAPE, MODEL_SHAPES[0]],
        batches: vec![1, 64],
        windows: vec![4],
        timing: TimingOptions {
            samples: 10,
            warmup_ms: 5.0,
            ..TimingOptions::default()
        },
        ..BenchOptions::default()
    };
    let rep = run(&o, &mut |_, _, _| {}).unwrap();
    let bw = rep.copy_bandwidth.expect("copy bandwidth measured");
    assert!(bw.is_finite() && bw > 1e10, "copy bandwidth {bw} B/s");
    let rows = rep.rows();
    for r in &rows {
        assert!(r.status == "timed" || r.status == "derived", "{r:?}");
        let us = r.median_us.unwrap();
        assert!(us.is_finite() && us > 0.0, "{r:?}");
        // Model shapes only: the tiny shape's floor is far below any launch's latency. Above
        // ~100 % would mean the floor model or the L2 rotation is wrong.
        if r.shape != TINY_KDA_SHAPE.name {
            let p = r.percent_of_floor.unwrap();
            assert!(p > 0.0 && p < 130.0, "percent of floor {p}: {r:?}");
        }
    }
    assert!(rows.iter().any(|r| r.graph == Some(true)), "B = 1 cases replay a graph");
    assert!(rows
        .iter()
        .any(|r| r.kernel == "V+F step" && r.ratio_vs_baseline.is_some()));
    assert!(rows
        .iter()
        .any(|r| r.kernel == "VF step" && r.ratio_vs_baseline.is_some()));
    assert!(rows
        .iter()
        .any(|r| r.kernel == "D-cycle" && r.ratio_vs_baseline.is_some()));
    assert!(rows
        .iter()
        .any(|r| r.kernel == "VB-L16 step" && r.ratio_vs_baseline.is_some()));
    println!("{}", rep.table());
}
