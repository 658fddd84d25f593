//! The SIMT emulator under resource pressure and hostile configuration (issue 28, class 2): when
//! it cannot get memory or threads, or `REPLAYSSM_EMU_THREADS` / `REPLAYSSM_EMU_SEED` do not
//! parse, a launch returns `RSSM_ERR_EMULATOR` with a message; it never aborts the process.
//!
//! The emulator reads its environment once per process and an address-space limit applies to a
//! whole process, so each case runs this test binary again as a child (the test
//! `child_runs_one_case`, selected by `CHILD`), under `setrlimit(RLIMIT_AS)` and a timeout. The
//! parent asserts the child exited by itself (never killed by a signal) and reads what it printed.
mod common;

use std::time::Duration;

use common::child::{self, set_address_space_limit, vm, Outcome};
use replayssm::backend::Backend;
use replayssm::emulator as emu;
use replayssm::{DType, HeadDims, Variant};
use replayssm_tools::workload::RecurrentData;

/// Selects the child's case (see `child_runs_one_case`).
const CHILD: &str = "REPLAYSSM_EMU_RESOURCES_CHILD";
const THREADS: &str = "REPLAYSSM_EMU_THREADS";
const SEED: &str = "REPLAYSSM_EMU_SEED";
const MIB: u64 = 1 << 20;

/// The line the child printed after `RESULT `.
fn result(out: &Outcome) -> &str {
    out.line_after("RESULT ").unwrap_or("<no RESULT line>")
}

