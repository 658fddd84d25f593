//! The executable performance model (`replayssm model`): the compiled sm_90 code of every kernel
//! implementation, counted per KB of state moved against what the H200 allows per KB at its
//! bytes floor, turned into a predicted percent of floor per kernel, implementation and shape,
//! and into the speculative step's ratio against the recurrent baseline.
//!
//! Every number it prints is a **prediction**. The constants are in [`Machine`] and documented in
//! bench/README.md ("The executable model"); a device run corrects them.
//!
//! Map: [`sass`] (the listing: instructions, blocks, loops), [`count`] (what one block executes),
//! this module (kernels, machine, prediction, the step).

pub mod count;
pub mod report;
pub mod sass;
pub mod table;

use std::path::{Path, PathBuf};
use std::process::Command;

use replayssm::build_info;
use replayssm::dtype::DType;
use replayssm::problem::Variant;

use crate::floor::{kernel_floors, ModelShape};
use crate::occupancy::{occupancy, SM90};
use count::{Counts, Repeats};
use sass::Function;

/// The machine as the model sees it (H200 SXM; HOPPER.md, H200.md).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Machine {
    pub sms: f64,
    /// SM clock, Hz.
    pub clock_hz: f64,
    /// Device-to-device copy bandwidth (read + write), bytes per second.
    pub bandwidth: f64,
    /// Warp-instructions one SM issues per clock (4 schedulers).
    pub issue_per_clock: f64,
    /// MIO (shared memory, shuffle) cycles one SM retires per clock.
    pub mio_per_clock: f64,
    /// One dependent global round trip under load, seconds.
    pub latency_s: f64,
    /// The recurrent commit's snapshot copy (`cudaMemcpy2DAsync`) as a fraction of the floor.
    pub copy_fraction: f64,
}

/// The H200 figures: 132 SMs at 1.98 GHz, 4.3 TB/s copy, ~0.8 us loaded DRAM round trip.
pub const H200: Machine = Machine {
    sms: 132.0,
    clock_hz: 1.98e9,
    bandwidth: 4.3e12,
    issue_per_clock: 4.0,
    mio_per_clock: 1.0,
    latency_s: 0.8e-6,
    copy_fraction: 0.9,
};

/// The model's kilobyte: 1000 bytes (the budgets per KB are round numbers of bytes).
pub const KB: f64 = 1000.0;

impl Machine {
    /// One SM's share of the bandwidth, bytes per second.
    pub fn sm_bandwidth(&self) -> f64 {
        self.bandwidth / self.sms
    }
    /// Warp-instructions an SM may issue per KB of state moved at the floor (~243).
    pub fn issue_budget(&self) -> f64 {
        self.issue_per_clock * self.clock_hz * KB / self.sm_bandwidth()
    }
    /// MIO cycles an SM may spend per KB of state moved at the floor (~61).
    pub fn mio_budget(&self) -> f64 {
        self.mio_per_clock * self.clock_hz * KB / self.sm_bandwidth()
    }
    /// Bytes of reads an SM must keep in flight to stream at its share (Little's law): ~26 KB
    /// for a kernel that only reads, half for one that writes as much as it reads.
    pub fn reads_in_flight(&self, read_share: f64) -> f64 {
        self.sm_bandwidth() * read_share * self.latency_s
    }
}

/// A kernel implementation the model predicts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kernel {
    /// The bench's case name: `R-window`, `V`, `F`, `P`, `VF`, `D-nonflush`, ...
    pub case: &'static str,
    /// The implementation (`replayssm::tuning`'s names).
    pub implementation: &'static str,
    /// The compiled family, and the last template argument where it names the implementation.
    pub family: &'static str,
    pub prefetch_arg: Option<bool>,
    /// Rows of one head a block owns at K = 128: 16, 32 (`ReplayTiling`: F and P default, D), or the
    /// whole head (0).
    pub rows: usize,
    /// Whether it writes the state it reads.
    pub writes: bool,
    pub shape_of_repeats: RepeatsRule,
}

