//! `replayssm`: build facts, the demo (main job), case-file checks and case generation.
//!
//! Every line for stdout goes through `outln!` ([`replayssm_tools::output`]): a closed or full
//! stdout ends the run with one line on stderr and exit code 1, not a panic. Every numeric flag
//! is parsed by a [`replayssm_tools::ranges`] parser and states its range in its help.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use replayssm::backend::Backend;
use replayssm::numerics::Tolerance;
use replayssm::{build_info, cuda, AcceptedPaths, DType, HeadDims, Variant};
use replayssm_tools::case;
use replayssm_tools::case::CaseKind;
use replayssm_tools::output;
use replayssm_tools::ranges;
use replayssm_tools::workload::{RecurrentData, TreeShape, WorkloadSpec};
use replayssm_tools::{errln, out, outln};

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
    /// Predict percent of the bytes floor for every kernel implementation from this build's
    /// compiled sm_90 code (the executable performance model; bench/README.md): K = V = 128, bf16,
    /// GDN and KDA, B in {1, 64, 128}, T in {4, 8}, and the step ratios. Predictions, not
    /// measurements.
    Model {
        /// Print how one implementation was counted instead of the table: its hot blocks with
        /// their weights and every dependent round trip, e.g. `--explain F/default`.
        #[arg(long, value_name = "CASE/IMPL")]
        explain: Option<String>,
        /// Write the model's choices into this tuning table (created if missing; its measured
        /// entries are kept), e.g. bench/autotune/h200.json.
        #[arg(long, value_name = "PATH", conflicts_with = "explain")]
        write_table: Option<std::path::PathBuf>,
        /// The point `--explain` counts at: shape, batch, window.
        #[arg(long, default_value = "Qwen3.5-122B")]
        shape: String,
        #[arg(long, default_value_t = 128)]
        batch: usize,
        #[arg(long, default_value_t = 4)]
        window: usize,
    },
    /// Kernel R vs the f64 reference, then a simulated speculative-decoding run (ReplaySSM vs the
    /// recurrent baseline) on the best backend present (Cuda, else Emulated).
    Demo {
        /// Force a backend instead of the best one present.
        #[arg(long)]
        backend: Option<Backend>,
        /// Any seed, 0..=18446744073709551615.
        #[arg(long, default_value_t = 7, value_parser = ranges::SEED)]
        seed: u64,
        /// Steps of the simulation (speculative-decoding steps, or decode tokens per request),
        /// 1..=1000.
        #[arg(long, default_value_t = 200, value_parser = ranges::DEMO_STEPS)]
        steps: usize,
        /// spec: ReplaySSM verify + fold vs the recurrent verify; decode: buffered decode (kernel
        /// D) vs the recurrent decode; buffered: the buffered speculative verify (kernel VB) vs
        /// the recurrent verify.
        #[arg(long, value_enum, default_value_t = DemoMode::Spec)]
        mode: DemoMode,
        /// --mode decode: the cache length L, 1..=65536; --mode buffered: 2 T..=64 (T = 4), else
        /// the gates refuse it with their rule.
        #[arg(long, default_value_t = 16, value_parser = ranges::CACHE_LEN)]
        cache_len: usize,
    },
    /// Run case files (replayssm-case/1) and compare with their expected tensors.
    Check {
        #[arg(required = true)]
        files: Vec<PathBuf>,
        #[arg(long, default_value = "emulated")]
        backend: Backend,
    },
    /// The bytes floor of every kernel (design §8) for the model shapes of the performance targets,
    /// B in {1..512}, T (L for D) in {2, 4, 6, 8}: bytes and the time they take at `--bandwidth`.
    Floor {
        /// Copy bandwidth in TB/s to express floors as time, 0.01..=100 TB/s (measure it on the
        /// device; the H200 copies about 4.3 TB/s device to device).
        #[arg(long, default_value_t = 4.3, value_parser = ranges::BANDWIDTH_TBS)]
        bandwidth: f64,
        /// One JSON object per line instead of the table.
        #[arg(long)]
        json: bool,
        /// bf16, f16 or f32 activations.
        #[arg(long, default_value = "bf16")]
        dtype: DType,
    },
    /// Time every kernel over the model shapes, batches and windows of the performance targets:
    /// CUDA events after warm-up (median; graph replay for short kernels), percent of the bytes
    /// floor at the copy bandwidth measured in the same run, ratios against the recurrent
    /// baseline. Table on stdout, progress on stderr, `--json` results file, `--plot` PNG.
    /// Without a GPU (`--backend emulated`) every case runs once, checked, untimed.
    Bench(replayssm_tools::bench::cli::BenchArgs),
    /// Check engine flags against the capability gates (design §5): exit 0 and print the resolved
    /// configuration when accepted (warnings on stderr), exit 2 with the reason when refused.
    Validate {
        /// The engine's server flags, as SGLang spells them (e.g. --enable-linear-replayssm-spec
        /// --speculative-algorithm EAGLE); parsed by the library (`replayssm::engine_args`).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
        flags: Vec<String>,
    },
    /// Write a case file (recurrent, verify, fold, decode, verify_tree, fold_tree,
    /// verify_fold_steps or verify_buffered_steps) whose expected tensors come from the f64
    /// reference.
    MakeCase(MakeCaseArgs),
}