/// Runs the child case `case` with `env` set (a `None` value removes the variable), under an
/// address-space limit of `limit` bytes when given, killed after 120 s.
fn child(case: &str, env: &[(&str, Option<&str>)], limit: Option<u64>) -> Outcome {
    let mut cmd = child::this_test("child_runs_one_case");
    cmd.env(CHILD, case).env_remove(THREADS).env_remove(SEED);
    for (k, v) in env {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    child::run(cmd, limit, Duration::from_secs(120))
}

/// A small kernel-R workload of 512 blocks (4 row blocks x 8 value heads x 16 requests), so
/// that a large thread count asks for that many workers (before the fix: 512 threads with 8 MiB
/// stacks, 4 GiB, and 128 fiber stacks of 256 KiB for each).
fn recurrent_case() -> String {
    let dims = HeadDims {
        h: 2,
        hv: 8,
        k: 32,
        v: 64,
    };
    let data = RecurrentData::random(&common::spec(Variant::Gdn, dims, DType::F32, &[2; 16]), 7);
    match common::run(Backend::Emulated, &data, false) {
        Ok(run) => {
            let j = common::judge(&data, &run, common::output_tolerance(DType::F32));
            assert!(j.o.passed() && j.state.passed(), "wrong result: {} / {}", j.o, j.state);
            "ok".to_string()
        }
        Err(e) => format!("error {e}"),
    }
}

fn emu_result(r: Result<(), emu::EmuError>) -> String {
    match r {
        Ok(()) => "ok".to_string(),
        Err(e) => format!("error {}: {}", e.status, e.message),
    }
}

/// The body of every child: runs the case `CHILD` names and prints `RESULT ok` or
/// `RESULT error <status>: <message>`.
#[test]
fn child_runs_one_case() {
    let Ok(case) = std::env::var(CHILD) else {
        return; // only meaningful as the child of the tests below
    };
    let result = match case.as_str() {
        "recurrent" => recurrent_case(),
        // An empty kernel in one block of 32 threads.
        "launch" => emu_result(emu::launch(1, 32, 1, 0)),
        // 1024-thread blocks (256 MiB of fiber stacks per worker) with only 64 MiB of address
        // space left: not even the calling thread can run a block.
        "starved" => {
            let now = vm("VmSize:").expect("VmSize");
            assert!(set_address_space_limit(now + 64 * MIB), "setrlimit");
            emu_result(emu::atomics(16, 1024).map(|_| ()))
        }
        // 384 MiB left: one worker's fiber stacks fit, a second's do not, and 64 helper threads
        // with the default 8 MiB stacks would not either. The launch must run on what it got.
        "degrade" => {
            let now = vm("VmSize:").expect("VmSize");
            assert!(set_address_space_limit(now + 384 * MIB), "setrlimit");
            match emu::atomics(256, 1024) {
                Ok((counter, bits)) => {
                    assert_eq!((counter, bits), (256 * 1024, u32::MAX), "atomics result");
                    "ok".to_string()
                }
                Err(e) => format!("error {}: {}", e.status, e.message),
            }
        }
        // No limit: what the emulator maps for 1024 blocks of 1024 threads on 64 workers.
        "peak" => {
            let before = vm("VmSize:").expect("VmSize");
            let r = emu::atomics(1024, 1024);
            let peak = vm("VmPeak:").expect("VmPeak");
            println!("\nGROWTH {}", peak.saturating_sub(before));
            match r {
                Ok((counter, _)) => {
                    assert_eq!(counter, 1024 * 1024);
                    "ok".to_string()
                }
                Err(e) => format!("error {}: {}", e.status, e.message),
            }
        }
        other => panic!("unknown child case {other:?}"),
    };
    println!("\nRESULT {result}");
}

/// About 3 GB of address space (`ulimit -v 3000000`).
const THREE_GB: u64 = 3_000_000 * 1024;

#[test]
fn a_kernel_call_under_3_gb_runs_or_refuses_by_name_for_every_thread_setting() {
    for threads in [None, Some("1000"), Some("-1")] {
        let what = format!("{THREADS}={threads:?} under ulimit -v 3000000");
        let out = child("recurrent", &[(THREADS, threads)], Some(THREE_GB));
        out.assert_clean(&what);
        let r = result(&out);
        match threads {
            Some("-1") => assert!(
                r.starts_with("error")
                    && r.contains("RSSM_ERR_EMULATOR")
                    && r.contains(&format!("{THREADS} = \"-1\""))
                    && r.contains("1..=64"),
                "{what}: expected a refusal naming the variable, its value and the range, got {r:?}"
            ),
            _ => assert_eq!(r, "ok", "{what}: {}", out.text()),
        }
    }
}

#[test]
fn no_memory_for_fiber_stacks_is_an_error_status_not_an_abort() {
    let out = child("starved", &[(THREADS, Some("4"))], None);
    out.assert_clean("1024-thread blocks with 64 MiB of address space left");
    let r = result(&out);
    assert!(
        r.starts_with("error RSSM_ERR_EMULATOR") && r.contains("fiber stack"),
        "expected an emulator error about fiber stacks, got {r:?}"
    );
}

#[test]
fn short_of_memory_the_launch_runs_on_the_workers_it_could_start() {
    let out = child("degrade", &[(THREADS, Some("64"))], None);
    out.assert_clean("256 blocks of 1024 threads, 64 threads, 384 MiB of address space left");
    assert_eq!(result(&out), "ok", "{}", out.text());
}

#[test]
fn the_emulators_address_space_is_bounded() {
    let out = child("peak", &[(THREADS, Some("64"))], None);
    out.assert_clean("1024 blocks of 1024 threads on 64 threads");
    assert_eq!(result(&out), "ok", "{}", out.text());
    let growth: u64 = out
        .stdout
        .lines()
        .find_map(|l| l.split_once("GROWTH ").map(|(_, g)| g))
        .and_then(|g| g.parse().ok())
        .expect("GROWTH line");
    // 1 GiB of fiber stacks per launch, 1 MiB stacks for at most 63 helper threads, shared
    // memory and bookkeeping.
    assert!(
        growth <= 1280 * MIB,
        "the launch grew the address space by {} MiB (cap: 1 GiB of fiber stacks + helpers)",
        growth / MIB
    );
}

#[test]
fn emulator_environment_values_parse_strictly() {
    // (variable, value, accepted)
    let cases: &[(&str, &str, bool)] = &[
        (THREADS, "1", true),
        (THREADS, "64", true),
        (THREADS, "1000", true), // clamped to 64
        (THREADS, "99999999999999999999999", true),
        (THREADS, "-1", false),
        (THREADS, "0", false),
        (THREADS, "", false),
        (THREADS, " 4", false),
        (THREADS, "+4", false),
        (THREADS, "4x", false),
        (THREADS, "0x10", false),
        (THREADS, "four", false),
        (SEED, "42", true),
        (SEED, "0x5EED", true),
        (SEED, "0", true),
        (SEED, "18446744073709551615", true),
        (SEED, "18446744073709551616", false), // overflows 64 bits
        (SEED, "-5", false),
        (SEED, "+5", false),
        (SEED, "", false),
        (SEED, " 7", false),
        (SEED, "12abc", false),
        (SEED, "0x", false),
    ];
    let mut failures = Vec::new();
    for &(var, value, accepted) in cases {
        let out = child("launch", &[(var, Some(value))], None);
        out.assert_clean(&format!("{var}={value:?}"));
        let r = result(&out).to_string();
        let ok = if accepted {
            r == "ok"
        } else {
            r.starts_with("error RSSM_ERR_EMULATOR") && r.contains(&format!("{var} = {value:?}"))
        };
        if !ok {
            failures.push(format!(
                "{var}={value:?}: expected {}, got {r:?}",
                if accepted { "ok" } else { "a refusal by name" }
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_refused_value_is_refused_on_every_launch_with_the_accepted_range() {
    // The message names the variable, the value (escaped, truncated) and the accepted range.
    let long = format!("7\u{1b}[31m{}", "9".repeat(300));
    let out = child("launch", &[(THREADS, Some(&long))], None);
    out.assert_clean("a long value with an escape sequence");
    let r = result(&out);
    assert!(r.starts_with("error RSSM_ERR_EMULATOR"), "{r:?}");
    assert!(r.contains(THREADS) && r.contains("1..=64"), "{r:?}");
    assert!(!r.contains('\u{1b}'), "control characters must be escaped: {r:?}");
    assert!(r.len() < 400, "the value must be truncated: {} bytes", r.len());
    let out = child("launch", &[(SEED, Some("-5"))], None);
    out.assert_clean("a negative seed");
    let r = result(&out);
    assert!(r.contains(SEED) && r.contains("\"-5\"") && r.contains("0..="), "{r:?}");
}
