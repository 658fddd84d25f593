//! `replayssm`: build facts, the demo (main job), case-file checks and case generation.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, Subcommand};
use replayssm::backend::Backend;
use replayssm::numerics::{compare, Tolerance};
use replayssm::workload::{RecurrentData, WorkloadSpec};
use replayssm::{build_info, case, cuda, reference, ActBuffer, DType, HeadDims, RecurrentOutputs, Variant};

#[derive(Parser)]
#[command(
    name = "replayssm",
    version,
    about = "ReplaySSM CUDA kernels: build facts, demo, case checks"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the build (nvcc, archs, backends), GPU usability and the per-kernel resource report.
    Info,
    /// Run kernel R on the best backend present (Cuda, else Emulated) against the f64 reference.
    Demo {
        /// Force a backend instead of the best one present.
        #[arg(long)]
        backend: Option<Backend>,
        #[arg(long, default_value_t = 7)]
        seed: u64,
    },
    /// Run case files (replayssm-case/1) and compare with their expected tensors.
    Check {
        #[arg(required = true)]
        files: Vec<PathBuf>,
        #[arg(long, default_value = "emulated")]
        backend: Backend,
    },
    /// Write a case file (recurrent, verify or fold) whose expected tensors come from the f64 reference.
    MakeCase {
        #[arg(long)]
        out: PathBuf,
        /// recurrent, verify or fold.
        #[arg(long, default_value = "recurrent")]
        op: String,
        /// fold only: tokens committed per request (default: random in 0..=window).
        #[arg(long, value_delimiter = ',')]
        accept: Vec<i32>,
        #[arg(long, default_value = "gdn")]
        variant: Variant,
        #[arg(long, default_value = "bf16")]
        dtype: DType,
        /// H,HV,K,V
        #[arg(long, value_delimiter = ',', default_values_t = [2usize, 4, 64, 32])]
        dims: Vec<usize>,
        /// Tokens per request.
        #[arg(long, value_delimiter = ',', default_values_t = [3usize, 5])]
        seqlens: Vec<usize>,
        /// Store precomputed g/beta instead of raw a, b, A_log, dt_bias.
        #[arg(long)]
        precomputed_gate: bool,
        #[arg(long)]
        no_l2norm: bool,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        #[arg(long)]
        atol: f64,
        #[arg(long)]
        rtol: f64,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Info => info(),
        Command::Demo { backend, seed } => demo(backend.unwrap_or_else(Backend::best), seed),
        Command::Check { files, backend } => check(&files, backend),
        Command::MakeCase {
            out,
            op,
            accept,
            variant,
            dtype,
            dims,
            seqlens,
            precomputed_gate,
            no_l2norm,
            seed,
            atol,
            rtol,
        } => {
            if dims.len() != 4 {
                eprintln!("make-case: --dims takes H,HV,K,V (4 values), got {}", dims.len());
                return ExitCode::FAILURE;
            }
            let spec = WorkloadSpec {
                variant,
                dims: HeadDims {
                    h: dims[0],
                    hv: dims[1],
                    k: dims[2],
                    v: dims[3],
                },
                dtype,
                seqlens,
                null_requests: vec![],
                spare_slots: 0,
                raw_gate: !precomputed_gate,
                qk_l2norm: !no_l2norm,
            };
            if let Err(e) = spec.dims.validate() {
                eprintln!("make-case: {e}");
                return ExitCode::FAILURE;
            }
            let Some(op) = case::Op::parse(&op) else {
                eprintln!("make-case: unknown op '{op}' (expected recurrent, verify or fold)");
                return ExitCode::FAILURE;
            };
            let data = RecurrentData::random(&spec, seed);
            let accept: Option<Vec<i32>> = match op {
                case::Op::Fold if accept.is_empty() => Some(
                    data.cu_seqlens
                        .windows(2)
                        .enumerate()
                        .map(|(i, w)| ((seed as usize * 7 + i * 3) % (w[1] - w[0] + 1) as usize) as i32)
                        .collect(),
                ),
                case::Op::Fold => Some(accept),
                _ => None,
            };
            match case::write_case(&out, op, &data, accept.as_deref(), Tolerance { atol, rtol }) {
                Ok(()) => {
                    println!("wrote {}", out.display());
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("make-case: {}: {e}", out.display());
                    ExitCode::FAILURE
                }
            }
        }
    }
}

fn info() -> ExitCode {
    println!("replayssm {}", env!("CARGO_PKG_VERSION"));
    println!(
        "backends compiled in: reference, emulated{}",
        if build_info::CUDA_COMPILED { ", cuda" } else { "" }
    );
    if build_info::CUDA_COMPILED {
        println!("nvcc: {}", build_info::NVCC_VERSION);
        println!("archs: SASS sm_{{{}}} + compute_90 PTX", build_info::CUDA_ARCHS);
    } else {
        println!("nvcc: not found at build time (emulated backend only)");
    }
    match cuda::device() {
        Ok(d) => println!(
            "gpu: usable: {} (sm_{}{}), {} device(s), runtime {}, driver {}",
            d.name, d.compute_capability.0, d.compute_capability.1, d.count, d.runtime_version, d.driver_version
        ),
        Err(why) => println!("gpu: not usable: {why}"),
    }
    let res = build_info::kernel_resources();
    if res.is_empty() {
        println!("kernel resources: none (no CUDA build)");
    } else {
        println!("kernel resources (ptxas -v):");
        println!(
            "  {:<7} {:>5} {:>6} {:>8} {:>8}  kernel",
            "arch", "regs", "stack", "spill_st", "spill_ld"
        );
        for r in res {
            println!(
                "  {:<7} {:>5} {:>6} {:>8} {:>8}  {}",
                r.arch, r.registers, r.stack_bytes, r.spill_stores, r.spill_loads, r.kernel
            );
        }
    }
    ExitCode::SUCCESS
}