/// What `demo` compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum DemoMode {
    /// ReplaySSM verify + fold vs the recurrent verify.
    Spec,
    /// Buffered decode (kernel D) vs the recurrent decode.
    Decode,
    /// The buffered speculative verify (kernel VB, commits and flushes) vs the recurrent verify.
    Buffered,
}

/// Arguments of `make-case`; every one is checked (value and limit in the message) before
/// anything is allocated from it.
#[derive(clap::Args)]
struct MakeCaseArgs {
    #[arg(long)]
    out: PathBuf,
    /// recurrent, verify, fold, decode, verify_tree, fold_tree, verify_fold_steps or
    /// verify_buffered_steps.
    #[arg(long, value_enum, default_value_t = case::Op::Recurrent)]
    op: case::Op,
    /// fold: tokens committed per request; the steps ops: per step and request, step 0's
    /// requests first (S x R values). Each 0..=16 and at most its request's tokens. Default:
    /// random in 0..=window.
    #[arg(long, value_delimiter = ',', value_parser = ranges::ACCEPT)]
    accept: Vec<i32>,
    /// verify_fold_steps and verify_buffered_steps only: steps S, 1..=64 (default 3).
    #[arg(long, value_parser = ranges::CASE_STEPS)]
    steps: Option<usize>,
    /// verify_tree, fold_tree: draft tree shape (chain, star, binary, topk<K>, random).
    #[arg(long, default_value = "topk2")]
    tree: TreeShape,
    /// fold_tree only: the deepest accepted node (window position) per request, -1 for none,
    /// each -1..=15 and below its request's tokens; the commit replays its root path (default: a
    /// random node or none).
    #[arg(long, value_delimiter = ',', allow_negative_numbers = true, value_parser = ranges::ACCEPT_NODE)]
    accept_node: Vec<i32>,
    /// decode: the buffered-decode cache length L, 1..=65536; verify_buffered_steps: the buffered
    /// speculative ring's, 2 T..=64 (T the longest --seqlens).
    #[arg(long, default_value_t = 4, value_parser = ranges::CACHE_LEN)]
    cache_len: usize,
    #[arg(long, default_value = "gdn")]
    variant: Variant,
    #[arg(long, default_value = "bf16")]
    dtype: DType,
    /// H,HV,K,V, each 1..=65536 (HV a multiple of H and at most 65535).
    #[arg(long, value_delimiter = ',', default_values_t = [2usize, 4, 64, 32], value_parser = ranges::HEAD_DIM)]
    dims: Vec<usize>,
    /// Tokens per request, each 0..=1048576 (1..=65535 requests, at most 1048576 tokens in all).
    #[arg(long, value_delimiter = ',', default_values_t = [3usize, 5], value_parser = ranges::SEQLEN)]
    seqlens: Vec<usize>,
    /// Store precomputed g/beta instead of raw a, b, A_log, dt_bias.
    #[arg(long)]
    precomputed_gate: bool,
    /// The raw gate's safe-gate bound (finite and negative; Kimi's KDA): g = lower_bound *
    /// sigmoid(exp(A_log) (a + dt_bias)). Absent: the softplus gate.
    #[arg(long, allow_hyphen_values = true, conflicts_with = "precomputed_gate")]
    lower_bound: Option<f32>,
    #[arg(long)]
    no_l2norm: bool,
    /// Any seed, 0..=18446744073709551615.
    #[arg(long, default_value_t = 1, value_parser = ranges::SEED)]
    seed: u64,
    /// Absolute tolerance the case file records, 0..=1.
    #[arg(long, value_parser = ranges::TOLERANCE)]
    atol: f64,
    /// Relative tolerance the case file records, 0..=1.
    #[arg(long, value_parser = ranges::TOLERANCE)]
    rtol: f64,
}