/// How a kernel's code repeats with the window `T` (or cache length `L`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RepeatsRule {
    /// The loops holding state arithmetic run `T` times (R, F, P, D flush).
    PerPosition,
    /// D non-flush: the pending-record loop runs `(L - 1) / 2` times on average (cursors spread
    /// over 0..L-2).
    HalfCache,
    /// The window is unrolled to its 16-position maximum in straight-line code (V default, VF);
    /// loops holding arithmetic (the window build) run `T` times.
    Unrolled,
    /// Staged VF: the rows stream in passes of 16, each pass's body unrolled to 16 positions.
    Passes,
    /// Staged V: the rows stream in passes of 16; each pass projects them on the window in
    /// chunks of 4 positions (a loop), and the per-row solve after the passes holds the window
    /// unrolled to 16 positions.
    ChunkedPasses,
    /// VB at cache length `cache_len`, every draft accepted (the floor rows' `a = T`): staged V's
    /// passes and chunks, plus the cycle's average history `T (c - 1) / 2`,
    /// `c = floor((L - T) / T) + 1` records (`Repeats::history` says where they repeat).
    ChunkedHistory { cache_len: usize },
}

/// Every implementation the model covers (the bench's kernels at their launch shapes).
pub const KERNELS: [Kernel; 23] = [
    k(
        "R-window",
        "-",
        "recurrent_kernel",
        None,
        16,
        true,
        RepeatsRule::PerPosition,
    ),
    k("V", "default", "verify_kernel", None, 16, false, RepeatsRule::Unrolled),
    k(
        "V",
        "staged",
        "verify_staged_kernel",
        None,
        0,
        false,
        RepeatsRule::ChunkedPasses,
    ),
    // Staged V, VF and VB over fewer rows per block (`block_rows`): more blocks where the batch
    // is small, each block's window (and VB's history) cost spread over less state.
    k(
        "V",
        "staged/32",
        "verify_staged_kernel",
        None,
        32,
        false,
        RepeatsRule::ChunkedPasses,
    ),
    k(
        "V",
        "staged/16",
        "verify_staged_kernel",
        None,
        16,
        false,
        RepeatsRule::ChunkedPasses,
    ),
    k(
        "F",
        "default",
        "fold_kernel",
        Some(false),
        32,
        true,
        RepeatsRule::PerPosition,
    ),
    k(
        "F",
        "prefetch",
        "fold_kernel",
        Some(true),
        16,
        true,
        RepeatsRule::PerPosition,
    ),
    k(
        "P",
        "default",
        "replay_kernel",
        Some(false),
        32,
        true,
        RepeatsRule::PerPosition,
    ),
    k(
        "P",
        "prefetch",
        "replay_kernel",
        Some(true),
        16,
        true,
        RepeatsRule::PerPosition,
    ),
    k(
        "VF",
        "default",
        "verify_fold_kernel",
        None,
        16,
        true,
        RepeatsRule::Unrolled,
    ),
    k(
        "VF",
        "staged",
        "verify_fold_staged_kernel",
        None,
        0,
        true,
        RepeatsRule::Passes,
    ),
    k(
        "VF",
        "staged/32",
        "verify_fold_staged_kernel",
        None,
        32,
        true,
        RepeatsRule::Passes,
    ),
    k(
        "VF",
        "staged/16",
        "verify_fold_staged_kernel",
        None,
        16,
        true,
        RepeatsRule::Passes,
    ),
    k(
        "VB-L16",
        "staged",
        "verify_buffered_kernel",
        None,
        0,
        false,
        RepeatsRule::ChunkedHistory { cache_len: 16 },
    ),
    k(
        "VB-L16",
        "staged/32",
        "verify_buffered_kernel",
        None,
        32,
        false,
        RepeatsRule::ChunkedHistory { cache_len: 16 },
    ),
    k(
        "VB-L16",
        "staged/16",
        "verify_buffered_kernel",
        None,
        16,
        false,
        RepeatsRule::ChunkedHistory { cache_len: 16 },
    ),
    k(
        "VB-L32",
        "staged",
        "verify_buffered_kernel",
        None,
        0,
        false,
        RepeatsRule::ChunkedHistory { cache_len: 32 },
    ),
    k(
        "VB-L32",
        "staged/32",
        "verify_buffered_kernel",
        None,
        32,
        false,
        RepeatsRule::ChunkedHistory { cache_len: 32 },
    ),
    k(
        "VB-L32",
        "staged/16",
        "verify_buffered_kernel",
        None,
        16,
        false,
        RepeatsRule::ChunkedHistory { cache_len: 32 },
    ),
    k(
        "D-nonflush",
        "default",
        "decode_kernel",
        None,
        32,
        false,
        RepeatsRule::HalfCache,
    ),
    k(
        "D-nonflush",
        "prefetch",
        "decode_prefetch_kernel",
        None,
        32,
        false,
        RepeatsRule::HalfCache,
    ),
    k(
        "D-flush",
        "default",
        "decode_kernel",
        None,
        32,
        true,
        RepeatsRule::PerPosition,
    ),
    k(
        "D-flush",
        "prefetch",
        "decode_prefetch_kernel",
        None,
        32,
        true,
        RepeatsRule::PerPosition,
    ),
];

