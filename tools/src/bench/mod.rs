//! The performance harness behind `replayssm bench` and `tools/benches/kernels.rs`.
//!
//! Each case (kernel, model shape, batch B, window T) gets random inputs, replicated into enough
//! input sets that their total is several times the L2 (consecutive launches rotate through
//! them, so a small batch is not timed out of the cache), and is launched through the C ABI
//! entries an engine calls. On a GPU it is timed with CUDA events after warm-up (median of many
//! samples; a replayed CUDA graph for short kernels) and set against its bytes floor
//! ([`crate::floor`]) at the device-to-device copy bandwidth measured in the same run, and
//! against its recurrent counterpart from the same run. On the emulator every case runs once
//! and is checked (status, device error word), untimed: emulated time says nothing about a GPU.
//!
//! Map: [`cases`] (what each kernel launches), [`buffers`] (allocation, fill, input sets),
//! [`timer`] (events, graphs, copy bandwidth), [`report`] (rows, ratios, JSON, table),
//! [`plot`] (percent-of-floor PNG).

pub(crate) mod buffers;
pub mod cases;
pub mod cli;
pub mod plot;
pub mod report;
pub mod timer;
pub mod tune;

pub use cases::{Case, Kernel};
pub use report::{Report, Row};
pub use timer::{GraphMode, Timing, TimingOptions};

use crate::floor::{kernel_floors, ModelShape, BATCHES, MODEL_SHAPES, WINDOWS};
use replayssm::backend::Backend;
use replayssm::dtype::DType;
use replayssm::problem::{HeadDims, Variant};

/// A small GDN shape for emulator runs of the harness (the model shapes take the emulator minutes
/// per case at the larger batches).
pub const TINY_SHAPE: ModelShape = ModelShape {
    name: "tiny",
    dims: HeadDims {
        h: 2,
        hv: 4,
        k: 64,
        v: 32,
    },
    layers: 3,
    variant: Variant::Gdn,
};

/// [`TINY_SHAPE`] as KDA (per-key gates: the ring and gate buffers K times wider).
pub const TINY_KDA_SHAPE: ModelShape = ModelShape {
    name: "tiny-kda",
    variant: Variant::Kda,
    ..TINY_SHAPE
};

/// The model shapes by name (case-insensitive), plus `tiny` and `tiny-kda`.
pub fn shape_by_name(name: &str) -> Result<ModelShape, String> {
    MODEL_SHAPES
        .iter()
        .chain([&TINY_SHAPE, &TINY_KDA_SHAPE])
        .find(|s| s.name.eq_ignore_ascii_case(name))
        .copied()
        .ok_or_else(|| {
            let names: Vec<_> = MODEL_SHAPES
                .iter()
                .map(|s| s.name)
                .chain(["tiny", "tiny-kda"])
                .collect();
            format!("unknown shape '{name}' (one of {})", names.join(", "))
        })
}

/// What to run and how.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    pub backend: Backend,
    pub shapes: Vec<ModelShape>,
    pub batches: Vec<usize>,
    pub windows: Vec<usize>,
    pub kernels: Vec<Kernel>,
    pub dtype: DType,
    pub timing: TimingOptions,
    /// The input sets of a case add up to at least this many times the L2.
    pub l2_multiple: f64,
    pub max_sets: usize,
    /// The share of the free device memory one case may take.
    pub memory_fraction: f64,
    /// Emulated runs refuse cases larger than this (host memory, emulator time).
    pub emulated_max_bytes: usize,
    pub seed: u64,
}

impl Default for BenchOptions {
    /// The whole performance grid on the best backend present.
    fn default() -> Self {
        BenchOptions {
            backend: Backend::best(),
            shapes: MODEL_SHAPES.to_vec(),
            batches: BATCHES.to_vec(),
            windows: WINDOWS.to_vec(),
            kernels: Kernel::ALL.to_vec(),
            dtype: DType::BF16,
            timing: TimingOptions::default(),
            l2_multiple: 4.0,
            max_sets: 256,
            memory_fraction: 0.85,
            emulated_max_bytes: 1 << 30,
            seed: 0x5eed,
        }
    }
}

