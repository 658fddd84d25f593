//! `scripts/device-check` without a GPU, through its dry run (`REPLAYSSM_DEVICE_CHECK_DRY_RUN=1`,
//! every step's command replaced by `sleep`): the printed plan and its budgets (at most the 540 s
//! default deadline, the same as the script's header says), the deadline's validation, steps
//! skipped when the deadline comes near, a step stopped at its own limit, TERM stopping the run
//! with the summary still written, and a report whose every step section shows its limit, exit
//! code and seconds. The device half proper (the bundle, the GPU) is not exercised here.
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The variables the script reads, removed so that the caller's environment cannot leak in.
const SCRIPT_VARS: &[&str] = &[
    "OUT",
    "REPLAYSSM_DEVICE_DEADLINE_S",
    "REPLAYSSM_DEVICE_EXTRA",
    "REPLAYSSM_BENCH_FULL",
    "REPLAYSSM_DEVICE_CHECK_DRY_RUN",
    "REPLAYSSM_DEVICE_CHECK_FAKE_STEP_S",
];

/// The default deadline and what the script keeps back of it.
const DEFAULT_DEADLINE_S: u64 = 540;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/device-check")
}

/// A fresh, empty directory for one test's $OUT.
fn out_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("replayssm-device-check-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `bash scripts/device-check` in a dry run writing into `out`, with `env` on top.
fn dry_run(out: &Path, env: &[(&str, &str)]) -> Command {
    let mut c = Command::new("bash");
    c.arg(script());
    for v in SCRIPT_VARS {
        c.env_remove(v);
    }
    c.env("REPLAYSSM_DEVICE_CHECK_DRY_RUN", "1").env("OUT", out);
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn describe(o: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status,
        text(&o.stdout),
        text(&o.stderr)
    )
}

fn report(out: &Path) -> String {
    std::fs::read_to_string(out.join("device-check.txt")).unwrap()
}

/// The `plan:` line's steps and budgets, and the total and deadline it states.
fn parse_plan(stdout: &str) -> (Vec<(String, u64)>, u64, u64) {
    let line = stdout
        .lines()
        .find(|l| l.starts_with("plan: "))
        .unwrap_or_else(|| panic!("no plan line in\n{stdout}"));
    let mut items: Vec<&str> = line["plan: ".len()..].split(", ").collect();
    let total = items.pop().unwrap();
    let (total, deadline) = total
        .strip_prefix("total ")
        .and_then(|t| t.split_once("s of "))
        .unwrap_or_else(|| panic!("no 'total Ns of Ms' at the end of {line:?}"));
    let seconds = |s: &str| -> u64 {
        s.strip_suffix('s')
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{s:?} in {line:?}"))
    };
    let steps = items
        .iter()
        .map(|item| {
            let (name, budget) = item.split_once(' ').unwrap_or_else(|| panic!("{item:?} in {line:?}"));
            (name.to_string(), seconds(budget))
        })
        .collect();
    let total = total.parse().unwrap_or_else(|_| panic!("{total:?} in {line:?}"));
    (steps, total, seconds(deadline))
}

/// The report's step sections (the summary left out) as (name, lines after the heading).
fn sections(report: &str) -> Vec<(String, Vec<String>)> {
    let mut v: Vec<(String, Vec<String>)> = Vec::new();
    for line in report.lines() {
        if let Some(name) = line.strip_prefix("## ") {
            v.push((name.to_string(), Vec::new()));
        } else if let Some((_, body)) = v.last_mut() {
            body.push(line.to_string());
        }
    }
    v.retain(|(name, _)| !name.starts_with("summary"));
    v
}

/// Waits for `child` until `limit`, killing it (and failing) past that.
fn wait_at_most(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let t0 = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            panic!("scripts/device-check still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_plan_is_printed_in_priority_order_and_its_budgets_fit_the_540_second_deadline() {
    let out = out_dir("plan");
    let o = dry_run(&out, &[]).output().unwrap();
    assert!(o.status.success(), "{}", describe(&o));
    let stdout = text(&o.stdout);
    let (steps, total, deadline) = parse_plan(&stdout);
    let sum: u64 = steps.iter().map(|(_, b)| b).sum();
    assert_eq!(sum, total, "the plan's total is not the sum of its budgets:\n{stdout}");
    assert_eq!(deadline, DEFAULT_DEADLINE_S, "{stdout}");
    assert!(
        sum <= DEFAULT_DEADLINE_S,
        "budgets add up to {sum}s, over {DEFAULT_DEADLINE_S}s:\n{stdout}"
    );
    assert!(
        steps.iter().all(|(_, b)| *b >= 10),
        "a budget under the 10 s a step needs: {steps:?}"
    );
    // (a) correctness, (b) the tune sweep, (c) the timed grid, (d) the peers, (e) the sanitizers.
    let names: Vec<&str> = steps.iter().map(|(n, _)| n.as_str()).collect();
    let at = |name: &str| {
        names
            .iter()
            .position(|n| *n == name)
            .unwrap_or_else(|| panic!("{name} not in the plan {names:?}"))
    };
    assert_eq!(names[0], "info", "{names:?}");
    let order = [
        "info",
        "gpu-tests",
        "verify-fold",
        "python-torch-cuda",
        "tune",
        "bench",
        "sglang-peer",
        "fla-peer",
        "memcheck",
        "racecheck-demo",
    ];
    for w in order.windows(2) {
        assert!(at(w[0]) < at(w[1]), "{} should come before {} in {names:?}", w[0], w[1]);
    }
    for emulated in [
        "verify-tests-emulated",
        "fold-tests-emulated",
        "emulator",
        "demo",
        "check-cases-cuda",
    ] {
        assert!(
            !names.contains(&emulated),
            "{emulated} is in the default plan {names:?}"
        );
    }
    // The script's header documents the same budgets.
    let source = std::fs::read_to_string(script()).unwrap();
    for (name, budget) in &steps {
        let documented = source.lines().take_while(|l| l.starts_with('#')).any(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            words.windows(2).any(|w| w[0] == name && w[1] == format!("{budget}s"))
        });
        assert!(
            documented,
            "the header comment of scripts/device-check does not say '{name} {budget}s'"
        );
    }
    let plan_line = stdout.lines().find(|l| l.starts_with("plan: ")).unwrap();
    assert!(
        report(&out).lines().any(|l| l == plan_line),
        "the report lacks {plan_line:?}"
    );
}

#[test]
fn with_a_60_second_deadline_and_2_second_steps_the_last_steps_are_skipped_for_the_deadline() {
    let out = out_dir("deadline");
    let t0 = Instant::now();
    let o = dry_run(
        &out,
        &[
            ("REPLAYSSM_DEVICE_DEADLINE_S", "60"),
            ("REPLAYSSM_DEVICE_CHECK_FAKE_STEP_S", "2"),
        ],
    )
    .output()
    .unwrap();
    let elapsed = t0.elapsed();
    assert!(
        elapsed < Duration::from_secs(70),
        "took {elapsed:?} under a 60 s deadline"
    );
    assert!(o.status.success(), "{}", describe(&o));
    let stdout = text(&o.stdout);
    let (plan, total, deadline) = parse_plan(&stdout);
    assert_eq!(deadline, 60, "{stdout}");
    assert!(total > 60, "{stdout}");
    let report = report(&out);
    let sections = sections(&report);
    let names: Vec<&str> = sections.iter().map(|(n, _)| n.as_str()).collect();
    let planned: Vec<&str> = plan.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, planned, "{report}");
    let skipped = |body: &[String]| body.iter().any(|l| l.starts_with("skipped: deadline ("));
    let first_skipped = sections
        .iter()
        .position(|(_, body)| skipped(body))
        .unwrap_or_else(|| panic!("no step skipped for the deadline:\n{report}"));
    // 60 s - 10 s reserve - 10 s a step needs: about 20 steps of 2 s run, the rest are skipped.
    assert!(first_skipped >= 10, "only {first_skipped} steps ran:\n{report}");
    for (name, body) in &sections[..first_skipped] {
        assert!(
            body.iter().any(|l| l.starts_with("[exit 0, ")),
            "{name} did not run:\n{report}"
        );
    }
    for (name, body) in &sections[first_skipped..] {
        assert!(
            skipped(body),
            "{name} ran after a step was skipped for the deadline:\n{report}"
        );
        assert!(!body.iter().any(|l| l.starts_with("[limit ")), "{name}:\n{report}");
    }
    let why = &sections.last().unwrap().1[1];
    let used: u64 = why
        .strip_prefix("skipped: deadline (")
        .and_then(|r| r.strip_suffix("s of the 60s deadline used, 10s kept in reserve; a step needs 10s)"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{why:?}"));
    // Skipped only when less than the reserve plus a step's 10 s were left.
    assert!((41..=60).contains(&used), "skipped with {used}s of 60s used: {why:?}");
    // The summary on stdout (the device tool returns only the tail) says the same.
    let summary: Vec<&str> = stdout.lines().skip_while(|l| !l.starts_with("## summary")).collect();
    assert!(summary.len() > plan.len(), "no summary table on stdout:\n{stdout}");
    let last = summary.iter().find(|l| l.starts_with("racecheck-demo ")).unwrap();
    assert!(last.contains(" -  skipped: deadline "), "{last:?}");
    let first = summary.iter().find(|l| l.starts_with("info ")).unwrap();
    assert_eq!(
        first.split_whitespace().take(3).collect::<Vec<_>>(),
        ["info", "10s", "0"],
        "{first:?}"
    );
}

#[test]
fn a_deadline_outside_60_to_3600_seconds_exits_2_naming_the_variable() {
    let out = out_dir("bad-deadline");
    for bad in ["59", "3601", "0", "abc", "-60", "1e3", " 540", "99999999999999999999"] {
        let o = dry_run(&out, &[("REPLAYSSM_DEVICE_DEADLINE_S", bad)]).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{bad:?}: {}", describe(&o));
        assert_eq!(
            text(&o.stderr),
            format!(
                "device-check: REPLAYSSM_DEVICE_DEADLINE_S='{bad}' is not a whole number of seconds in 60..=3600\n"
            ),
        );
        assert!(o.stdout.is_empty(), "{bad:?}: {}", describe(&o));
        assert!(!out.join("device-check.txt").exists(), "{bad:?} wrote a report");
    }
    let o = dry_run(&out, &[("REPLAYSSM_DEVICE_CHECK_FAKE_STEP_S", "soon")])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", describe(&o));
    assert!(
        text(&o.stderr).contains("REPLAYSSM_DEVICE_CHECK_FAKE_STEP_S='soon'"),
        "{}",
        describe(&o)
    );
    // Both ends of the range are accepted.
    for good in ["60", "3600"] {
        let o = dry_run(&out, &[("REPLAYSSM_DEVICE_DEADLINE_S", good)])
            .output()
            .unwrap();
        assert!(o.status.success(), "{good}: {}", describe(&o));
        assert_eq!(parse_plan(&text(&o.stdout)).2.to_string(), good);
    }
}

#[test]
fn every_step_section_of_the_report_shows_its_limit_exit_code_and_seconds() {
    let out = out_dir("sections");
    let o = dry_run(&out, &[]).output().unwrap();
    assert!(o.status.success(), "{}", describe(&o));
    let (plan, _, _) = parse_plan(&text(&o.stdout));
    let report = report(&out);
    let sections = sections(&report);
    assert_eq!(sections.len(), plan.len(), "{report}");
    for ((name, body), (planned, budget)) in sections.iter().zip(&plan) {
        assert_eq!(name, planned, "{report}");
        assert!(
            body[0].starts_with(&format!("[limit {budget}s] $ ")),
            "{name}: {:?}, not its limit of {budget}s",
            body[0]
        );
        assert_eq!(body[1], "(dry run: sleep 0)", "{name}");
        let end = body.iter().rev().find(|l| !l.is_empty()).unwrap();
        assert!(
            end.starts_with("[exit 0, ") && end.ends_with("s]"),
            "{name} ends with {end:?}, not its exit code and seconds"
        );
    }
    let summary = report.lines().find(|l| l.starts_with("## summary (")).unwrap();
    assert!(
        summary.ends_with("s of the 540s deadline used; 0 skipped)"),
        "{summary:?}"
    );
}

#[test]
fn the_emulated_suites_run_only_with_device_extra_and_after_everything_else() {
    let out = out_dir("extra");
    let o = dry_run(&out, &[("REPLAYSSM_DEVICE_EXTRA", "1")]).output().unwrap();
    assert!(o.status.success(), "{}", describe(&o));
    let stdout = text(&o.stdout);
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("extra plan (REPLAYSSM_DEVICE_EXTRA=1): resources 15s, ")),
        "{stdout}"
    );
    let (plan, _, _) = parse_plan(&stdout);
    let report = report(&out);
    let sections = sections(&report);
    let names: Vec<&str> = sections.iter().map(|(n, _)| n.as_str()).collect();
    let planned: Vec<&str> = plan.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names[..planned.len()], planned[..], "{report}");
    let extra = &names[planned.len()..];
    for emulated in [
        "verify-tests-emulated",
        "fold-tests-emulated",
        "emulator",
        "hostile",
        "demo",
        "tuning",
    ] {
        assert!(
            extra.contains(&emulated),
            "{emulated} not run after the plan: {extra:?}"
        );
    }
    for (name, body) in &sections {
        assert!(body[0].starts_with("[limit "), "{name}: {:?}", body[0]);
    }
}