fn validate(args: &[String]) -> output::Result<ExitCode> {
    use replayssm::config::resolve;
    let flags = match replayssm::engine_args::parse_engine_args(args) {
        Ok(f) => f,
        Err(e) => {
            errln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    match resolve(&flags) {
        Ok(cfg) => {
            for w in &cfg.warnings {
                errln!("warning: {w}");
            }
            outln!("{cfg}")?;
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            errln!("error: {e}");
            Ok(ExitCode::from(2))
        }
    }
}

/// `x` TB/s for a header: at most 4 decimals, no trailing zeros (`4.3`, `0.01`, `100`).
fn tbs_text(x: f64) -> String {
    let s = format!("{x:.4}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn floor(bandwidth_tbs: f64, json: bool, dtype: DType) -> output::Result<ExitCode> {
    use replayssm_tools::floor::{floor_us, kernel_floors, step_ratio, BATCHES, MODEL_SHAPES, WINDOWS};
    // The parser keeps the flag in its range; checked again for a caller that bypasses it.
    let (lo, hi) = (ranges::BANDWIDTH_TBS.lo, ranges::BANDWIDTH_TBS.hi);
    if !(lo..=hi).contains(&bandwidth_tbs) {
        errln!(
            "floor: --bandwidth {bandwidth_tbs:e} is outside {}",
            ranges::BANDWIDTH_TBS.text()
        );
        return Ok(ExitCode::from(2));
    }
    let bw = bandwidth_tbs * 1e12;
    if !json {
        outln!(
            "bytes floor per launch (F: all layers; step-*: a whole speculative step, all layers, every draft token accepted; step-VB-L<l>: the buffered step with cache length l, its flush amortised over the cycle; others: one layer), {} activations, at {} TB/s; x: step-R bytes / this step's:",
            dtype.name(),
            tbs_text(bandwidth_tbs)
        )?;
        outln!(
            "  {:<17} {:>4} {:>2}  {:<10} {:>14} {:>10} {:>6}",
            "shape",
            "B",
            "T",
            "kernel",
            "bytes",
            "floor_us",
            "x"
        )?;
    }
    for shape in &MODEL_SHAPES {
        for &b in &BATCHES {
            for &t in &WINDOWS {
                let floors = kernel_floors(shape, dtype, b, t);
                for f in &floors {
                    let us = floor_us(f.bytes, bw);
                    let ratio = step_ratio(&floors, f);
                    if json {
                        let ratio = ratio.map_or(String::new(), |x| format!(",\"ratio_vs_step_r\":{x:.3}"));
                        outln!(
                            "{{\"shape\":\"{}\",\"layers\":{},\"B\":{b},\"T\":{t},\"kernel\":\"{}\",\"bytes\":{:.0},\"floor_us\":{us:.3},\"bandwidth_tbs\":{bandwidth_tbs}{ratio}}}",
                            shape.name, shape.layers, f.kernel, f.bytes
                        )?;
                    } else {
                        let ratio = ratio.map_or(String::new(), |x| format!("{x:.2}"));
                        outln!(
                            "  {:<17} {b:>4} {t:>2}  {:<10} {:>14.0} {us:>10.2} {ratio:>6}",
                            shape.name,
                            f.kernel,
                            f.bytes
                        )?;
                    }
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// clap's help and version through `outln!` like every other output (`Error::exit` drops a
/// failed write to stdout and exits 0); its usage errors on stderr, best effort, exit 2.
fn parse_failure(e: clap::Error) -> output::Result<ExitCode> {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let text = e.render();
            if std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none() {
                out!("{}", text.ansi())?;
            } else {
                out!("{text}")?;
            }
            Ok(ExitCode::SUCCESS)
        }
        _ => {
            let _ = e.print();
            Ok(ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2)))
        }
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return output::finish(parse_failure(e)),
    };
    output::finish(run(cli))
}

/// Runs the subcommand; `Err` when stdout could not be written.
fn run(cli: Cli) -> output::Result<ExitCode> {
    match cli.command {
        Command::Info => info(),
        Command::Model {
            explain,
            write_table,
            shape,
            batch,
            window,
        } => match write_table {
            Some(path) => model_table(&path),
            None => model(explain.as_deref(), &shape, batch, window),
        },
        Command::Demo {
            backend,
            seed,
            steps,
            mode,
            cache_len,
        } => demo(backend.unwrap_or_else(Backend::best), seed, steps, mode, cache_len),
        Command::Check { files, backend } => check(&files, backend),
        Command::Validate { flags } => validate(&flags),
        Command::Bench(a) => replayssm_tools::bench::cli::main(&a),
        Command::Floor { bandwidth, json, dtype } => floor(bandwidth, json, dtype),
        Command::MakeCase(a) => match make_case(&a) {
            Ok(()) => {
                outln!("wrote {}", a.out.display())?;
                Ok(ExitCode::SUCCESS)
            }
            Err(e) => {
                errln!("make-case: {e}");
                Ok(ExitCode::FAILURE)
            }
        },
    }
}

fn model(explain: Option<&str>, shape: &str, batch: usize, window: usize) -> output::Result<ExitCode> {
    use replayssm_tools::floor::MODEL_SHAPES;
    use replayssm_tools::model::{self, report, Point, H200, KERNELS};
    let functions = match model::functions_of_this_build() {
        Ok(f) => f,
        Err(e) => {
            errln!("model: {e}");
            return Ok(ExitCode::FAILURE);
        }
    };
    let Some(which) = explain else {
        let grid = report::grid(&functions, &H200);
        outln!("{}", report::render(&H200, &grid))?;
        return Ok(ExitCode::SUCCESS);
    };
    let names = |v: Vec<String>| v.join(", ");
    let Some(s) = MODEL_SHAPES.iter().copied().find(|s| s.name == shape) else {
        errln!(
            "model: --shape {shape:?} is not one of {}",
            names(MODEL_SHAPES.iter().map(|s| s.name.to_string()).collect())
        );
        return Ok(ExitCode::from(2));
    };
    let known = || {
        names(
            KERNELS
                .iter()
                .map(|k| format!("{}/{}", k.case, k.implementation))
                .collect(),
        )
    };
    let Some((case, imp)) = which.split_once('/') else {
        errln!("model: --explain {which:?} is not CASE/IMPL; one of {}", known());
        return Ok(ExitCode::from(2));
    };
    if !(1..=replayssm::spec::MAX_VERIFY_WINDOW).contains(&window) || !(1..=65_535).contains(&batch) {
        errln!(
            "model: --window {window} must be in 1..={} and --batch {batch} in 1..=65535",
            replayssm::spec::MAX_VERIFY_WINDOW
        );
        return Ok(ExitCode::from(2));
    }
    let p = Point {
        shape: s,
        act: replayssm::dtype::DType::BF16,
        batch,
        t: window,
    };
    match model::explain(&functions, &p, case, imp) {
        Some(lines) => {
            for l in lines {
                outln!("{l}")?;
            }
            Ok(ExitCode::SUCCESS)
        }
        None => {
            errln!(
                "model: --explain {which:?}: no such implementation in this build; one of {}",
                known()
            );
            Ok(ExitCode::from(2))
        }
    }
}

/// `replayssm model --write-table PATH`: the model's choices merged into the table at PATH.
fn model_table(path: &std::path::Path) -> output::Result<ExitCode> {
    use replayssm::tuning::{read_table_file, Table, TABLE_FORMAT};
    use replayssm_tools::model::{self, table, H200};
    let functions = match model::functions_of_this_build() {
        Ok(f) => f,
        Err(e) => {
            errln!("model: {e}");
            return Ok(ExitCode::FAILURE);
        }
    };
    let origin = path.display().to_string();
    let mut t = if path.exists() {
        match read_table_file(path, &origin).and_then(|text| Table::parse(&text, &origin)) {
            Ok(t) => t,
            Err(e) => {
                errln!("model: --write-table: {e}");
                return Ok(ExitCode::from(2));
            }
        }
    } else {
        Table {
            format: TABLE_FORMAT.to_string(),
            device: Some("NVIDIA H200".to_string()),
            source: String::new(),
            command: None,
            date: None,
            entries: vec![],
            checked: vec![],
        }
    };
    // The model's previous entries go: it writes them afresh from this build's code.
    t.entries
        .retain(|e| e.source != Some(replayssm::tuning::EntrySource::Model));
    let set = table::write_modelled(&functions, &H200, &mut t);
    t.source = format!(
        "{} entries `measured` on a device, {} `model`: ranked first by the executable model (replayssm \
         model --write-table, sm_90 SASS of this build against the H200; predictions, not measurements). A \
         bucket without an entry runs the default.",
        t.entries
            .iter()
            .filter(|e| e.source == Some(replayssm::tuning::EntrySource::Measured))
            .count(),
        t.entries
            .iter()
            .filter(|e| e.source == Some(replayssm::tuning::EntrySource::Model))
            .count()
    );
    if !t
        .entries
        .iter()
        .any(|e| e.source == Some(replayssm::tuning::EntrySource::Measured))
    {
        t.command = Some(format!("replayssm model --write-table {origin}"));
    }
    let text = match serde_json::to_string_pretty(&t) {
        Ok(s) => s + "\n",
        Err(e) => {
            errln!("model: --write-table: {e}");
            return Ok(ExitCode::FAILURE);
        }
    };
    if let Err(e) = std::fs::write(path, text) {
        errln!("model: --write-table: writing {origin}: {e}");
        return Ok(ExitCode::FAILURE);
    }
    outln!("model: {set} modelled entries written to {origin}")?;
    Ok(ExitCode::SUCCESS)
}

/// Most requests `make-case` writes (the launch limit on B).
const MAX_MAKE_CASE_REQUESTS: usize = 65_535;
/// Most tokens (all requests) `make-case` writes.
const MAX_MAKE_CASE_TOKENS: usize = ranges::MAX_CASE_TOKENS;
/// Steps of a `verify_fold_steps` case when `--steps` is not given.
const DEFAULT_MAKE_CASE_STEPS: usize = 3;
/// Most memory `make-case` may need, estimated from --dims and --seqlens: the f64 reference keeps
/// a state snapshot per token, so a long case grows as tokens x HV x V x K x 8 bytes.
const MAX_MAKE_CASE_BYTES: u128 = 1 << 30;

/// Estimated peak bytes of generating a case: inputs (f32 and their activations), the pool and
/// the f64 reference with one state snapshot per token.
fn make_case_bytes(d: HeadDims, variant: Variant, tokens: usize, requests: usize) -> u128 {
    let (h, hv, k, v) = (d.h as u128, d.hv as u128, d.k as u128, d.v as u128);
    let gw = d.gate_width(variant) as u128;
    let state = hv * v * k;
    let per_token = 2 * h * k + 2 * hv * v + hv * gw + hv;
    let (n, r) = (tokens as u128, requests as u128);
    n * state * 8 + r * state * 16 + n * per_token * 16
}

/// `make-case`: checks every argument, then generates and writes the case.
fn make_case(a: &MakeCaseArgs) -> Result<(), String> {
    let op = a.op;
    let tolerance = Tolerance::new(a.atol, a.rtol).map_err(|e| format!("--{e}"))?;
    if a.dims.len() != 4 {
        return Err(format!("--dims takes H,HV,K,V (4 values), got {}", a.dims.len()));
    }
    let dims = HeadDims {
        h: a.dims[0],
        hv: a.dims[1],
        k: a.dims[2],
        v: a.dims[3],
    };
    dims.validate().map_err(|e| format!("--dims {:?}: {e}", a.dims))?;
    let requests = a.seqlens.len();
    if !(1..=MAX_MAKE_CASE_REQUESTS).contains(&requests) {
        return Err(format!(
            "--seqlens has {requests} requests, expected 1..={MAX_MAKE_CASE_REQUESTS}"
        ));
    }
    // 1 for every op but the steps ops: their tokens are one window.
    let steps = match (op.has_steps(), a.steps) {
        (true, None) => DEFAULT_MAKE_CASE_STEPS,
        (true, Some(s)) if !(1..=case::MAX_CASE_STEPS).contains(&s) => {
            return Err(format!(
                "--steps {s} is outside 1..={} (the steps of one {} case)",
                case::MAX_CASE_STEPS,
                op.name()
            ))
        }
        (true, Some(s)) => s,
        (false, Some(_)) => {
            return Err(format!(
                "--steps is for ops verify_fold_steps and verify_buffered_steps, not {}",
                op.name()
            ))
        }
        (false, None) => 1,
    };
    // Saturating: a sum past usize is over the limit as well.
    let tokens = a.seqlens.iter().fold(0usize, |t, &l| t.saturating_add(l));
    let all_tokens = tokens.saturating_mul(steps);
    if all_tokens > MAX_MAKE_CASE_TOKENS {
        return Err(if steps == 1 {
            format!("--seqlens adds up to {tokens} tokens, over the limit of {MAX_MAKE_CASE_TOKENS}")
        } else {
            format!("--seqlens adds up to {tokens} tokens per step, {all_tokens} over --steps {steps}, over the limit of {MAX_MAKE_CASE_TOKENS}")
        });
    }
    if op.has_steps() {
        if let Some(r) = a.seqlens.iter().position(|&l| l == 0) {
            return Err(format!(
                "--seqlens: request {r} has 0 tokens; op {} verifies at least 1 per request and step",
                op.name()
            ));
        }
    }
    // The kernels the case runs through bound each request's tokens.
    let per_request = match op {
        case::Op::Verify | case::Op::Fold | case::Op::VerifyFoldSteps | case::Op::VerifyBufferedSteps => {
            Some((replayssm::spec::MAX_VERIFY_WINDOW, "the verify window"))
        }
        case::Op::VerifyTree | case::Op::FoldTree => {
            Some((replayssm::tree::MAX_TREE_NODES, "the tree kernels' node limit"))
        }
        _ => None,
    };
    if let Some((limit, what)) = per_request {
        if let Some((r, &l)) = a.seqlens.iter().enumerate().find(|(_, &l)| l > limit) {
            return Err(format!(
                "--seqlens: request {r} has {l} tokens; op {} takes at most {limit} per request ({what})",
                op.name()
            ));
        }
    }
    let bytes = make_case_bytes(dims, a.variant, all_tokens, requests);
    if bytes > MAX_MAKE_CASE_BYTES {
        return Err(format!(
            "--seqlens {tokens} tokens with --dims {:?} need about {bytes} bytes (the f64 reference keeps a HV x V x K state per token), over the limit of {MAX_MAKE_CASE_BYTES}",
            a.dims
        ));
    }
    if op == case::Op::Decode && !(1..=replayssm::limits::MAX_CACHE_LEN).contains(&a.cache_len) {
        return Err(format!(
            "--cache-len {} is outside 1..={}",
            a.cache_len,
            replayssm::limits::MAX_CACHE_LEN
        ));
    }
    if op == case::Op::VerifyBufferedSteps {
        // The gates' rule for the buffered ring (2 T..=64), in their words.
        let t = a.seqlens.iter().copied().max().unwrap_or(1);
        if let Some(e) = replayssm::limits::buffered_cache_len_outside(a.cache_len as i64, t as i64) {
            return Err(format!("--cache-len: {e}"));
        }
    }
    let accept: Vec<i32> = if a.accept.is_empty() {
        a.seqlens
            .iter()
            .enumerate()
            .map(|(i, &l)| ((a.seed as usize).wrapping_mul(7).wrapping_add(i * 3) % (l + 1)) as i32)
            .collect()
    } else if op == case::Op::Fold {
        if a.accept.len() != requests {
            return Err(format!(
                "--accept has {} values for {requests} requests (--seqlens)",
                a.accept.len()
            ));
        }
        for (r, (&x, &l)) in a.accept.iter().zip(&a.seqlens).enumerate() {
            if x < 0 || x as usize > l {
                return Err(format!(
                    "--accept: request {r} accepts {x}, outside 0..={l} (its --seqlens)"
                ));
            }
        }
        a.accept.clone()
    } else if op.has_steps() {
        if a.accept.len() != steps * requests {
            return Err(format!(
                "--accept has {} values for --steps {steps} x {requests} requests (--seqlens): give step 0's requests first",
                a.accept.len()
            ));
        }
        for (i, &x) in a.accept.iter().enumerate() {
            let (s, r) = (i / requests, i % requests);
            let l = a.seqlens[r];
            if x < 0 || x as usize > l {
                return Err(format!(
                    "--accept: step {s} request {r} accepts {x}, outside 0..={l} (its --seqlens)"
                ));
            }
        }
        a.accept.clone()
    } else {
        return Err(format!(
            "--accept is for op fold, not {} (and for verify_fold_steps, per step)",
            op.name()
        ));
    };
    if !a.accept_node.is_empty() {
        if op != case::Op::FoldTree {
            return Err(format!("--accept-node is for op fold_tree, not {}", op.name()));
        }
        if a.accept_node.len() != requests {
            return Err(format!(
                "--accept-node has {} values for {requests} requests (--seqlens)",
                a.accept_node.len()
            ));
        }
        for (r, (&x, &l)) in a.accept_node.iter().zip(&a.seqlens).enumerate() {
            if x < -1 || x >= l as i32 {
                return Err(format!(
                    "--accept-node: request {r} accepts node {x}, outside -1..={} (-1 for none)",
                    l as i64 - 1
                ));
            }
        }
    }
    let spec = WorkloadSpec {
        variant: a.variant,
        dims,
        dtype: a.dtype,
        seqlens: a.seqlens.clone(),
        null_requests: vec![],
        spare_slots: 0,
        raw_gate: !a.precomputed_gate,
        gate_form: match a.lower_bound {
            None => replayssm::GateForm::Softplus,
            Some(_) if a.variant == Variant::Gdn => {
                return Err("--lower-bound: the safe gate is KDA's (--variant kda)".into())
            }
            Some(b) => replayssm::LowerBound::new(b)
                .map(replayssm::GateForm::Bounded)
                .map_err(|e| format!("--lower-bound: {e}"))?,
        },
        qk_l2norm: !a.no_l2norm,
    };
    let data = RecurrentData::random(&spec, a.seed);
    // Only tree ops build a tree, so no other op can fail on (or talk about) tree limits.
    let mut rng = ChaCha8Rng::seed_from_u64(a.seed ^ 0x7e3e);
    let draft = match op {
        case::Op::VerifyTree | case::Op::FoldTree => Some(
            a.tree
                .tree(&spec.seqlens, &mut rng)
                .map_err(|e| format!("--tree {:?}: {e}", a.tree))?,
        ),
        _ => None,
    };
    let accepted = match (&draft, op) {
        (Some(draft), case::Op::FoldTree) => {
            let nodes: Vec<Option<usize>> = if a.accept_node.is_empty() {
                spec.seqlens
                    .iter()
                    .map(|&n| rng.gen_range(-1..n as i64))
                    .map(|x| usize::try_from(x).ok())
                    .collect()
            } else {
                a.accept_node.iter().map(|&x| usize::try_from(x).ok()).collect()
            };
            Some(AcceptedPaths::from_nodes(draft, &nodes).map_err(|e| format!("--accept-node: {e}"))?)
        }
        _ => None,
    };
    // verify_fold_steps: the windows of steps 1.. (fresh tokens, step 0's gate parameters) and
    // the accept lengths of every step.
    let (rest, step_accept) = if op.has_steps() {
        let rest: Vec<RecurrentData> = (1..steps as u64)
            .map(|s| {
                let mut w = RecurrentData::random(&spec, a.seed ^ s.wrapping_mul(0x9e37_79b9_7f4a_7c15));
                if let (
                    replayssm_tools::workload::GateData::Raw { a_log, dt_bias, .. },
                    replayssm_tools::workload::GateData::Raw {
                        a_log: la, dt_bias: lb, ..
                    },
                ) = (&data.gate, &mut w.gate)
                {
                    la.clone_from(a_log);
                    lb.clone_from(dt_bias);
                }
                w
            })
            .collect();
        let step_accept: Vec<i32> = if a.accept.is_empty() {
            (0..steps)
                .flat_map(|_| spec.seqlens.iter())
                .map(|&l| rng.gen_range(0..=l as i32))
                .collect()
        } else {
            a.accept.clone()
        };
        (rest, step_accept)
    } else {
        (vec![], vec![])
    };
    let kind = match (op, &draft, &accepted) {
        (case::Op::Recurrent, ..) => CaseKind::Recurrent,
        (case::Op::Verify, ..) => CaseKind::Verify,
        (case::Op::Fold, ..) => CaseKind::Fold { accept: &accept },
        (case::Op::Decode, ..) => CaseKind::Decode { cache_len: a.cache_len },
        (case::Op::VerifyTree, Some(tree), _) => CaseKind::VerifyTree { tree },
        (case::Op::FoldTree, Some(tree), Some(accepted)) => CaseKind::FoldTree { tree, accepted },
        (case::Op::VerifyFoldSteps, ..) => CaseKind::VerifyFoldSteps {
            rest: &rest,
            accept: &step_accept,
        },
        (case::Op::VerifyBufferedSteps, ..) => CaseKind::VerifyBufferedSteps {
            rest: &rest,
            accept: &step_accept,
            cache_len: a.cache_len,
        },
        (case::Op::VerifyTree | case::Op::FoldTree, ..) => unreachable!("tree ops build their tree above"),
    };
    case::write_case(&a.out, kind, &data, tolerance).map_err(|e| format!("{}: {e}", a.out.display()))
}

fn info() -> output::Result<ExitCode> {
    outln!("replayssm {}", env!("CARGO_PKG_VERSION"))?;
    outln!(
        "backends compiled in: reference, emulated{}",
        if build_info::CUDA_COMPILED { ", cuda" } else { "" }
    )?;
    if build_info::CUDA_COMPILED {
        outln!("nvcc: {}", build_info::NVCC_VERSION)?;
        outln!("archs: SASS sm_{{{}}} + compute_90 PTX", build_info::CUDA_ARCHS)?;
    } else {
        outln!("nvcc: not found at build time (emulated backend only)")?;
    }
    match cuda::device() {
        Ok(d) => outln!(
            "gpu: usable: {} (sm_{}{}), {} device(s), runtime {}, driver {}",
            d.name,
            d.compute_capability.0,
            d.compute_capability.1,
            d.count,
            d.runtime_version,
            d.driver_version
        )?,
        Err(why) => outln!("gpu: not usable: {why}")?,
    }
    let res = build_info::kernel_resources();
    if res.is_empty() {
        outln!("kernel resources: none (no CUDA build)")?;
    } else {
        outln!("kernel resources (ptxas -v) and theoretical occupancy on sm_90 (128-thread blocks; V at a 16-token window):")?;
        outln!(
            "  {:<7} {:>5} {:>6} {:>8} {:>8} {:>6} {:>7} {:>9} {:>5}  {:<13}  kernel",
            "arch",
            "regs",
            "stack",
            "spill_st",
            "spill_ld",
            "smem",
            "dynsmem",
            "blocks/SM",
            "occ",
            "limited by"
        )?;
        let occ = replayssm_tools::occupancy::report();
        for r in res {
            let o = occ.iter().find(|(k, _, _)| k == &r);
            let (dyn_smem, blocks, frac, limiter) = match o {
                Some((_, l, o)) => (
                    l.dynamic_smem.to_string(),
                    o.blocks_per_sm.to_string(),
                    format!("{:.0}%", 100.0 * o.fraction),
                    o.limiter,
                ),
                None => ("-".into(), "-".into(), "-".into(), "-"),
            };
            outln!(
                "  {:<7} {:>5} {:>6} {:>8} {:>8} {:>6} {:>7} {:>9} {:>5}  {:<13}  {}",
                r.arch,
                r.registers,
                r.stack_bytes,
                r.spill_stores,
                r.spill_loads,
                r.smem_bytes,
                dyn_smem,
                blocks,
                frac,
                limiter,
                r.kernel
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn demo(backend: Backend, seed: u64, steps: usize, mode: DemoMode, cache_len: usize) -> output::Result<ExitCode> {
    use replayssm_tools::demo::DemoError;
    if let Err(why) = backend.availability() {
        errln!("demo: backend {backend} is not available: {why}");
        return Ok(ExitCode::FAILURE);
    }
    if backend != Backend::Cuda {
        if let Err(why) = cuda::device() {
            outln!("(no GPU: {why})")?;
        }
    }
    let result = match mode {
        DemoMode::Decode => replayssm_tools::demo::run_decode(backend, seed, steps, cache_len),
        DemoMode::Buffered => replayssm_tools::demo::run_buffered(backend, seed, steps, cache_len),
        DemoMode::Spec => replayssm_tools::demo::run(backend, seed, steps),
    };
    match result {
        Ok(true) => Ok(ExitCode::SUCCESS),
        Ok(false) => Ok(ExitCode::FAILURE),
        Err(DemoError::Stdout(e)) => Err(e),
        Err(DemoError::Run(e)) => {
            errln!("demo: {e}");
            Ok(ExitCode::FAILURE)
        }
    }
}

fn check(files: &[PathBuf], backend: Backend) -> output::Result<ExitCode> {
    if let Err(why) = backend.availability() {
        errln!("check: backend {backend} is not available: {why}");
        return Ok(ExitCode::FAILURE);
    }
    let mut failed = 0;
    for f in files {
        match case::load(f).and_then(|c| case::run(&c, backend).map(|r| (c, r))) {
            Ok((c, r)) => {
                let verdict = if r.passed() { "PASS" } else { "FAIL" };
                outln!(
                    "{verdict} {} op={} backend={backend} max_err={:.3e} (o: {}; state_out: {}; atol={:e} rtol={:e})",
                    case::escape_untrusted(&f.display().to_string()),
                    c.op.name(),
                    r.max_err(),
                    r.o,
                    r.state_out.map_or("none".to_string(), |c| c.to_string()),
                    c.tolerance.atol,
                    c.tolerance.rtol
                )?;
                failed += usize::from(!r.passed());
            }
            Err(e) => {
                // Messages quote metadata and tensor names from the file: printed escaped.
                outln!("ERROR {}", case::escape_untrusted(&e.to_string()))?;
                failed += 1;
            }
        }
    }
    if failed == 0 {
        Ok(ExitCode::SUCCESS)
    } else {
        errln!("check: {failed} of {} case(s) failed", files.len());
        Ok(ExitCode::FAILURE)
    }
}