impl BenchOptions {
    /// Every case of the grid, in run order (shape, batch, window, kernel); the kernels that do
    /// not use a window run once per (shape, batch), reported with T = 1.
    pub fn cases(&self) -> Vec<Case> {
        let mut out = vec![];
        for shape in &self.shapes {
            for &batch in &self.batches {
                for k in self.kernels.iter().filter(|k| !k.uses_window()) {
                    out.push(Case {
                        kernel: *k,
                        shape: *shape,
                        batch,
                        t: 1,
                        dtype: self.dtype,
                    });
                }
                for &t in &self.windows {
                    for k in self.kernels.iter().filter(|k| k.uses_window()) {
                        out.push(Case {
                            kernel: *k,
                            shape: *shape,
                            batch,
                            t,
                            dtype: self.dtype,
                        });
                    }
                }
            }
        }
        out
    }

    /// Checks the grid before anything is allocated.
    pub fn validate(&self) -> Result<(), String> {
        if self.shapes.is_empty() || self.batches.is_empty() || self.kernels.is_empty() {
            return Err("empty grid: give at least one shape, batch and kernel".into());
        }
        if let Some(b) = self.batches.iter().find(|&&b| b == 0 || b > 65535) {
            return Err(format!("batch {b} is outside 1..=65535"));
        }
        let windowed = self.kernels.iter().any(|k| k.uses_window());
        if windowed && self.windows.is_empty() {
            return Err("the windowed kernels need at least one window".into());
        }
        let max = replayssm::ffi::RSSM_MAX_VERIFY_WINDOW as usize;
        if let Some(t) = self.windows.iter().find(|&&t| !(2..=max).contains(&t)) {
            return Err(format!(
                "window {t} is outside 2..={max} (the verify kernel's longest window; D needs L >= 2)"
            ));
        }
        if !(self.l2_multiple >= 0.0 && self.max_sets >= 1) {
            return Err("l2_multiple must be >= 0 and max_sets >= 1".into());
        }
        if !(self.memory_fraction > 0.0 && self.memory_fraction <= 1.0) {
            return Err("memory_fraction must be in (0, 1]".into());
        }
        if self.timing.samples == 0 {
            return Err("samples must be at least 1".into());
        }
        match self.backend {
            Backend::Reference => Err("the reference backend runs no kernel: use cuda or emulated".into()),
            b => b.availability().map_err(|why| format!("backend {b}: {why}")),
        }
    }
}

/// How one case ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Timed on the GPU over `sets` rotating input sets.
    Timed { timing: Timing, sets: usize },
    /// Ran once and checked, untimed (emulated backend).
    Ran,
    /// Not run, and why (does not fit, ...).
    Skipped(String),
    /// Refused or failed, and the message.
    Failed(String),
}

/// One case and its outcome.
#[derive(Clone, Debug)]
pub struct CaseResult {
    pub case: Case,
    /// The case's bytes floor (design §8).
    pub floor_bytes: f64,
    pub outcome: Outcome,
}

#[cfg(test)]
impl CaseResult {
    /// A case timed at `us` per launch (test fixture for the report and the plot).
    pub(crate) fn timed_at(case: Case, us: f64) -> CaseResult {
        CaseResult {
            floor_bytes: floor_bytes(&case),
            case,
            outcome: Outcome::Timed {
                timing: Timing {
                    median_us: us,
                    p10_us: us,
                    p90_us: us,
                    samples: 1,
                    launches_per_sample: 1,
                    graph: false,
                },
                sets: 1,
            },
        }
    }
}

/// The floor bytes of a measured kernel. The tree forms move their chain form's bytes: VT V's
/// at T nodes (plus a parent index per node), FT F's at its accepted path's length.
pub fn floor_bytes(c: &Case) -> f64 {
    let (shape, dtype, b) = (&c.shape, c.dtype, c.batch);
    match c.kernel {
        Kernel::VT => floor_of(shape, dtype, b, c.t, "V"),
        Kernel::FT => floor_of(shape, dtype, b, cases::deepest_path(c.t).len(), "F"),
        k => floor_of(shape, dtype, b, c.t, k.name()),
    }
}

