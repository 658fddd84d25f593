//! `replayssm bench`: the harness's command line (arguments, progress, table, files).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::{run, shape_by_name, utc_now, BenchOptions, CaseResult, GraphMode, Kernel, Outcome, TimingOptions};
use crate::floor::{BATCHES, WINDOWS};
use crate::output;
use crate::ranges;
use crate::{errln, out, outln};
use replayssm::backend::Backend;
use replayssm::dtype::DType;

/// Arguments of `replayssm bench`.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// cuda or emulated (default: the best present). Emulated runs every case once, untimed.
    #[arg(long)]
    pub backend: Option<Backend>,
    /// Model shapes (Qwen3-Next, Qwen3.5-122B, Qwen3.5-397B-TP4, Kimi-K3-TP8, tiny, tiny-kda);
    /// default: the four model shapes.
    #[arg(long, value_delimiter = ',')]
    pub shapes: Vec<String>,
    /// Batches, each 1..=65535 (default 1,8,32,64,128,256,512).
    #[arg(long, value_delimiter = ',', value_parser = ranges::BATCH)]
    pub batches: Vec<usize>,
    /// Windows T, and cache lengths L for D, each 2..=16 (default 2,4,6,8).
    #[arg(long, value_delimiter = ',', value_parser = ranges::WINDOW)]
    pub windows: Vec<usize>,
    /// Kernels: R-decode, R-window, V, VF, F, P, D-nonflush, D-flush, VT, FT, copy (default: all).
    #[arg(long, value_delimiter = ',')]
    pub kernels: Vec<Kernel>,
    /// The short grid for a lent device's time: B in {1, 64, 128}, T = 4, every shape and kernel
    /// (explicit --batches / --windows still win).
    #[arg(long)]
    pub quick: bool,
    #[arg(long, default_value = "bf16")]
    pub dtype: DType,
    /// Timed samples per case, 1..=10000; the median is reported.
    #[arg(long, default_value_t = 30, value_parser = ranges::SAMPLES)]
    pub samples: usize,
    /// Device warm-up per case, in milliseconds, 0..=10000.
    #[arg(long, default_value_t = 20.0, value_parser = ranges::WARMUP_MS)]
    pub warmup_ms: f64,
    /// CUDA-graph replay: auto (kernels under 50 us), always, never.
    #[arg(long, value_enum, default_value_t = GraphMode::Auto)]
    pub graph: GraphMode,
    /// The input sets of a case add up to at least this many L2 caches, 0..=64.
    #[arg(long, default_value_t = 4.0, value_parser = ranges::L2_MULTIPLE)]
    pub l2_multiple: f64,
    /// Write the results file (bench/results/<date>-<name>.json format) here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Draw percent of floor per kernel and batch (one panel per shape) into this PNG.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// The window T the plot shows, 2..=16 (default: 4 when run, else the first window).
    #[arg(long, value_parser = ranges::WINDOW)]
    pub plot_window: Option<usize>,
    /// Any seed, 0..=18446744073709551615.
    #[arg(long, default_value_t = 0x5eed, value_parser = ranges::SEED)]
    pub seed: u64,
    /// Run every implementation of V, F, P and D (the other kernels are left out) and write the
    /// tuning table (`replayssm::tuning`'s format) to --tune-out: per case the fastest on a GPU;
    /// on the emulator every variant runs once, checked, and the table gets no entries.
    #[arg(long)]
    pub tune: bool,
    /// Where --tune writes its table (on an H200: bench/autotune/h200.json, the shipped one).
    #[arg(long, default_value = "tune-table.json")]
    pub tune_out: PathBuf,
}

