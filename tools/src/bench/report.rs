//! A run's rows: every measured case, its percent of floor and its ratio against the recurrent
//! counterpart measured in the same run, plus the derived rows (the D cycle, the spec step);
//! written as the results JSON (`bench/results/<date>-<name>.json`) and as a terminal table.

use serde_json::{json, Value};

use super::{floor_of, CaseResult, DeviceFacts, Kernel, Outcome};
use crate::floor::floor_us;
use replayssm::backend::Backend;

/// Everything a run produced.
#[derive(Clone, Debug)]
pub struct Report {
    pub backend: Backend,
    pub device: Option<DeviceFacts>,
    /// Measured device-to-device copy bandwidth, bytes/s (read + written).
    pub copy_bandwidth: Option<f64>,
    /// Why nothing was timed (emulated runs).
    pub no_timing_reason: Option<String>,
    pub results: Vec<CaseResult>,
}

/// One performance target and where this run stands.
#[derive(Clone, Debug, PartialEq)]
pub struct Target {
    pub what: String,
    pub threshold: f64,
    /// The worst measured value and the row it came from.
    pub worst: Option<(f64, String)>,
}

impl Target {
    fn new(what: &str, threshold: f64, worst: Option<(f64, String)>) -> Target {
        Target {
            what: what.to_string(),
            threshold,
            worst,
        }
    }

    /// `Some(met)` when measured.
    pub fn met(&self) -> Option<bool> {
        self.worst.as_ref().map(|(v, _)| *v >= self.threshold)
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.worst {
            None => write!(f, "target {}: not measured in this run", self.what),
            Some((v, at)) => write!(
                f,
                "target {}: worst {v:.2} at {at}: {}",
                self.what,
                if *v >= self.threshold { "met" } else { "MISSED" }
            ),
        }
    }
}

/// One line of the results: a measured case or a derived one.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// A kernel name, `D-cycle`, `V+F step`, `VF step` or `VB-L<l> step`.
    pub kernel: String,
    pub shape: &'static str,
    pub batch: usize,
    pub t: usize,
    pub median_us: Option<f64>,
    pub p10_us: Option<f64>,
    pub p90_us: Option<f64>,
    pub floor_bytes: f64,
    pub floor_us: Option<f64>,
    pub percent_of_floor: Option<f64>,
    /// What the ratio is against, when the row has a recurrent counterpart.
    pub baseline: Option<&'static str>,
    /// Baseline time over this row's time (> 1: faster than the baseline).
    pub ratio_vs_baseline: Option<f64>,
    pub graph: Option<bool>,
    pub sets: Option<usize>,
    /// `timed`, `ran` (emulated, untimed), `derived`, `skipped: ...`, `failed: ...`.
    pub status: String,
}

impl Report {
    /// The median of `kernel` at (shape, B, T), when it was timed.
    fn median(&self, kernel: Kernel, shape: &str, batch: usize, t: usize) -> Option<f64> {
        let t = if kernel.uses_window() { t } else { 1 };
        self.results.iter().find_map(|r| match &r.outcome {
            Outcome::Timed { timing, .. }
                if r.case.kernel == kernel && r.case.shape.name == shape && r.case.batch == batch && r.case.t == t =>
            {
                Some(timing.median_us)
            }
            _ => None,
        })
    }

    fn floor_time(&self, bytes: f64) -> Option<f64> {
        self.copy_bandwidth.map(|bw| floor_us(bytes, bw))
    }

