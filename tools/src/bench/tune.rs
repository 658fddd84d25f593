//! `replayssm bench --tune`: every implementation of every tunable case (V, F, P, D, VF), each launched
//! through the same C ABI entries with its choice pinned (`replayssm::tuning::force`), checked,
//! and on a GPU timed; the fastest per case becomes the tuning table's entry for that case's
//! bucket (the format `replayssm::tuning` reads, `bench/autotune/h200.json`).
//!
//! On the emulator every variant runs once and is checked (status, error word, NaN-poisoned
//! outputs) and nothing is timed, so the table it writes has no entries: its `source` says so and
//! `checked` lists what ran.

use replayssm::tuning::{self, Choice, Key, Table, TABLE_FORMAT};

use super::{run_case, BenchOptions, Case, CaseResult, DeviceFacts, Kernel, Outcome};
use replayssm::backend::Backend;
use replayssm::problem::Variant;

/// The tuning kernel a bench kernel runs, if it has implementations to choose from.
pub fn tunable(k: Kernel) -> Option<tuning::Kernel> {
    match k {
        Kernel::V => Some(tuning::Kernel::V),
        Kernel::F => Some(tuning::Kernel::F),
        Kernel::P => Some(tuning::Kernel::P),
        Kernel::DNonflush | Kernel::DFlush => Some(tuning::Kernel::D),
        Kernel::VF => Some(tuning::Kernel::VF),
        // VB's entries are keyed by T alone: the default cache length's case tunes them.
        Kernel::VbL16 => Some(tuning::Kernel::VB),
        _ => None,
    }
}

/// The table key of a bench case (F and P replay a ring of W = T records; D's window is L = T).
pub fn key(case: &Case, kernel: tuning::Kernel) -> Key {
    let d = case.shape.dims;
    Key {
        kernel,
        kda: case.shape.variant == Variant::Kda,
        k: d.k,
        v: d.v,
        hv: d.hv,
        window: case.t,
        batch: case.batch,
    }
}

/// One variant of one case.
#[derive(Clone, Debug)]
pub struct TuneResult {
    pub result: CaseResult,
    pub choice: Choice,
}

/// What a tune run produced: every variant's outcome and the table.
pub struct TuneReport {
    pub results: Vec<TuneResult>,
    pub table: Table,
}

/// Runs every implementation of every tunable case of `o`; `device` is set on a GPU.
pub fn run(
    o: &BenchOptions,
    device: Option<&DeviceFacts>,
    progress: &mut dyn FnMut(usize, usize, &TuneResult),
) -> TuneReport {
    let work: Vec<(Case, tuning::Kernel, Choice)> = o
        .cases()
        .into_iter()
        .filter_map(|c| tunable(c.kernel).map(|k| (c, k)))
        .flat_map(|(c, k)| Choice::all(k).into_iter().map(move |ch| (c, k, ch)))
        .collect();
    let mut results = Vec::with_capacity(work.len());
    for (i, (case, kernel, choice)) in work.iter().enumerate() {
        let outcome = if tuning::fits(&key(case, *kernel), *choice) {
            let _pinned = tuning::force(*kernel, *choice);
            run_case(o, case, device)
        } else {
            Outcome::Skipped(format!("{choice} does not fit this shape (shared memory or window)"))
        };
        let r = TuneResult {
            result: CaseResult {
                case: *case,
                floor_bytes: super::floor_bytes(case),
                outcome,
            },
            choice: *choice,
        };
        progress(i + 1, work.len(), &r);
        results.push(r);
    }
    let table = table(o, device, &results);
    TuneReport { results, table }
}

/// The table of a tune run: per case the fastest timed variant (a GPU run), or no entries and
/// the list of checked variants (the emulator).
fn table(o: &BenchOptions, device: Option<&DeviceFacts>, results: &[TuneResult]) -> Table {
    let mut t = Table {
        format: TABLE_FORMAT.to_string(),
        device: device.map(|d| d.name.clone()),
        source: String::new(),
        command: Some(std::env::args().collect::<Vec<_>>().join(" ")),
        date: Some(super::utc_now().0),
        entries: vec![],
        checked: vec![],
    };
    let timed = o.backend == Backend::Cuda;
    let mut i = 0;
    while i < results.len() {
        // The variants of one case are consecutive.
        let case = results[i].result.case;
        let mut j = i;
        while j < results.len() && same_case(&results[j].result.case, &case) {
            j += 1;
        }
        let group = &results[i..j];
        for r in group {
            if matches!(r.result.outcome, Outcome::Ran) {
                t.checked
                    .push(format!("{} {}: {}", r.result.case.kernel, describe(&case), r.choice));
            }
        }
        if timed {
            let us = |r: &TuneResult| match &r.result.outcome {
                Outcome::Timed { timing, .. } => Some(timing.median_us),
                _ => None,
            };
            let default_us = group.iter().find(|r| r.choice == Choice::DEFAULT).and_then(us);
            let best = group
                .iter()
                .filter_map(|r| us(r).map(|u| (u, r.choice)))
                .min_by(|a, b| a.0.total_cmp(&b.0));
            if let (Some((best_us, choice)), Some(kernel)) = (best, tunable(case.kernel)) {
                t.insert(&key(&case, kernel), choice, Some(best_us), default_us);
            }
        }
        i = j;
    }
    t.source = if timed {
        format!(
            "timed by replayssm bench --tune on {}: per case the fastest implementation (median of {} samples)",
            t.device.as_deref().unwrap_or("a GPU"),
            o.timing.samples
        )
    } else {
        format!(
            "the {} backend: every implementation ran once and was checked, nothing was timed, so no \
             entry (every call keeps RSSM_IMPL_DEFAULT); `checked` lists what ran",
            o.backend
        )
    };
    t
}

fn same_case(a: &Case, b: &Case) -> bool {
    a.kernel == b.kernel && a.shape.name == b.shape.name && a.batch == b.batch && a.t == b.t
}

fn describe(c: &Case) -> String {
    format!("{} B={} T={}", c.shape.name, c.batch, c.t)
}

/// One progress line.
pub fn line(r: &TuneResult) -> String {
    let c = &r.result.case;
    let how = match &r.result.outcome {
        Outcome::Timed { timing, .. } => format!("{:.2} us", timing.median_us),
        Outcome::Ran => "ran, checked".into(),
        Outcome::Skipped(why) => format!("skipped: {why}"),
        Outcome::Failed(why) => format!("FAILED: {why}"),
    };
    format!("{} [{}] {}: {how}", c.kernel, r.choice, describe(c))
}