/// A small hybrid-model slice: several linear-attention layers, GQA, a batch of requests with
/// a verify-sized window each, through kernel R with per-step snapshots (what ReplaySSM
/// replaces), judged against the f64 reference.
fn demo(backend: Backend, seed: u64) -> ExitCode {
    if let Err(why) = backend.availability() {
        eprintln!("demo: backend {backend} is not available: {why}");
        return ExitCode::FAILURE;
    }
    let dims = HeadDims {
        h: 4,
        hv: 8,
        k: 128,
        v: 128,
    };
    let (layers, batch, window) = (4usize, 8usize, 4usize);
    let dtype = DType::BF16;
    let out_tol = Tolerance { atol: 1e-4, rtol: 8e-3 };
    let state_tol = Tolerance { atol: 1e-6, rtol: 1e-5 };
    println!("replayssm demo: kernel R (recurrent baseline with snapshots) on the {backend} backend");
    if backend != Backend::Cuda {
        match cuda::device() {
            Ok(_) => {}
            Err(why) => println!("  (no GPU: {why})"),
        }
    }
    println!(
        "  {layers} layers (GDN, KDA alternating), B={batch} requests x T={window} tokens, H={} HV={} K={} V={}, {dtype} activations, f32 checkpoint",
        dims.h, dims.hv, dims.k, dims.v
    );
    let mut all_ok = true;
    let mut worst = (0f64, 0f64);
    let started = Instant::now();
    for layer in 0..layers {
        let variant = if layer % 2 == 0 { Variant::Gdn } else { Variant::Kda };
        let spec = WorkloadSpec {
            variant,
            dims,
            dtype,
            seqlens: vec![window; batch],
            null_requests: vec![batch - 1],
            spare_slots: 4,
            raw_gate: true,
            qk_l2norm: true,
        };
        let data = RecurrentData::random(&spec, seed.wrapping_mul(1000).wrapping_add(layer as u64));
        let n = data.num_tokens();
        let mut o = ActBuffer::nan(dtype, n * dims.hv * dims.v);
        let mut state = data.state.clone();
        let mut snaps = vec![f32::NAN; batch * window * dims.state_elems()];
        let t0 = Instant::now();
        let result = replayssm::recurrent(
            backend,
            &data.inputs(),
            &mut RecurrentOutputs {
                o: o.dense_mut(n, dims.hv * dims.v),
                state: &mut state,
                write_state: true,
                snapshots: Some(&mut snaps),
            },
        );
        let elapsed = t0.elapsed();
        if let Err(e) = result {
            eprintln!("  layer {layer}: {e}");
            return ExitCode::FAILURE;
        }
        let f64ref = reference::recurrent::<f64>(&data.inputs(), &data.state);
        let o_cmp = compare(&o.to_f32(), &f64ref.o, out_tol);
        let per_slot = dims.state_elems();
        let mut expected: Vec<f64> = data.state.iter().map(|&x| x as f64).collect();
        for (r, s) in f64ref.final_state.iter().enumerate() {
            if let Some(s) = s {
                let slot = data.slots[r] as usize;
                expected[slot * per_slot..(slot + 1) * per_slot].copy_from_slice(s);
            }
        }
        let s_cmp = compare(&state, &expected, state_tol);
        let ok = o_cmp.passed() && s_cmp.passed();
        all_ok &= ok;
        worst = (worst.0.max(o_cmp.max_abs_err), worst.1.max(s_cmp.max_abs_err));
        println!(
            "  layer {layer} ({variant}): outputs max |err| {:.3e}, checkpoint max |err| {:.3e} vs f64 -> {} ({:.1} ms)",
            o_cmp.max_abs_err,
            s_cmp.max_abs_err,
            if ok { "pass" } else { "FAIL" },
            elapsed.as_secs_f64() * 1e3
        );
    }
    println!(
        "result: backend={backend} largest error vs f64: outputs {:.3e} (bf16 output rounding; tol {:.0e}+{:.0e}|r|), checkpoint {:.3e} (tol {:.0e}+{:.0e}|r|): {} in {:.2} s",
        worst.0,
        out_tol.atol,
        out_tol.rtol,
        worst.1,
        state_tol.atol,
        state_tol.rtol,
        if all_ok { "PASS" } else { "FAIL" },
        started.elapsed().as_secs_f64()
    );
    if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn check(files: &[PathBuf], backend: Backend) -> ExitCode {
    if let Err(why) = backend.availability() {
        eprintln!("check: backend {backend} is not available: {why}");
        return ExitCode::FAILURE;
    }
    let mut failed = 0;
    for f in files {
        match case::load(f).and_then(|c| case::run(&c, backend).map(|r| (c, r))) {
            Ok((c, r)) => {
                let verdict = if r.passed() { "PASS" } else { "FAIL" };
                println!(
                    "{verdict} {} op={} backend={backend} max_err={:.3e} (o: {}; state_out: {}; atol={:e} rtol={:e})",
                    f.display(),
                    c.op.name(),
                    r.max_err(),
                    r.o,
                    r.state_out.map_or("none".to_string(), |c| c.to_string()),
                    c.tolerance.atol,
                    c.tolerance.rtol
                );
                failed += usize::from(!r.passed());
            }
            Err(e) => {
                println!("ERROR {e}");
                failed += 1;
            }
        }
    }
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        eprintln!("check: {failed} of {} case(s) failed", files.len());
        ExitCode::FAILURE
    }
}