/// The floor of `kernel` (a [`crate::floor::KernelFloor`] name) at (B, T).
pub fn floor_of(shape: &ModelShape, dtype: DType, batch: usize, t: usize, kernel: &str) -> f64 {
    // R-decode and copy do not depend on T; the model wants T >= 1 for the others.
    kernel_floors(shape, dtype, batch, t.max(1))
        .into_iter()
        .find(|f| f.kernel == kernel)
        .map_or(f64::NAN, |f| f.bytes)
}

/// The date and time a run's files carry (the results JSON, the tuning table): today's UTC
/// date (`YYYY-MM-DD`) and time (`YYYY-MM-DDTHH:MM:SSZ`) from the system clock.
pub fn utc_now() -> (String, String) {
    let now = time::OffsetDateTime::now_utc();
    let date = format!("{:04}-{:02}-{:02}", now.year(), u8::from(now.month()), now.day());
    let time = format!("{date}T{:02}:{:02}:{:02}Z", now.hour(), now.minute(), now.second());
    (date, time)
}

/// Facts about the device a run used.
#[derive(Clone, Debug, Default)]
pub struct DeviceFacts {
    pub name: String,
    pub compute_capability: (i32, i32),
    pub driver_version: i32,
    pub runtime_version: i32,
    pub sm_count: i32,
    pub l2_bytes: usize,
    pub free_bytes: usize,
    pub total_bytes: usize,
}

/// Runs every case of `o`, calling `progress(done, total, result)` after each.
pub fn run(o: &BenchOptions, progress: &mut dyn FnMut(usize, usize, &CaseResult)) -> Result<Report, String> {
    o.validate()?;
    let cases = o.cases();
    let (device, copy_bw, no_timing) = match o.backend {
        Backend::Cuda => {
            let facts = device_facts()?;
            // 1 GiB each way, or a quarter of the free memory on a smaller card.
            let bytes = (1usize << 30).min(facts.free_bytes / 4);
            let bw = measure_copy_bandwidth(bytes)?;
            (Some(facts), Some(bw), None)
        }
        _ => (
            None,
            None,
            Some(format!(
                "timing skipped: the {} backend runs the kernels on the CPU, so each case ran once \
                 (status and device error word checked) and nothing was timed; timing needs the \
                 CUDA backend ({})",
                o.backend,
                Backend::Cuda.availability().err().unwrap_or_else(|| "available".into())
            )),
        ),
    };
    let mut results = Vec::with_capacity(cases.len());
    for (i, case) in cases.iter().enumerate() {
        let outcome = run_case(o, case, device.as_ref());
        let r = CaseResult {
            case: *case,
            floor_bytes: floor_bytes(case),
            outcome,
        };
        progress(i + 1, cases.len(), &r);
        results.push(r);
    }
    Ok(Report {
        backend: o.backend,
        device,
        copy_bandwidth: copy_bw,
        no_timing_reason: no_timing,
        results,
    })
}

/// `--tune`: every implementation of every tunable case of the grid ([`tune`]).
pub fn tune_run(
    o: &BenchOptions,
    progress: &mut dyn FnMut(usize, usize, &tune::TuneResult),
) -> Result<tune::TuneReport, String> {
    o.validate()?;
    let device = match o.backend {
        Backend::Cuda => Some(device_facts()?),
        _ => None,
    };
    Ok(tune::run(o, device.as_ref(), progress))
}

#[cfg(replayssm_cuda)]
fn device_facts() -> Result<DeviceFacts, String> {
    let d = replayssm::cuda::device()?;
    let (mut sms, mut l2) = (0, 0);
    // SAFETY: out-parameters.
    let code = unsafe { replayssm::ffi::rssm_cuda_device_facts(0, &mut sms, &mut l2) };
    if code != 0 {
        return Err(format!(
            "cudaDeviceGetAttribute: {}",
            replayssm::cuda::error_string(code)
        ));
    }
    let (free, total) = mem_info()?;
    Ok(DeviceFacts {
        name: d.name.clone(),
        compute_capability: d.compute_capability,
        driver_version: d.driver_version,
        runtime_version: d.runtime_version,
        sm_count: sms,
        l2_bytes: l2 as usize,
        free_bytes: free,
        total_bytes: total,
    })
}

#[cfg(not(replayssm_cuda))]
fn device_facts() -> Result<DeviceFacts, String> {
    replayssm::cuda::device().map(|_| DeviceFacts::default())
}