const fn k(
    case: &'static str,
    implementation: &'static str,
    family: &'static str,
    prefetch_arg: Option<bool>,
    rows: usize,
    writes: bool,
    shape_of_repeats: RepeatsRule,
) -> Kernel {
    Kernel {
        case,
        implementation,
        family,
        prefetch_arg,
        rows,
        writes,
        shape_of_repeats,
    }
}

/// The longest window V and VF unroll (`RSSM_MAX_VERIFY_WINDOW`).
const UNROLLED_POSITIONS: f64 = replayssm::spec::MAX_VERIFY_WINDOW as f64;

/// Positions staged V projects per reduce-scatter (`StreamLanes::kChunk`).
const STAGED_V_CHUNK: f64 = 4.0;

/// Where the model reads the compiled code.
#[derive(Clone, Debug)]
pub struct Sources {
    pub objects: PathBuf,
    pub cuobjdump: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error(
        "this build has no CUDA objects (the CUDA backend was not compiled): the model reads the compiled sm_90 code"
    )]
    NoCuda,
    #[error("cuobjdump not found at {0} (run scripts/test once to install it, or pass --cuobjdump)")]
    NoCuobjdump(PathBuf),
    #[error("reading {path}: {why}")]
    Io { path: PathBuf, why: String },
    #[error("cuobjdump failed on {path}: {why}")]
    Dump { path: PathBuf, why: String },
}

impl Sources {
    /// This build's objects and the pinned cuobjdump (`.toolchain/sass`, or `CUOBJDUMP`).
    pub fn of_this_build() -> Result<Sources, ModelError> {
        if !build_info::CUDA_COMPILED {
            return Err(ModelError::NoCuda);
        }
        let cuobjdump = std::env::var_os("CUOBJDUMP").map(PathBuf::from).unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../.toolchain/sass/nvidia/cu13/bin/cuobjdump")
        });
        Ok(Sources {
            objects: PathBuf::from(build_info::CUDA_OBJECTS_DIR),
            cuobjdump,
        })
    }

    /// Every kernel in the objects' sm_90 SASS.
    pub fn functions(&self) -> Result<Vec<Function>, ModelError> {
        if !self.cuobjdump.is_file() {
            return Err(ModelError::NoCuobjdump(self.cuobjdump.clone()));
        }
        let io = |e: std::io::Error| ModelError::Io {
            path: self.objects.clone(),
            why: e.to_string(),
        };
        let mut objects: Vec<PathBuf> = std::fs::read_dir(&self.objects)
            .map_err(io)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.to_string_lossy().ends_with(".cuda.o"))
            .collect();
        objects.sort();
        let mut out = vec![];
        for o in objects {
            let dump = Command::new(&self.cuobjdump)
                .arg("--dump-sass")
                .arg(&o)
                .output()
                .map_err(|e| ModelError::Dump {
                    path: o.clone(),
                    why: e.to_string(),
                })?;
            if !dump.status.success() {
                return Err(ModelError::Dump {
                    path: o,
                    why: String::from_utf8_lossy(&dump.stderr).trim().to_string(),
                });
            }
            out.extend(sass::parse(&String::from_utf8_lossy(&dump.stdout)));
        }
        Ok(out)
    }
}

/// Every kernel of this build's sm_90 SASS, through the pinned cuobjdump.
pub fn functions_of_this_build() -> Result<Vec<Function>, ModelError> {
    Sources::of_this_build()?.functions()
}

/// One point of the model's grid.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point {
    pub shape: ModelShape,
    pub act: DType,
    pub batch: usize,
    /// Window T (cache length L for D).
    pub t: usize,
}