impl BenchArgs {
    pub fn options(&self) -> Result<BenchOptions, String> {
        let mut o = BenchOptions {
            backend: self.backend.unwrap_or_else(Backend::best),
            dtype: self.dtype,
            timing: TimingOptions {
                warmup_ms: self.warmup_ms,
                samples: self.samples,
                graph: self.graph,
                ..TimingOptions::default()
            },
            l2_multiple: self.l2_multiple,
            seed: self.seed,
            ..BenchOptions::default()
        };
        if !self.shapes.is_empty() {
            o.shapes = self.shapes.iter().map(|s| shape_by_name(s)).collect::<Result<_, _>>()?;
        }
        o.batches = match (&self.batches[..], self.quick) {
            ([], true) => vec![1, 64, 128],
            ([], false) => BATCHES.to_vec(),
            (b, _) => b.to_vec(),
        };
        o.windows = match (&self.windows[..], self.quick) {
            ([], true) => vec![4],
            ([], false) => WINDOWS.to_vec(),
            (w, _) => w.to_vec(),
        };
        if !self.kernels.is_empty() {
            o.kernels = self.kernels.clone();
        }
        if !(self.warmup_ms.is_finite() && self.warmup_ms >= 0.0) {
            return Err("--warmup-ms must be a non-negative number".into());
        }
        o.validate()?;
        Ok(o)
    }
}

fn progress_line(done: usize, total: usize, r: &CaseResult) -> String {
    format!("[{done:>4}/{total}] {}", case_line(r))
}

fn case_line(r: &CaseResult) -> String {
    let c = &r.case;
    let what = format!("{} {} B={} T={}", c.kernel, c.shape.name, c.batch, c.t);
    let how = match &r.outcome {
        Outcome::Timed { timing, .. } => format!("{:.2} us", timing.median_us),
        Outcome::Ran => "ran".into(),
        Outcome::Skipped(why) => format!("skipped: {why}"),
        Outcome::Failed(why) => format!("FAILED: {why}"),
    };
    format!("{what}: {how}")
}

fn command_output(cmd: &str, args: &[&str]) -> Option<String> {
    let out = std::process::Command::new(cmd).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
}

/// Refuses an output path that cannot be written, before any case runs (a long run must not
/// end on an unwritable `--json` or `--plot`). An existing file is opened for appending (not
/// changed); a new one is created and removed again.
fn check_writable(flag: &str, path: &Path) -> Result<(), String> {
    if path.is_dir() {
        return Err(format!("{flag} {}: is a directory, not a file", path.display()));
    }
    let existed = path.exists();
    match std::fs::OpenOptions::new().append(true).create(true).open(path) {
        Ok(_) => {
            if !existed {
                let _ = std::fs::remove_file(path);
            }
            Ok(())
        }
        Err(e) => Err(format!("{flag} {}: cannot write: {e}", path.display())),
    }
}

