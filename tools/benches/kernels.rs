//! Criterion benches of kernels R (decode; window with snapshots), V, F (all layers), P, D (flush
//! and non-flush) and the recurrent commit copy, over the four model shapes of the performance
//! targets, through the same harness as `replayssm bench` (tools/src/bench): same buffers, same input
//! sets, same C ABI calls.
//!
//! On a GPU, criterion gets device time: each sample is `iters` launches between two CUDA events
//! (`iter_custom`), so the host's launch path is not what is measured. Grid: B in {1, 64, 128},
//! T = 4 (`cargo bench --bench kernels -- V/` filters as usual).
//!
//! Without a GPU the timing is skipped, with the reason printed, and every kernel runs once per
//! model shape at B = 1, T = 2 on the emulated backend with its status and device error word
//! checked (criterion's test mode, `cargo test --benches`, does the same on a GPU machine with one
//! timed iteration per case).
use criterion::{BenchmarkId, Criterion};
use replayssm::backend::Backend;
use replayssm::DType;
use replayssm_tools::bench::{BenchOptions, Case, Kernel, PreparedCase};
use replayssm_tools::floor::MODEL_SHAPES;

fn cases(batches: &[usize], t: usize) -> Vec<Case> {
    let mut out = vec![];
    for kernel in Kernel::ALL {
        for shape in MODEL_SHAPES {
            for &batch in batches {
                out.push(Case {
                    kernel,
                    shape,
                    batch,
                    t: if kernel.uses_window() { t } else { 1 },
                    dtype: DType::BF16,
                });
            }
        }
    }
    out
}

fn gpu() {
    let o = BenchOptions {
        backend: Backend::Cuda,
        ..BenchOptions::default()
    };
    let mut c = Criterion::default().sample_size(20).configure_from_args();
    for kernel in Kernel::ALL {
        let mut g = c.benchmark_group(kernel.name());
        for case in cases(&[1, 64, 128], 4).into_iter().filter(|c| c.kernel == kernel) {
            let point = format!("B{}_T{}", case.batch, case.t);
            let id = BenchmarkId::new(case.shape.name, &point);
            match PreparedCase::new(&o, &case) {
                Ok(p) => {
                    g.bench_function(id, |b| {
                        b.iter_custom(|iters| p.device_time(iters).expect("timed launches"))
                    });
                }
                Err(outcome) => eprintln!("bench {kernel} {} {point}: not run: {outcome:?}", case.shape.name),
            }
        }
        g.finish();
    }
    c.final_summary();
}

fn emulated(why: &str) {
    eprintln!(
        "benches/kernels: timing skipped: no usable GPU ({why}); running every kernel once per model \
         shape at B=1, T=2 on the emulated backend (status and device error word checked)"
    );
    let o = BenchOptions {
        backend: Backend::Emulated,
        ..BenchOptions::default()
    };
    let mut failed = 0;
    for case in cases(&[1], 2) {
        let name = format!("{} {} B={} T={}", case.kernel, case.shape.name, case.batch, case.t);
        match PreparedCase::new(&o, &case)
            .map_err(|o| format!("{o:?}"))
            .and_then(|p| p.run_once())
        {
            Ok(()) => eprintln!("bench {name}: ran on the emulator (untimed)"),
            Err(e) => {
                eprintln!("bench {name}: FAILED: {e}");
                failed += 1;
            }
        }
    }
    assert_eq!(failed, 0, "{failed} bench case(s) failed on the emulator");
}

fn main() {
    match Backend::Cuda.availability() {
        Ok(()) => gpu(),
        Err(why) => emulated(&why),
    }
}
