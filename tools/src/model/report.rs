//! The model's table: every implementation at the acceptance grid, the model's choice per case,
//! and the step ratios with today's defaults and with the model's choices.

use std::fmt::Write as _;

use replayssm::dtype::DType;

use super::sass::Function;
use super::{best, buffered_step_us, find, predict, step, Machine, Point, Prediction};
use crate::floor::{ModelShape, MODEL_SHAPES};

/// The shapes, batches and windows `replayssm model` prints: K = V = 128, bf16, GDN and KDA.
pub const SHAPES: [&str; 2] = ["Qwen3.5-122B", "Kimi-K3-TP8"];
pub const BATCHES: [usize; 3] = [1, 64, 128];
pub const WINDOWS: [usize; 2] = [4, 8];

/// The implementation every call takes today without a tuning table.
pub const DEFAULT_IMPL: &str = "default";

fn shape(name: &str) -> Option<ModelShape> {
    MODEL_SHAPES.iter().copied().find(|s| s.name == name)
}

/// Every point of the grid with its predictions.
pub fn grid(functions: &[Function], m: &Machine) -> Vec<(Point, Vec<Prediction>)> {
    let mut out = vec![];
    for s in SHAPES.iter().filter_map(|n| shape(n)) {
        for &batch in &BATCHES {
            for &t in &WINDOWS {
                let p = Point {
                    shape: s,
                    act: DType::BF16,
                    batch,
                    t,
                };
                out.push((p, predict(functions, m, &p)));
            }
        }
    }
    out
}

/// Step ratios at a point with the given choice of implementation per case.
pub fn step_with(
    m: &Machine,
    p: &Point,
    ps: &[Prediction],
    choose: &dyn Fn(&str) -> Option<&'static str>,
) -> Option<super::Step> {
    let pick = |case: &str| match choose(case) {
        Some(i) => find(ps, case, i),
        None => best(ps, case),
    };
    step(m, p, pick("R-window")?, pick("V")?, pick("F")?, pick("VF")?)
}

/// The text table.
pub fn render(m: &Machine, grid: &[(Point, Vec<Prediction>)]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "PREDICTIONS of the executable model (not measurements): sm_90 SASS of this build against the H200 \
         ({:.0} SMs, {:.2} GHz, {:.1} TB/s, {:.1} us round trip); budgets per KB (1000 B) of state moved: \
         {:.0} warp-instructions, {:.0} MIO cycles; reads in flight needed per SM: {:.0} KB (read-only), {:.0} KB (read+write)",
        m.sms,
        m.clock_hz / 1e9,
        m.bandwidth / 1e12,
        m.latency_s * 1e6,
        m.issue_budget(),
        m.mio_budget(),
        m.reads_in_flight(1.0) / 1e3,
        m.reads_in_flight(0.5) / 1e3
    );
    let _ = writeln!(
        s,
        "{:<13} {:>3} {:>2} {:<10} {:<9} {:>4} {:>3} {:>7} {:>7} {:>6} {:>6} {:>6} {:>5} {:>5} {:>5} {:>5} {:>5} {:>5} {:>6} {:<8} {:>9}",
        "shape", "B", "T", "kernel", "impl", "regs", "blk", "ins/KB", "hot/KB", "mio/KB", "hotmio", "fly_KB",
        "pre", "trips", "iss%", "mio%", "lat%", "wave", "%floor", "limit", "us"
    );
    for (p, ps) in grid {
        for x in ps {
            let chosen = best(ps, x.kernel.case).is_some_and(|b| b.kernel == x.kernel);
            let _ = writeln!(
                s,
                "{:<13} {:>3} {:>2} {:<10} {:<9} {:>4} {:>3} {:>7.0} {:>7.0} {:>6.0} {:>6.0} {:>6.1} {:>5.1} {:>5.1} {:>5.0} {:>5.0} {:>5.0} {:>5.2} {:>6.1} {:<8} {:>9.2}{}",
                p.shape.name,
                p.batch,
                p.t,
                x.kernel.case,
                x.kernel.implementation,
                x.registers,
                x.blocks_per_sm,
                x.instructions_per_kb,
                x.hot_instructions_per_kb,
                x.mio_per_kb,
                x.hot_mio_per_kb,
                x.in_flight_kb,
                x.trips_before_state,
                x.trips,
                100.0 * x.issue,
                100.0 * x.mio,
                100.0 * x.latency,
                x.waves,
                x.percent_of_floor,
                x.limiter,
                x.time_us,
                if chosen { "  <- model's choice" } else { "" }
            );
        }
    }
    let _ = writeln!(s, "\nstep over all layers against the recurrent baseline (layers x R-window + the snapshot copy at {:.0} % of its floor):", 100.0 * m.copy_fraction);
    let _ = writeln!(
        s,
        "{:<13} {:>3} {:>2} {:>12} {:>14} {:>11} {:>14} {:>9} {:>9} {:>9}",
        "shape", "B", "T", "baseline_us", "V+F default", "VF default", "V+F model", "VF model", "VB L=16", "VB L=32"
    );
    for (p, ps) in grid {
        let on_default = step_with(m, p, ps, &|c| Some(if c == "R-window" { "-" } else { DEFAULT_IMPL }));
        let chosen = step_with(m, p, ps, &|_| None);
        if let (Some(a), Some(b)) = (on_default, chosen) {
            let vb = |l: usize| {
                let ratio = buffered_ratio(m, p, ps, b.baseline_us, l);
                ratio.map_or("-".to_string(), |x| format!("{x:.2}x"))
            };
            let _ = writeln!(
                s,
                "{:<13} {:>3} {:>2} {:>12.1} {:>13.2}x {:>10.2}x {:>13.2}x {:>8.2}x {:>9} {:>9}",
                p.shape.name,
                p.batch,
                p.t,
                a.baseline_us,
                a.v_plus_f_ratio(),
                a.vf_ratio(),
                b.v_plus_f_ratio(),
                b.vf_ratio(),
                vb(16),
                vb(32)
            );
        }
    }
    let _ = writeln!(
        s,
        "(VB L=l: the buffered step, every draft accepted: layers x VB-Ll + F's flush amortised over the cycle at F's predicted % of floor)"
    );
    s
}

/// The buffered step's ratio against the baseline at cache length `l` with the model's F.
pub fn buffered_ratio(m: &Machine, p: &Point, ps: &[Prediction], baseline_us: f64, l: usize) -> Option<f64> {
    let vb = best(ps, &format!("VB-L{l}"))?;
    let f = best(ps, "F")?;
    buffered_step_us(m, p, vb, f, l).map(|us| baseline_us / us)
}