#[cfg(replayssm_cuda)]
fn mem_info() -> Result<(usize, usize), String> {
    let (mut free, mut total) = (0u64, 0u64);
    // SAFETY: out-parameters.
    let code = unsafe { replayssm::ffi::rssm_cuda_mem_info(&mut free, &mut total) };
    if code != 0 {
        return Err(format!("cudaMemGetInfo: {}", replayssm::cuda::error_string(code)));
    }
    Ok((free as usize, total as usize))
}

#[cfg(replayssm_cuda)]
fn measure_copy_bandwidth(bytes: usize) -> Result<f64, String> {
    timer::copy_bandwidth(bytes, 20)
}

#[cfg(not(replayssm_cuda))]
fn measure_copy_bandwidth(_bytes: usize) -> Result<f64, String> {
    Err("the CUDA backend is not compiled in".into())
}

/// How many input sets `case` gets: enough for `l2_multiple` L2s, within memory and `max_sets`.
fn input_sets(o: &BenchOptions, plan: &buffers::Plan, device: Option<&DeviceFacts>) -> Result<usize, String> {
    let set = plan.set_bytes().max(1);
    let Some(dev) = device else {
        let need = plan.footprint(1);
        if need > o.emulated_max_bytes {
            return Err(format!(
                "needs {:.2} GiB, over the emulated limit of {:.2} GiB",
                gib(need),
                gib(o.emulated_max_bytes)
            ));
        }
        return Ok(1);
    };
    let want = ((o.l2_multiple * dev.l2_bytes as f64) / set as f64).ceil().max(1.0) as usize;
    let want = want.min(o.max_sets);
    #[cfg(replayssm_cuda)]
    let free = mem_info()?.0;
    #[cfg(not(replayssm_cuda))]
    let free = dev.free_bytes;
    let budget = (free as f64 * o.memory_fraction) as usize;
    let fit = budget.saturating_sub(plan.shared_bytes()) / set;
    if fit == 0 {
        return Err(format!(
            "needs {:.2} GiB, {:.2} GiB of the {:.2} GiB free may be used",
            gib(plan.footprint(1)),
            gib(budget),
            gib(free)
        ));
    }
    Ok(want.min(fit))
}

fn gib(b: usize) -> f64 {
    b as f64 / (1u64 << 30) as f64
}

/// A case with its buffers allocated and filled, ready to launch (what `replayssm bench` times,
/// and what `tools/benches/kernels.rs` hands to criterion).
pub struct PreparedCase {
    #[cfg_attr(not(replayssm_cuda), allow(dead_code))]
    backend: Backend,
    buffers: buffers::Buffers,
    error_word: buffers::Buf,
    launch: cases::LaunchBuilder,
    /// Input sets the launches rotate through.
    pub sets: usize,
}

impl PreparedCase {
    /// Allocates `case`'s buffers (as many input sets as `o` asks and memory allows) and runs
    /// every set once, checking the call's status and the device error word.
    pub fn new(o: &BenchOptions, case: &Case) -> Result<PreparedCase, Outcome> {
        let device = match o.backend {
            Backend::Cuda => Some(device_facts().map_err(Outcome::Failed)?),
            _ => None,
        };
        Self::with_device(o, case, device.as_ref())
    }

    fn with_device(o: &BenchOptions, case: &Case, device: Option<&DeviceFacts>) -> Result<PreparedCase, Outcome> {
        let (plan, error_word, launch) = cases::plan(case, o.backend);
        let sets = input_sets(o, &plan, device).map_err(Outcome::Skipped)?;
        let seed = o.seed ^ (case.batch as u64) << 8 ^ (case.t as u64) << 24 ^ case.kernel as u64;
        let buffers = plan
            .allocate(o.backend, sets, seed)
            .map_err(|e| Outcome::Failed(format!("allocation: {e}")))?;
        let p = PreparedCase {
            backend: o.backend,
            buffers,
            error_word,
            launch,
            sets,
        };
        for set in 0..sets {
            p.launch_set(set, std::ptr::null_mut()).map_err(Outcome::Failed)?;
        }
        p.check("the first launches").map_err(Outcome::Failed)?;
        p.buffers.check_written().map_err(Outcome::Failed)?;
        Ok(p)
    }