    /// Every row: the measured cases in run order, then the derived ones.
    pub fn rows(&self) -> Vec<Row> {
        let mut rows = vec![];
        for r in &self.results {
            let c = &r.case;
            let (s, b, t) = (c.shape.name, c.batch, c.t);
            let (baseline, base_us) = match c.kernel {
                Kernel::V => (
                    Some("R-window (recurrent verify writing T snapshots)"),
                    self.median(Kernel::RWindow, s, b, t),
                ),
                Kernel::F => (
                    Some("copy (recurrent commit of the accepted snapshots, all layers)"),
                    self.median(Kernel::Copy, s, b, t),
                ),
                // VF (and VB) does one layer's verify and commit: against the recurrent verify
                // plus one layer's share of the commit copy.
                Kernel::VF | Kernel::VbL16 | Kernel::VbL32 => (
                    Some("R-window + copy / layers (recurrent verify and its commit, per layer)"),
                    self.median(Kernel::RWindow, s, b, t)
                        .zip(self.median(Kernel::Copy, s, b, t))
                        .map(|(rw, cp)| rw + cp / c.shape.layers as f64),
                ),
                _ => (None, None),
            };
            let mut row = Row {
                kernel: c.kernel.name().to_string(),
                shape: s,
                batch: b,
                t,
                median_us: None,
                p10_us: None,
                p90_us: None,
                floor_bytes: r.floor_bytes,
                floor_us: self.floor_time(r.floor_bytes),
                percent_of_floor: None,
                baseline,
                ratio_vs_baseline: None,
                graph: None,
                sets: None,
                status: String::new(),
            };
            match &r.outcome {
                Outcome::Timed { timing, sets } => {
                    row.median_us = Some(timing.median_us);
                    row.p10_us = Some(timing.p10_us);
                    row.p90_us = Some(timing.p90_us);
                    row.percent_of_floor = row.floor_us.map(|f| 100.0 * f / timing.median_us);
                    row.ratio_vs_baseline = base_us.map(|bu| bu / timing.median_us);
                    row.graph = Some(timing.graph);
                    row.sets = Some(*sets);
                    row.status = "timed".into();
                }
                Outcome::Ran => row.status = "ran".into(),
                Outcome::Skipped(why) => row.status = format!("skipped: {why}"),
                Outcome::Failed(why) => row.status = format!("failed: {why}"),
            }
            rows.push(row);
        }
        rows.extend(self.derived());
        rows
    }