#[test]
fn a_step_past_its_limit_times_out_and_term_stops_the_run_with_the_summary_written() {
    let out = out_dir("timeout");
    // info's budget is 10 s: a step of 11 s runs out of time; gpu-tests then starts.
    let mut child = dry_run(
        &out,
        &[
            ("REPLAYSSM_DEVICE_DEADLINE_S", "60"),
            ("REPLAYSSM_DEVICE_CHECK_FAKE_STEP_S", "11"),
        ],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let t0 = Instant::now();
    let path = out.join("device-check.txt");
    loop {
        let so_far = std::fs::read_to_string(&path).unwrap_or_default();
        // gpu-tests' limit is its 40 s budget clamped to what is left of the
        // deadline, which a loaded machine shortens: match the section, not the number.
        if so_far.contains("\n## gpu-tests\n[limit ") && so_far.ends_with("(dry run: sleep 11)\n") {
            // Written and flushed step by step: what a kill would leave.
            assert!(so_far.contains("\n## info\n[limit 10s] $ "), "{so_far}");
            assert!(so_far.contains("\n[timed out after 10s] [exit 124, "), "{so_far}");
            break;
        }
        if t0.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("gpu-tests did not start within 30 s:\n{so_far}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(500));
    let stopped = Instant::now();
    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let status = wait_at_most(&mut child, Duration::from_secs(15));
    assert!(
        stopped.elapsed() < Duration::from_secs(5),
        "TERM did not stop the running step"
    );
    let mut stdout = String::new();
    child.stdout.take().unwrap().read_to_string(&mut stdout).unwrap();
    assert_eq!(status.code(), Some(143), "{stdout}");
    let report = std::fs::read_to_string(&path).unwrap();
    let sections = sections(&report);
    assert_eq!(sections[0].0, "info");
    assert_eq!(sections[1].0, "gpu-tests");
    assert!(
        sections[1].1.iter().any(|l| l.starts_with("[interrupted] [exit ")),
        "{report}"
    );
    for (name, body) in &sections[2..] {
        assert_eq!(body[1], "skipped: interrupted", "{name}:\n{report}");
    }
    let info = stdout
        .lines()
        .find(|l| l.starts_with("info "))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert_eq!(
        info.split_whitespace().take(5).collect::<Vec<_>>(),
        ["info", "10s", "timed", "out", "(124)"]
    );
    assert!(report.contains("\n## summary ("), "{report}");
}