    fn launch_set(&self, set: usize, stream: *mut std::ffi::c_void) -> Result<(), String> {
        (self.launch)(&self.buffers, set, stream)
    }

    /// Waits for the device, then checks the error word the kernels OR into.
    pub fn check(&self, after: &str) -> Result<(), String> {
        #[cfg(replayssm_cuda)]
        if self.backend == Backend::Cuda {
            replayssm::cuda::synchronize().map_err(|e| e.to_string())?;
        }
        match self.buffers.read_u32(self.error_word)? {
            0 => Ok(()),
            bits => Err(format!("device error word {bits:#x} after {after}")),
        }
    }

    /// One launch of input set 0 (synchronous on the emulator).
    pub fn run_once(&self) -> Result<(), String> {
        self.launch_set(0, std::ptr::null_mut())?;
        self.check("a launch")
    }

    /// Times the case on the GPU as `replayssm bench` does.
    #[cfg(replayssm_cuda)]
    pub fn time(&self, t: &TimingOptions) -> Result<Timing, String> {
        let mut f = |set: usize, stream: *mut std::ffi::c_void| self.launch_set(set, stream);
        let timing = timer::time(&mut f, self.sets, t)?;
        self.check("timing")?;
        Ok(timing)
    }

    /// Device time of `iters` back-to-back launches (rotating sets), between two events: what
    /// criterion's `iter_custom` wants.
    #[cfg(replayssm_cuda)]
    pub fn device_time(&self, iters: u64) -> Result<std::time::Duration, String> {
        let mut f = |set: usize, stream: *mut std::ffi::c_void| self.launch_set(set, stream);
        let ms = timer::time_iters(&mut f, self.sets, iters)?;
        Ok(std::time::Duration::from_secs_f64(ms * 1e-3))
    }

    /// Without the CUDA backend there is no device time to give.
    #[cfg(not(replayssm_cuda))]
    pub fn device_time(&self, _iters: u64) -> Result<std::time::Duration, String> {
        Err("the CUDA backend is not compiled in".into())
    }
}

pub(crate) fn run_case(o: &BenchOptions, case: &Case, device: Option<&DeviceFacts>) -> Outcome {
    let p = match PreparedCase::with_device(o, case, device) {
        Ok(p) => p,
        Err(outcome) => return outcome,
    };
    match o.backend {
        #[cfg(replayssm_cuda)]
        Backend::Cuda => match p.time(&o.timing) {
            Ok(timing) => Outcome::Timed { timing, sets: p.sets },
            Err(e) => Outcome::Failed(e),
        },
        _ => {
            let _ = p;
            Outcome::Ran
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_now_is_a_date_and_a_time() {
        let (date, time) = utc_now();
        assert_eq!(date.len(), 10);
        assert!(
            time.starts_with(&date) && time.ends_with('Z') && time.len() == 20,
            "{time}"
        );
        assert!(date.as_str() >= "2026-01-01", "{date}: the clock or the format is off");
    }

    #[test]
    fn the_grid_runs_unwindowed_kernels_once_per_batch() {
        let o = BenchOptions {
            backend: Backend::Emulated,
            shapes: vec![MODEL_SHAPES[0], TINY_SHAPE],
            batches: vec![1, 64],
            windows: vec![2, 4, 8],
            ..BenchOptions::default()
        };
        let c = o.cases();
        // Per (shape, batch): R-decode and copy once, nine windowed kernels per window.
        assert_eq!(c.len(), 2 * 2 * (2 + 9 * 3));
        assert!(c.iter().filter(|c| !c.kernel.uses_window()).all(|c| c.t == 1));
        assert!(o.validate().is_ok());
        let bad = BenchOptions {
            windows: vec![1],
            ..o.clone()
        };
        assert!(bad.validate().unwrap_err().contains("window 1"));
        let bad = BenchOptions { batches: vec![0], ..o };
        assert!(bad.validate().unwrap_err().contains("batch 0"));
        assert!(shape_by_name("qwen3-next").is_ok());
        assert!(shape_by_name("nope").unwrap_err().contains("Kimi-K3-TP8"));
    }
}