/// `replayssm bench`; `Err` when stdout could not be written (the files are written first:
/// a long run's results are not lost to `| head`).
pub fn main(args: &BenchArgs) -> output::Result<ExitCode> {
    let o = match args.options() {
        Ok(o) => o,
        Err(e) => {
            errln!("bench: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    for (flag, path) in [("--json", &args.json), ("--plot", &args.plot)] {
        if let Some(path) = path {
            if let Err(e) = check_writable(flag, path) {
                errln!("bench: {e}");
                return Ok(ExitCode::from(2));
            }
        }
    }
    if o.backend != Backend::Cuda {
        errln!(
            "bench: timing skipped: backend {} (CUDA: {}); every case runs once on the CPU and is \
             checked, nothing is timed",
            o.backend,
            Backend::Cuda.availability().err().unwrap_or_else(|| "available".into())
        );
    }
    if args.tune {
        return tune_main(&o, &args.tune_out);
    }
    let tty = std::io::stderr().is_terminal();
    let mut failed = 0usize;
    // A terminal gets one updating bar (indicatif); logs get every case on its own line.
    let bar = tty.then(|| {
        let b = indicatif::ProgressBar::new(0);
        b.set_style(
            indicatif::ProgressStyle::with_template("[{pos:>4}/{len}] {wide_msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        b
    });
    let mut progress = |done: usize, total: usize, r: &CaseResult| {
        if matches!(r.outcome, Outcome::Failed(_)) {
            failed += 1;
        }
        match &bar {
            Some(b) => {
                b.set_length(total as u64);
                b.set_position(done as u64);
                b.set_message(case_line(r));
                if done == total {
                    b.finish();
                }
            }
            None => errln!("{}", progress_line(done, total, r)),
        }
    };
    let report = match run(&o, &mut progress) {
        Ok(r) => r,
        Err(e) => {
            errln!("bench: {e}");
            return Ok(ExitCode::FAILURE);
        }
    };
    let printed = (|| {
        if let Some(bw) = report.copy_bandwidth {
            outln!("device-to-device copy bandwidth: {:.3} TB/s (read + write)", bw / 1e12)?;
        }
        out!("{}", report.table())?;
        if report.copy_bandwidth.is_some() {
            for t in report.targets() {
                outln!("{t}")?;
            }
        }
        output::flush()
    })();
    if let Some(path) = &args.json {
        let (date, _) = utc_now();
        let command = std::env::args().collect::<Vec<_>>().join(" ");
        let commit = command_output("git", &["rev-parse", "HEAD"]).map_or("unknown".to_string(), |c| {
            let dirty = command_output("git", &["status", "--porcelain", "--untracked-files=no"]).is_some();
            if dirty {
                format!("{c} (dirty)")
            } else {
                c
            }
        });
        let clocks = (o.backend == Backend::Cuda)
            .then(|| {
                command_output(
                    "nvidia-smi",
                    &[
                        "--query-gpu=driver_version,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,temperature.gpu,power.draw",
                        "--format=csv,noheader",
                    ],
                )
            })
            .flatten()
            .map(|s| format!("driver, sm, mem, max sm, max mem, temperature, power: {s}"));
        let j = report.to_json(&command, &commit, &date, clocks.as_deref());
        let text = serde_json::to_string_pretty(&j).unwrap_or_default();
        if let Err(e) = std::fs::write(path, text + "\n") {
            errln!("bench: writing {}: {e}", path.display());
            printed?;
            return Ok(ExitCode::FAILURE);
        }
        errln!("bench: results written to {}", path.display());
    }
    if let Some(path) = &args.plot {
        let t = args
            .plot_window
            .unwrap_or(if o.windows.contains(&4) { 4 } else { o.windows[0] });
        if let Err(e) = super::plot::write(&report, t, path) {
            errln!("bench: {e}");
            printed?;
            return Ok(ExitCode::FAILURE);
        }
        errln!("bench: plot written to {}", path.display());
    }
    printed?;
    if failed > 0 {
        errln!("bench: {failed} case(s) failed");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// `replayssm bench --tune`; `Err` when stdout could not be written (after the table file).
fn tune_main(o: &super::BenchOptions, out: &Path) -> output::Result<ExitCode> {
    if let Err(e) = check_writable("--tune-out", out) {
        errln!("bench: {e}");
        return Ok(ExitCode::from(2));
    }
    let mut failed = 0usize;
    let mut progress = |done: usize, total: usize, r: &super::tune::TuneResult| {
        if matches!(r.result.outcome, Outcome::Failed(_)) {
            failed += 1;
        }
        errln!("[{done:>4}/{total}] {}", super::tune::line(r));
    };
    let report = match super::tune_run(o, &mut progress) {
        Ok(r) => r,
        Err(e) => {
            errln!("bench: {e}");
            return Ok(ExitCode::FAILURE);
        }
    };
    let ran = report
        .results
        .iter()
        .filter(|r| matches!(r.result.outcome, Outcome::Ran | Outcome::Timed { .. }))
        .count();
    let printed = (|| {
        outln!(
            "tune: {ran} of {} variant runs completed, {} table entries ({})",
            report.results.len(),
            report.table.entries.len(),
            report.table.source
        )?;
        for e in &report.table.entries {
            outln!(
                "  {} {} K={} HV={} T<={} B<={}: {} ({:.2} us; default {})",
                e.kernel,
                e.variant,
                e.k,
                e.hv,
                e.t,
                e.b,
                e.choice,
                e.median_us.unwrap_or(f64::NAN),
                e.default_us.map_or("-".to_string(), |u| format!("{u:.2} us"))
            )?;
        }
        output::flush()
    })();
    let text = serde_json::to_string_pretty(&report.table).unwrap_or_default();
    if let Err(e) = std::fs::write(out, text + "\n") {
        errln!("bench: writing {}: {e}", out.display());
        printed?;
        return Ok(ExitCode::FAILURE);
    }
    errln!("bench: tuning table written to {}", out.display());
    printed?;
    if failed > 0 {
        errln!("bench: {failed} variant run(s) failed");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}