/// What the model predicts for one kernel implementation at one point.
#[derive(Clone, Debug, PartialEq)]
pub struct Prediction {
    pub kernel: Kernel,
    pub registers: u32,
    pub blocks_per_sm: u32,
    /// Per KB of state moved, the whole block / its state loop (from the first state load).
    pub instructions_per_kb: f64,
    pub hot_instructions_per_kb: f64,
    pub mio_per_kb: f64,
    pub hot_mio_per_kb: f64,
    /// State bytes in flight per SM (before each block's first wait), KB.
    pub in_flight_kb: f64,
    pub trips_before_state: f64,
    pub trips: f64,
    /// Each limit as a fraction of the floor, and which one binds.
    pub issue: f64,
    pub mio: f64,
    pub latency: f64,
    pub waves: f64,
    pub percent_of_floor: f64,
    pub limiter: &'static str,
    /// Predicted time of one launch at `percent_of_floor`, microseconds.
    pub time_us: f64,
}

/// Bytes per lane of one state access: 16 at K >= 128, 8 at K = 64, 4 at K = 32.
fn state_width(p: &Point) -> u32 {
    (4 * (p.shape.dims.k / 32).min(4)) as u32
}

/// The kernels whose fourth template argument is the decode ring's record type.
const RECORD_FAMILIES: [&str; 3] = ["recurrent_kernel", "decode_kernel", "decode_prefetch_kernel"];

/// The compiled instance of `kn` at `p` (template arguments: elements per lane, activation type,
/// KDA, and the prefetch flag where the implementation is one; for R and D the fourth is the
/// record type, and the model runs the f32-record form the shipped defaults serve).
fn function_of<'a>(functions: &'a [Function], kn: &Kernel, p: &Point) -> Option<&'a Function> {
    fn arg(f: &Function, i: usize) -> Option<&str> {
        f.args.get(i).map(String::as_str)
    }
    let epl = (p.shape.dims.k / 32).to_string();
    let act = match p.act {
        DType::F32 => "float",
        DType::F16 => "__half",
        DType::BF16 => "__nv_bfloat16",
    };
    let kda = if p.shape.variant == Variant::Kda {
        "true"
    } else {
        "false"
    };
    functions.iter().find(|f| {
        f.family == kn.family
            && arg(f, 0) == Some(epl.as_str())
            && arg(f, 1) == Some(act)
            && arg(f, 2) == Some(kda)
            && kn
                .prefetch_arg
                .is_none_or(|b| arg(f, 3) == Some(if b { "true" } else { "false" }))
            && (!RECORD_FAMILIES.contains(&kn.family) || arg(f, 3) == Some("float"))
    })
}

/// How often each part of `kn`'s code runs at window (or cache length) `t` with `rows` per block.
fn repeats_of(kn: &Kernel, t: f64, rows: usize) -> Repeats {
    let passes = Some((rows / 16) as f64);
    let history = match kn.shape_of_repeats {
        RepeatsRule::ChunkedHistory { cache_len } => Some(history_records(cache_len, t)),
        _ => None,
    };
    let (per_position_loop, unrolled, passes, chunks) = match kn.shape_of_repeats {
        RepeatsRule::PerPosition => (t, None, None, None),
        RepeatsRule::HalfCache => (((t - 1.0) / 2.0).max(0.0), None, None, None),
        RepeatsRule::Unrolled => (t, Some((UNROLLED_POSITIONS, t)), None, None),
        RepeatsRule::Passes => (t, Some((UNROLLED_POSITIONS, t)), passes, None),
        RepeatsRule::ChunkedPasses | RepeatsRule::ChunkedHistory { .. } => (
            t,
            Some((UNROLLED_POSITIONS, t)),
            passes,
            Some((t / STAGED_V_CHUNK).ceil()),
        ),
    };
    Repeats {
        per_position_loop,
        unrolled,
        passes,
        chunks,
        history,
    }
}

/// The history records VB applies per verify, on average over a flush cycle at cache
/// length `cache_len` with every one of `t` draft tokens accepted (`floor::buffered_step_bytes`'s
/// cycle).
fn history_records(cache_len: usize, t: f64) -> f64 {
    let c = ((cache_len as f64 - t) / t).floor().max(0.0) + 1.0;
    t * (c - 1.0) / 2.0
}

/// The counting trace of one implementation at `p`: its hot blocks with their weights and every
/// dependent round trip (`replayssm model --explain`).
pub fn explain(functions: &[Function], p: &Point, case: &str, implementation: &str) -> Option<Vec<String>> {
    let kn = KERNELS
        .iter()
        .find(|k| k.case == case && k.implementation == implementation)?;
    let f = function_of(functions, kn, p)?;
    let mut trace = vec![format!(
        "{} {}: {}<{}>",
        case,
        implementation,
        f.family,
        f.args.join(", ")
    )];
    let c = counts_at(f, kn, p, Some(&mut trace))?;
    trace.push(format!("{c:?}"));
    Some(trace)
}