    /// D per cycle of L steps, `((L-1)·t_nonflush + t_flush)/L`, against R-decode; one spec step
    /// over all layers, `layers·t_V + t_F`, the deferred step `layers·t_VF` and the buffered step
    /// `layers·t_VB + t_F / cycle`, each against `layers·t_R-window + t_copy`.
    fn derived(&self) -> Vec<Row> {
        let mut out = vec![];
        let mut seen = vec![];
        for r in &self.results {
            let c = &r.case;
            let key = (c.shape.name, c.batch, c.t);
            if !c.kernel.uses_window() || seen.contains(&key) {
                continue;
            }
            seen.push(key);
            let (s, b, t) = key;
            let m = |k| self.median(k, s, b, t);
            let base = |kernel: &str, bytes: f64, us: f64, baseline: &'static str, base_us: Option<f64>| {
                let floor = self.floor_time(bytes);
                Row {
                    kernel: kernel.to_string(),
                    shape: s,
                    batch: b,
                    t,
                    median_us: Some(us),
                    p10_us: None,
                    p90_us: None,
                    floor_bytes: bytes,
                    floor_us: floor,
                    percent_of_floor: floor.map(|f| 100.0 * f / us),
                    baseline: Some(baseline),
                    ratio_vs_baseline: base_us.map(|bu| bu / us),
                    graph: None,
                    sets: None,
                    status: "derived".into(),
                }
            };
            if let (Some(nf), Some(fl)) = (m(Kernel::DNonflush), m(Kernel::DFlush)) {
                let l = t as f64;
                let us = ((l - 1.0) * nf + fl) / l;
                let bytes = floor_of(&c.shape, c.dtype, b, t, "D-cycle");
                out.push(base(
                    "D-cycle",
                    bytes,
                    us,
                    "R-decode (recurrent decode, per step)",
                    m(Kernel::RDecode),
                ));
            }
            let nl = c.shape.layers as f64;
            let step_base = match (m(Kernel::RWindow), m(Kernel::Copy)) {
                (Some(rw), Some(cp)) => Some(nl * rw + cp),
                _ => None,
            };
            const STEP_BASELINE: &str = "layers x R-window + copy (recurrent verify with T snapshots, then the commit)";
            if let (Some(v), Some(f)) = (m(Kernel::V), m(Kernel::F)) {
                let us = nl * v + f;
                let bytes = nl * floor_of(&c.shape, c.dtype, b, t, "V") + floor_of(&c.shape, c.dtype, b, t, "F");
                out.push(base("V+F step", bytes, us, STEP_BASELINE, step_base));
            }
            // The deferred step: its fold is the previous step's, so a step is VF on every layer.
            if let Some(vf) = m(Kernel::VF) {
                let bytes = floor_of(&c.shape, c.dtype, b, t, "step-VF");
                out.push(base("VF step", bytes, nl * vf, STEP_BASELINE, step_base));
            }
            // The buffered step: VB on every layer, plus F's flush once a cycle. F is timed
            // folding T records per row; the flush folds the cycle's history, about the same
            // state traffic with more records, so F's time stands for it (a lower bound).
            if let Some(f) = m(Kernel::F) {
                for k in [Kernel::VbL16, Kernel::VbL32] {
                    let (Some(vb), Some(l)) = (m(k), k.cache_len()) else {
                        continue;
                    };
                    let us = nl * vb + f / super::cases::buffered_cycle(t, l) as f64;
                    let bytes = floor_of(&c.shape, c.dtype, b, t, &format!("step-{}", k.name()));
                    out.push(base(&format!("{} step", k.name()), bytes, us, STEP_BASELINE, step_base));
                }
            }
        }
        out
    }

    /// The performance targets, each judged on the rows of this run (`None`: no row measured it).
    pub fn targets(&self) -> Vec<Target> {
        let rows = self.rows();
        // The worst row of `kernel` among `keep`, by `value`.
        let worst = |kernel: &str, keep: &dyn Fn(&Row) -> bool, value: &dyn Fn(&Row) -> Option<f64>| {
            rows.iter()
                .filter(|r| r.kernel == kernel && keep(r))
                .filter_map(|r| value(r).map(|v| (v, format!("{} B={} T={}", r.shape, r.batch, r.t))))
                .min_by(|a, b| a.0.total_cmp(&b.0))
        };
        let pct = |r: &Row| r.percent_of_floor;
        let ratio = |r: &Row| r.ratio_vs_baseline;
        let big = |r: &Row| r.batch >= 64;
        let mut out = vec![
            Target::new("F >= 80 % of its floor at B >= 64", 80.0, worst("F", &big, &pct)),
            Target::new("V >= 70 % of its floor at B >= 64", 70.0, worst("V", &big, &pct)),
            Target::new(
                "V+F step >= 2.0x the recurrent verify + copy, Qwen3.5-122B, B = 128, T = 4",
                2.0,
                worst(
                    "V+F step",
                    &|r: &Row| r.shape == "Qwen3.5-122B" && r.batch == 128 && r.t == 4,
                    &ratio,
                ),
            ),
            Target::new(
                "VF step >= 2.0x the recurrent verify + copy, Qwen3.5-122B, B = 128, T = 4",
                2.0,
                worst(
                    "VF step",
                    &|r: &Row| r.shape == "Qwen3.5-122B" && r.batch == 128 && r.t == 4,
                    &ratio,
                ),
            ),
            Target::new(
                "D non-flush >= 70 % of its floor at B >= 64",
                70.0,
                worst("D-nonflush", &big, &pct),
            ),
        ];
        out.push(Target::new(
            "VB-L16 step >= 4.0x the recurrent verify + copy, Qwen3.5-122B, B = 128, T = 4",
            4.0,
            worst(
                "VB-L16 step",
                &|r: &Row| r.shape == "Qwen3.5-122B" && r.batch == 128 && r.t == 4,
                &ratio,
            ),
        ));
        // At B = 1 no kernel may be slower than 1.5x its baseline: ratio >= 1/1.5 for each.
        for k in ["V", "F", "D-cycle", "V+F step", "VF step"] {
            out.push(Target::new(
                &format!("{k} at B = 1 no slower than 1.5x its baseline (ratio >= 0.667)"),
                1.0 / 1.5,
                worst(k, &|r: &Row| r.batch == 1, &ratio),
            ));
        }
        out
    }

    /// The results file: run facts, then one object per row.
    pub fn to_json(&self, command: &str, commit: &str, date: &str, clocks: Option<&str>) -> Value {
        let dev = self.device.as_ref();
        let rows: Vec<Value> = self
            .rows()
            .iter()
            .map(|r| {
                json!({
                    "kernel": r.kernel, "shape": r.shape, "B": r.batch, "T": r.t,
                    "median_us": r.median_us, "p10_us": r.p10_us, "p90_us": r.p90_us,
                    "bytes": r.floor_bytes, "floor_us": r.floor_us,
                    "percent_of_floor": r.percent_of_floor,
                    "baseline": r.baseline, "ratio_vs_baseline": r.ratio_vs_baseline,
                    "copy_bandwidth_tbs": self.copy_bandwidth.map(|b| b / 1e12),
                    "graph": r.graph, "input_sets": r.sets, "status": r.status,
                })
            })
            .collect();
        json!({
            "format": "replayssm-bench/1",
            "date": date,
            "backend": self.backend.name(),
            "gpu": dev.map(|d| d.name.clone()),
            "compute_capability": dev.map(|d| format!("{}.{}", d.compute_capability.0, d.compute_capability.1)),
            "driver": dev.map(|d| d.driver_version),
            "cuda_runtime": dev.map(|d| d.runtime_version),
            "sm_count": dev.map(|d| d.sm_count),
            "l2_bytes": dev.map(|d| d.l2_bytes),
            "memory_bytes": dev.map(|d| d.total_bytes),
            "clocks": clocks,
            "command": command,
            "commit": commit,
            "copy_bandwidth_tbs": self.copy_bandwidth.map(|b| b / 1e12),
            "timing": if self.copy_bandwidth.is_some() {
                "CUDA events after warm-up; median per launch; graph replay under 50 us"
            } else {
                "none"
            },
            "no_timing_reason": self.no_timing_reason,
            "targets": self.targets().iter().map(|t| json!({
                "target": t.what, "threshold": t.threshold,
                "worst": t.worst.as_ref().map(|w| w.0), "worst_at": t.worst.as_ref().map(|w| w.1.clone()),
                "met": t.met(),
            })).collect::<Vec<_>>(),
            "cases": rows,
        })
    }

    /// A fixed-width table of the rows.
    pub fn table(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{:<10} {:<17} {:>4} {:>2} {:>11} {:>11} {:>8} {:>7}  status",
            "kernel", "shape", "B", "T", "median_us", "floor_us", "%floor", "x base"
        );
        let opt = |x: Option<f64>, prec: usize| x.map_or("-".to_string(), |v| format!("{v:.prec$}"));
        for r in self.rows() {
            let status = if r.status.len() > 60 {
                format!("{}...", r.status.chars().take(57).collect::<String>())
            } else {
                r.status.clone()
            };
            let _ = writeln!(
                s,
                "{:<10} {:<17} {:>4} {:>2} {:>11} {:>11} {:>8} {:>7}  {}",
                r.kernel,
                r.shape,
                r.batch,
                r.t,
                opt(r.median_us, 2),
                opt(r.floor_us, 2),
                opt(r.percent_of_floor, 1),
                opt(r.ratio_vs_baseline, 2),
                status
            );
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::{Case, TINY_SHAPE};
    use replayssm::dtype::DType;

    fn timed(kernel: Kernel, t: usize, us: f64) -> CaseResult {
        let case = Case {
            kernel,
            shape: TINY_SHAPE,
            batch: 8,
            t: if kernel.uses_window() { t } else { 1 },
            dtype: DType::BF16,
        };
        CaseResult::timed_at(case, us)
    }

    #[test]
    fn ratios_and_derived_rows_follow_their_formulas() {
        let bw = 4.0e12;
        let rep = Report {
            backend: Backend::Cuda,
            device: None,
            copy_bandwidth: Some(bw),
            no_timing_reason: None,
            results: vec![
                timed(Kernel::RDecode, 4, 10.0),
                timed(Kernel::Copy, 4, 30.0),
                timed(Kernel::RWindow, 4, 40.0),
                timed(Kernel::V, 4, 8.0),
                timed(Kernel::F, 4, 50.0),
                timed(Kernel::DNonflush, 4, 4.0),
                timed(Kernel::DFlush, 4, 12.0),
                timed(Kernel::VF, 4, 9.0),
            ],
        };
        let rows = rep.rows();
        let get = |k: &str| rows.iter().find(|r| r.kernel == k).unwrap().clone();
        let v = get("V");
        assert_eq!(v.ratio_vs_baseline, Some(40.0 / 8.0));
        let pct = 100.0 * floor_us(v.floor_bytes, bw) / 8.0;
        assert!((v.percent_of_floor.unwrap() - pct).abs() < 1e-9);
        assert_eq!(get("F").ratio_vs_baseline, Some(30.0 / 50.0));
        assert_eq!(get("R-window").ratio_vs_baseline, None);
        // D over a cycle of L = 4: (3 * 4 + 12) / 4 = 6 us, against R-decode's 10.
        let d = get("D-cycle");
        assert_eq!(d.median_us, Some(6.0));
        assert_eq!(d.ratio_vs_baseline, Some(10.0 / 6.0));
        // The step over TINY_SHAPE's 3 layers: 3 * 8 + 50 against 3 * 40 + 30.
        let step = get("V+F step");
        assert_eq!(step.median_us, Some(74.0));
        assert_eq!(step.ratio_vs_baseline, Some(150.0 / 74.0));
        // VF against R-window plus a layer's share of the copy: (40 + 30 / 3) / 9; its step is
        // 3 * 9 against the same 150, with the step-VF floor.
        assert_eq!(get("VF").ratio_vs_baseline, Some(50.0 / 9.0));
        let vf_step = get("VF step");
        assert_eq!(vf_step.median_us, Some(27.0));
        assert_eq!(vf_step.ratio_vs_baseline, Some(150.0 / 27.0));
        assert_eq!(
            vf_step.floor_bytes,
            3.0 * crate::bench::floor_of(&TINY_SHAPE, DType::BF16, 8, 4, "VF")
        );
        let j = rep.to_json("cmd", "abc", "2026-12-03", None);
        assert_eq!(j["cases"].as_array().unwrap().len(), rows.len());
        assert_eq!(j["cases"][3]["kernel"], "V");
        assert_eq!(j["copy_bandwidth_tbs"], 4.0);
        assert!(rep.table().lines().count() == rows.len() + 1);
        // Targets on the same rows: all at B = 8 here, so the B >= 64 ones are not measured.
        let t = rep.targets();
        assert!(t[0].worst.is_none() && t[0].met().is_none(), "{}", t[0]);
        assert!(t.iter().all(|t| t.worst.is_none()), "nothing at B = 1 or 64 either");
        assert_eq!(j["targets"].as_array().unwrap().len(), t.len());
    }

    #[test]
    fn targets_take_the_worst_row_and_compare_it_with_the_threshold() {
        let at = |k: Kernel, b: usize, us: f64| {
            let mut r = timed(k, 4, us);
            r.case.batch = b;
            r.floor_bytes = crate::bench::floor_bytes(&r.case);
            r
        };
        let mut results = vec![];
        for (b, f_us, v_us) in [(64, 10.0, 8.0), (128, 20.0, 40.0)] {
            results.extend([at(Kernel::F, b, f_us), at(Kernel::V, b, v_us)]);
        }
        // V and R-window at B = 1: V 3x faster than its baseline.
        results.extend([at(Kernel::V, 1, 1.0), at(Kernel::RWindow, 1, 3.0)]);
        let bw = 4.0e12;
        let rep = Report {
            backend: Backend::Cuda,
            device: None,
            copy_bandwidth: Some(bw),
            no_timing_reason: None,
            results,
        };
        let t = rep.targets();
        let pct = |k: Kernel, b: usize, us: f64| {
            let mut c = timed(k, 4, us).case;
            c.batch = b;
            100.0 * floor_us(crate::bench::floor_bytes(&c), bw) / us
        };
        // F: the worse of B = 64 and 128 (percent of floor), judged against 80 %.
        let f_worst = pct(Kernel::F, 64, 10.0).min(pct(Kernel::F, 128, 20.0));
        assert_eq!(t[0].worst.as_ref().unwrap().0, f_worst);
        assert_eq!(t[0].met(), Some(f_worst >= 80.0));
        let v_worst = pct(Kernel::V, 64, 8.0).min(pct(Kernel::V, 128, 40.0));
        assert_eq!(t[1].worst.as_ref().unwrap().0, v_worst);
        assert!(t[1].to_string().contains("tiny B="), "{}", t[1]);
        // V at B = 1: ratio 3 >= 0.667, met.
        let v1 = t.iter().find(|t| t.what.starts_with("V at B = 1")).unwrap();
        assert_eq!(v1.worst.as_ref().unwrap().0, 3.0);
        assert_eq!(v1.met(), Some(true));
        assert!(v1.to_string().ends_with(": met"), "{v1}");
    }

    #[test]
    fn untimed_rows_carry_no_numbers() {
        let mut r = timed(Kernel::V, 4, 1.0);
        r.outcome = Outcome::Ran;
        let rep = Report {
            backend: Backend::Emulated,
            device: None,
            copy_bandwidth: None,
            no_timing_reason: Some("why".into()),
            results: vec![r],
        };
        let rows = rep.rows();
        assert_eq!(rows.len(), 1, "no derived rows without timings");
        assert_eq!(rows[0].median_us, None);
        assert_eq!(rows[0].percent_of_floor, None);
        assert_eq!(rows[0].status, "ran");
    }
}