/// Rows of one head a block of `kn` owns at `p`.
fn rows_of(kn: &Kernel, p: &Point) -> usize {
    if kn.rows == 0 {
        p.shape.dims.v
    } else {
        kn.rows
    }
}

/// One block of `kn` counted at `p` (what `predict` and `explain` both use).
fn counts_at(f: &Function, kn: &Kernel, p: &Point, trace: Option<&mut Vec<String>>) -> Option<Counts> {
    let repeats = repeats_of(kn, p.t as f64, rows_of(kn, p));
    let mut c = count::count_traced(f, state_width(p), repeats, trace)?;
    // Every kernel today scans the batch's slots for a duplicate in every warp
    // (`warp_find_other`): ceil(B / 32) loads per lane, issued in pairs. The counted prologue is
    // the shortest path, which skips the scan.
    let scan = (p.batch.div_ceil(32) as f64 / 2.0).ceil();
    c.trips_before_state += scan;
    c.trips += scan;
    Some(c)
}

/// The predictions of every implementation at `p`, and the kernels that were not found.
pub fn predict(functions: &[Function], m: &Machine, p: &Point) -> Vec<Prediction> {
    let d = &p.shape.dims;
    let resources = build_info::kernel_resources();
    let floors = kernel_floors(&p.shape, p.act, p.batch, p.t);
    let floor_of = |case: &str| floors.iter().find(|f| f.kernel == case).map(|f| f.bytes);
    KERNELS
        .iter()
        .filter_map(|kn| {
            let f = function_of(functions, kn, p)?;
            let demangled = format!("rssm::{}<{}>", kn.family, f.args.join(", "));
            let res = resources
                .iter()
                .find(|r| r.arch == "sm_90" && r.kernel.contains(&demangled))?;
            let launch = crate::occupancy::launch_of(&res.kernel)?;
            let occ = occupancy(
                &SM90,
                res.registers,
                launch.threads,
                res.smem_bytes + launch.dynamic_smem,
            );
            let t = p.t as f64;
            let rows = rows_of(kn, p);
            let c = counts_at(f, kn, p, None)?;
            let warps = f64::from(launch.threads / 32);
            let row_bytes = (d.k * 4) as f64;
            let read = rows as f64 * row_bytes;
            // R-window writes T snapshots; the other writers write the state once.
            let written = match (kn.writes, kn.case) {
                (false, _) => 0.0,
                (true, "R-window") => t * read,
                _ => read,
            };
            let kb = (read + written) / KB;
            let n = f64::from(occ.blocks_per_sm);
            let per_kb = |x: f64| x * warps / kb;
            let issue = (m.issue_budget() / per_kb(c.instructions)).min(1.0);
            let mio = if c.mio_cycles > 0.0 {
                (m.mio_budget() / per_kb(c.mio_cycles)).min(1.0)
            } else {
                1.0
            };
            // Latency: the reads the SM keeps in flight, discounted by the part of a block's life
            // spent in dependent round trips that are not its state load.
            let in_flight = n * c.state_bytes_in_flight * warps;
            let stream_s = (read + written) * n / m.sm_bandwidth();
            let exposed_s = (c.trips - 1.0).max(0.0) * m.latency_s;
            let duty = stream_s / (stream_s + exposed_s);
            let latency = (in_flight * duty / m.reads_in_flight(read / (read + written))).min(1.0);
            let layers = if kn.case == "F" { p.shape.layers } else { 1 };
            let blocks = (d.v.div_ceil(rows) * d.hv * p.batch * layers) as f64;
            let slots = m.sms * n;
            let waves = blocks / ((blocks / slots).ceil() * slots);
            let (bound, limiter) = [(issue, "issue"), (mio, "MIO"), (latency, "latency")]
                .into_iter()
                .fold((f64::INFINITY, ""), |acc, x| if x.0 < acc.0 { x } else { acc });
            let pct = 100.0 * bound * waves;
            let floor_bytes = floor_of(kn.case)?;
            Some(Prediction {
                kernel: *kn,
                registers: res.registers,
                blocks_per_sm: occ.blocks_per_sm,
                instructions_per_kb: per_kb(c.instructions),
                hot_instructions_per_kb: per_kb(c.hot_instructions),
                mio_per_kb: per_kb(c.mio_cycles),
                hot_mio_per_kb: per_kb(c.hot_mio_cycles),
                in_flight_kb: in_flight / KB,
                trips_before_state: c.trips_before_state,
                trips: c.trips,
                issue,
                mio,
                latency,
                waves,
                percent_of_floor: pct,
                limiter: if waves < bound { "waves" } else { limiter },
                time_us: floor_bytes / m.bandwidth / (pct / 100.0) * 1e6,
            })
        })
        .collect()
}

/// The implementation the model ranks first for a case (fastest predicted time).
pub fn best<'a>(predictions: &'a [Prediction], case: &str) -> Option<&'a Prediction> {
    predictions
        .iter()
        .filter(|p| p.kernel.case == case)
        .min_by(|a, b| a.time_us.total_cmp(&b.time_us))
}

/// The prediction for a case and implementation.
pub fn find<'a>(predictions: &'a [Prediction], case: &str, implementation: &str) -> Option<&'a Prediction> {
    predictions
        .iter()
        .find(|p| p.kernel.case == case && p.kernel.implementation == implementation)
}

/// The speculative step over every layer against the recurrent baseline
/// (`layers x R-window + the snapshot copy`), with the given V, F and VF implementations.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Step {
    pub baseline_us: f64,
    pub v_plus_f_us: f64,
    pub vf_us: f64,
}

impl Step {
    pub fn v_plus_f_ratio(&self) -> f64 {
        self.baseline_us / self.v_plus_f_us
    }
    pub fn vf_ratio(&self) -> f64 {
        self.baseline_us / self.vf_us
    }
}

pub fn step(m: &Machine, p: &Point, r: &Prediction, v: &Prediction, f: &Prediction, vf: &Prediction) -> Option<Step> {
    let floors = kernel_floors(&p.shape, p.act, p.batch, p.t);
    let copy = floors.iter().find(|x| x.kernel == "copy")?.bytes;
    let layers = p.shape.layers as f64;
    let copy_us = copy / (m.bandwidth * m.copy_fraction) * 1e6;
    Some(Step {
        baseline_us: layers * r.time_us + copy_us,
        v_plus_f_us: layers * v.time_us + f.time_us,
        vf_us: layers * vf.time_us,
    })
}

/// The buffered step over every layer at cache length `cache_len` (every draft accepted):
/// `layers x VB` plus F's flush amortised over the cycle, F running at its predicted % of floor
/// (`f`) on the flush's bytes (`floor::buffered_step_bytes`). `None` where L < 2 T.
pub fn buffered_step_us(m: &Machine, p: &Point, vb: &Prediction, f: &Prediction, cache_len: usize) -> Option<f64> {
    if cache_len < 2 * p.t {
        return None;
    }
    let (_, flush) =
        crate::floor::buffered_step_bytes(&p.shape.dims, p.shape.variant, p.act, p.batch, p.t, cache_len, p.t);
    let layers = p.shape.layers as f64;
    let flush_us = layers * flush / (m.bandwidth * f.percent_of_floor / 100.0) * 1e6;
    Some(layers * vb.time_us + flush_us)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_history_replay_runs_the_cycles_average() {
        // T = 4: L = 16 flushes every 4 steps (histories 0, 4, 8, 12), L = 32 every 8; T = 8 at
        // L = 16 every 2 steps (histories 0, 8).
        assert_eq!(history_records(16, 4.0), 6.0);
        assert_eq!(history_records(32, 4.0), 14.0);
        assert_eq!(history_records(16, 8.0), 4.0);
        assert_eq!(history_records(32, 8.0), 12.0);
    }

    #[test]
    fn the_h200_budgets_are_the_documented_ones() {
        // 4 x 1.98e9 x 1000 / (4.3e12 / 132) = 243.1; a quarter of that for MIO; 26 KB in flight.
        assert!((H200.issue_budget() - 243.1).abs() < 0.1, "{}", H200.issue_budget());
        assert!((H200.mio_budget() - 60.8).abs() < 0.1, "{}", H200.mio_budget());
        assert!((H200.reads_in_flight(1.0) / KB - 26.1).abs() < 0.1);
        assert!((H200.reads_in_flight(0.5) / KB - 13.0).abs() < 0.1);
    }
}
