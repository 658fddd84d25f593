//! The `replayssm` binary against hostile input (issue 19): files that are not bounded regular
//! files, decode cases that would amplify memory, tolerances that pass anything, make-case
//! arguments that panicked or aborted, terminal control characters in a case's metadata, and
//! bench output paths that cannot be written; and (issue 28) a stdout or stderr that cannot be
//! written, and numeric flags outside their documented ranges. Every child runs with a timeout
//! and (on Linux) an address-space limit, so a regression fails the test instead of hanging or
//! eating memory.
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_replayssm"))
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("replayssm-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn shipped(prefix: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cases");
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix))
        .collect();
    v.sort();
    v.into_iter()
        .next()
        .unwrap_or_else(|| panic!("a shipped {prefix}* case"))
}

/// What a child did.
struct Run {
    /// `None` when it was killed by a signal (an abort) or by the timeout.
    code: Option<i32>,
    timed_out: bool,
    stdout: String,
    stderr: String,
}

impl Run {
    fn text(&self) -> String {
        format!(
            "exit {:?}{}\nstdout: {}\nstderr: {}",
            self.code,
            if self.timed_out { " (timed out)" } else { "" },
            self.stdout,
            self.stderr
        )
    }
    /// Exited by itself with code 1 or 2: no panic (101), no abort (signal), no hang.
    fn clean_failure(&self) -> bool {
        !self.timed_out && matches!(self.code, Some(1) | Some(2)) && !self.stderr.contains("panicked")
    }
}

#[cfg(target_os = "linux")]
fn limit_address_space(cmd: &mut Command, bytes: u64) {
    use std::os::unix::process::CommandExt;
    extern "C" {
        fn setrlimit(resource: i32, rlim: *const [u64; 2]) -> i32;
    }
    const RLIMIT_AS: i32 = 9;
    // SAFETY: setrlimit is async-signal-safe and only touches this (forked) process.
    unsafe {
        cmd.pre_exec(move || {
            let lim = [bytes, bytes];
            if setrlimit(RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn limit_address_space(_: &mut Command, _: u64) {}

const GIB: u64 = 1 << 30;

/// Runs `cmd` with at most `mem` bytes of address space, killed after `timeout`.
fn run_limited(cmd: Command, mem: u64, timeout: Duration) -> Run {
    run_to(cmd, mem, timeout, None, None)
}

/// [`run_limited`] with stdout and stderr sent to `stdout` and `stderr` instead of captured
/// (`None`: captured).
fn run_to(mut cmd: Command, mem: u64, timeout: Duration, stdout: Option<Stdio>, stderr: Option<Stdio>) -> Run {
    limit_address_space(&mut cmd, mem);
    // Address space, not memory, is limited: keep what threads reserve (the emulator starts one
    // per core, glibc a malloc arena per thread) independent of the machine's core count.
    cmd.env("REPLAYSSM_EMU_THREADS", "2").env("MALLOC_ARENA_MAX", "2");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(stdout.unwrap_or_else(Stdio::piped))
        .stderr(stderr.unwrap_or_else(Stdio::piped))
        .spawn()
        .unwrap();
    // Drain the pipes on threads so a chatty child cannot block on a full pipe.
    let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = Vec::new();
            if let Some(mut p) = pipe {
                p.read_to_end(&mut s).ok();
            }
            s
        })
    };
    let t_out = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let t_err = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let start = Instant::now();
    let (status, timed_out) = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break (s, false);
        }
        if start.elapsed() > timeout {
            child.kill().ok();
            break (child.wait().unwrap(), true);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Run {
        code: if timed_out { None } else { status.code() },
        timed_out,
        stdout: String::from_utf8_lossy(&t_out.join().unwrap()).into_owned(),
        stderr: String::from_utf8_lossy(&t_err.join().unwrap()).into_owned(),
    }
}

fn check(path: &Path) -> Run {
    let mut c = bin();
    c.arg("check").arg(path).args(["--backend", "emulated"]);
    run_limited(c, GIB, Duration::from_secs(60))
}

/// `check path` fails cleanly, naming the file and saying `expect`.
fn check_refuses(path: &Path, expect: &str) {
    let r = check(path);
    let text = r.text();
    assert!(r.clean_failure(), "{}: {text}", path.display());
    assert!(
        r.stdout.contains(expect),
        "{}: expected '{expect}' in {text}",
        path.display()
    );
    assert!(
        r.stdout.contains(&path.display().to_string()),
        "the message must name the file: {text}"
    );
}

/// The file's header JSON and the bytes after it.
fn split(file: &[u8]) -> (serde_json::Value, Vec<u8>) {
    let n = u64::from_le_bytes(file[..8].try_into().unwrap()) as usize;
    (serde_json::from_slice(&file[8..8 + n]).unwrap(), file[8 + n..].to_vec())
}

#[test]
fn a_bad_or_misplaced_lower_bound_is_refused_in_case_files_and_make_case() {
    // SGLang's safe-gate fold case passes as written, and fails with its gate dropped (the
    // metadata key is read, not ignored).
    let safe = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/cases/sglang/kda_f32_safe.fold.safetensors");
    let r = check(&safe);
    assert!(r.stdout.starts_with("PASS "), "{}", r.text());
    let good = std::fs::read(&safe).unwrap();
    let (mut h, data) = split(&good);
    h["__metadata__"].as_object_mut().unwrap().remove("lower_bound");
    let p = tmp("safe_gate_dropped.safetensors");
    std::fs::write(&p, join(&h, &data)).unwrap();
    let r = check(&p);
    assert!(r.stdout.starts_with("FAIL "), "{}", r.text());
    // The library's rule, by key; a bound on a GDN case or on a precomputed gate.
    for (file, value, says) in [
        (safe.clone(), "2", "must be 0 (softplus gate) or finite and negative"),
        (safe.clone(), "nan", "must be 0 (softplus gate) or finite and negative"),
        (safe.clone(), "-inf", "must be 0 (softplus gate) or finite and negative"),
        (shipped("gdn_bf16_raw"), "-5", "the safe gate is KDA's"),
        (
            shipped("kda_f32_precomputed"),
            "-5",
            "the safe gate is formed from a raw gate",
        ),
    ] {
        let bytes = std::fs::read(&file).unwrap();
        let p = tmp(&format!("lower_bound_{value}.safetensors"));
        std::fs::write(&p, with_metadata(&bytes, "lower_bound", value)).unwrap();
        check_refuses(&p, "metadata key 'lower_bound'");
        assert!(check(&p).stdout.contains(says), "{value}: {}", check(&p).text());
    }
    // make-case refuses the same, writing nothing.
    for (variant, value, says) in [
        ("kda", "3", "lower_bound = 3, must be 0"),
        ("kda", "0", "0 is the softplus gate"),
        ("gdn", "-5", "the safe gate is KDA's"),
    ] {
        let out = tmp("never_lower_bound.safetensors");
        let mut c = bin();
        c.args(["make-case", "--atol", "1e-3", "--rtol", "1e-3", "--variant", variant])
            .arg(format!("--lower-bound={value}"))
            .arg("--out")
            .arg(&out);
        let r = run_limited(c, GIB, Duration::from_secs(60));
        assert!(
            r.clean_failure() && r.stderr.contains(says),
            "{variant} {value}: {}",
            r.text()
        );
        assert!(!out.exists(), "{variant} {value}: a file was written");
    }
}

fn join(header: &serde_json::Value, data: &[u8]) -> Vec<u8> {
    let text = serde_json::to_vec(header).unwrap();
    let mut v = (text.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(&text);
    v.extend_from_slice(data);
    v
}

/// `file` with metadata `key` set to `value`.
fn with_metadata(file: &[u8], key: &str, value: &str) -> Vec<u8> {
    let (mut h, data) = split(file);
    h["__metadata__"][key] = serde_json::Value::String(value.into());
    join(&h, &data)
}

#[test]
fn check_refuses_devices_fifos_directories_and_lying_headers() {
    // /dev/zero: endless; before the fix it was read until memory ran out.
    check_refuses(Path::new("/dev/zero"), "not a regular file (a character device)");

    // A FIFO nobody writes: opening it for reading blocked forever before the fix.
    let fifo = tmp("fifo.safetensors");
    let _ = std::fs::remove_file(&fifo);
    let made = Command::new("mkfifo").arg(&fifo).status();
    if made.is_ok_and(|s| s.success()) {
        check_refuses(&fifo, "not a regular file (a FIFO)");
    } else {
        eprintln!("mkfifo unavailable: FIFO case skipped");
    }

    let dir = tmp("a_directory.safetensors");
    std::fs::create_dir_all(&dir).unwrap();
    check_refuses(&dir, "not a regular file (a directory)");

    let good = std::fs::read(shipped("gdn_bf16_raw")).unwrap();

    // Shorter than the length field.
    let p = tmp("four_bytes.safetensors");
    std::fs::write(&p, &good[..4]).unwrap();
    check_refuses(&p, "shorter than the 8-byte header length");

    // Cut in the middle of the data: the header promises more than is there.
    let p = tmp("truncated.safetensors");
    std::fs::write(&p, &good[..good.len() / 2]).unwrap();
    check_refuses(&p, "not a safetensors file");

    // A header length of 1 TB: refused before anything else is read.
    let p = tmp("huge_header_len.safetensors");
    let mut bad = good.clone();
    bad[..8].copy_from_slice(&(1u64 << 40).to_le_bytes());
    std::fs::write(&p, &bad).unwrap();
    check_refuses(
        &p,
        "not a safetensors file: the header length is 1099511627776 bytes, over the limit of 16777216",
    );

    // A header length within the limit but past the end of the file.
    let p = tmp("header_past_end.safetensors");
    let mut bad = good.clone();
    bad[..8].copy_from_slice(&(good.len() as u64).to_le_bytes());
    std::fs::write(&p, &bad).unwrap();
    check_refuses(&p, &format!("only {} bytes follow it", good.len() - 8));
}

#[test]
fn decode_case_with_a_huge_cache_len_runs_in_bounded_memory() {
    // 8 requests of 2 tokens, HV = 8, K = V = 128: a 4.2 MB file. With L = 65536 the ring took
    // 8 x 65536 records x 6 KB = 3.2 GB before the fix (an abort under the limit below); sized by
    // the tokens it needs 3 records per slot.
    let p = tmp("decode_huge_l.safetensors");
    let mut c = bin();
    c.args([
        "make-case",
        "--op",
        "decode",
        "--cache-len",
        "65536",
        "--dims",
        "4,8,128,128",
    ])
    .args(["--seqlens", "2,2,2,2,2,2,2,2", "--dtype", "f32", "--precomputed-gate"])
    .args(["--atol", "1e-5", "--rtol", "1e-4", "--out"])
    .arg(&p);
    let r = run_limited(c, 3 * GIB / 2, Duration::from_secs(300));
    assert_eq!(r.code, Some(0), "{}", r.text());
    let mut c = bin();
    c.arg("check").arg(&p).args(["--backend", "emulated"]);
    let r = run_limited(c, 3 * GIB / 2, Duration::from_secs(300));
    assert_eq!(r.code, Some(0), "{}", r.text());
    assert!(
        r.stdout.starts_with("PASS ") && r.stdout.contains("op=decode"),
        "{}",
        r.text()
    );
}

#[test]
fn non_finite_tolerances_are_refused_in_case_files_and_make_case() {
    let good = std::fs::read(shipped("gdn_bf16_raw")).unwrap();
    // Outputs off by 1e6: any finite tolerance fails them.
    let (h, mut data) = split(&good);
    let (start, end) = {
        let o = &h["o"]["data_offsets"];
        (o[0].as_u64().unwrap() as usize, o[1].as_u64().unwrap() as usize)
    };
    for c in data[start..end].chunks_exact_mut(4) {
        c.copy_from_slice(&1.0e6f32.to_le_bytes());
    }
    let wrong = join(&h, &data);
    let p = tmp("wrong_outputs.safetensors");
    std::fs::write(&p, &wrong).unwrap();
    let r = check(&p);
    assert!(r.stdout.starts_with("FAIL "), "{}", r.text());

    // Before the fix each of these PASSed the wrong outputs.
    for (key, value) in [("atol", "NaN"), ("rtol", "nan"), ("rtol", "inf"), ("atol", "-1e-3")] {
        let p = tmp(&format!("tol_{key}_{value}.safetensors"));
        std::fs::write(&p, with_metadata(&wrong, key, value)).unwrap();
        check_refuses(&p, &format!("metadata key '{key}'"));
        let r = check(&p);
        assert!(!r.stdout.contains("PASS"), "{}", r.text());
    }

    // make-case wrote such files before the fix.
    for (flag, value) in [("--atol", "nan"), ("--rtol", "inf"), ("--rtol", "-1")] {
        let out = tmp("never_tol.safetensors");
        let mut c = bin();
        c.args(["make-case", "--out"]).arg(&out);
        let other = if flag == "--atol" { "--rtol" } else { "--atol" };
        c.args([other, "1e-3", &format!("{flag}={value}")]);
        let r = run_limited(c, GIB, Duration::from_secs(60));
        assert!(r.clean_failure(), "{flag} {value}: {}", r.text());
        assert!(
            r.stderr.contains(&format!("{flag} {value} is")),
            "{flag} {value}: {}",
            r.text()
        );
        assert!(!out.exists(), "{flag} {value}: a file was written");
    }
}

fn make_case(args: &[&str]) -> Run {
    let out = tmp("made.safetensors");
    let mut c = bin();
    c.args(["make-case", "--out"]).arg(&out).args(args);
    run_limited(c, GIB, Duration::from_secs(60))
}

/// `make-case args` fails cleanly with every string of `expect` in its message.
fn make_case_refuses(args: &[&str], expect: &[&str]) {
    let r = make_case(args);
    assert!(r.clean_failure(), "{args:?}: {}", r.text());
    for e in expect {
        assert!(r.stderr.contains(e), "{args:?}: expected '{e}' in {}", r.text());
    }
}

#[test]
fn make_case_checks_every_argument_by_name() {
    let tol = ["--atol", "1e-3", "--rtol", "8e-3"];
    let with_tol = |a: &[&'static str]| [a, &tol[..]].concat();
    // Panicked before (accept 4 of a 3-token request).
    make_case_refuses(
        &with_tol(&[
            "--op",
            "fold",
            "--accept",
            "4,1",
            "--seqlens",
            "3,5",
            "--dims",
            "1,1,32,8",
        ]),
        &["--accept", "request 0 accepts 4, outside 0..=3"],
    );
    make_case_refuses(
        &with_tol(&["--op", "fold", "--accept", "1", "--seqlens", "3,5"]),
        &["--accept has 1 values for 2 requests"],
    );
    // Aborted on a 12.8 GB allocation before; now each value is refused past the total too.
    make_case_refuses(
        &with_tol(&["--seqlens", "100000000"]),
        &["--seqlens 100000000 is outside 0..=1048576"],
    );
    make_case_refuses(
        &with_tol(&["--seqlens", "600000,600000"]),
        &["--seqlens adds up to 1200000 tokens, over the limit of 1048576"],
    );
    // Within the token limit but too big for the reference's per-token states.
    make_case_refuses(
        &with_tol(&["--seqlens", "100000", "--dims", "1,16,128,128"]),
        &[
            "--seqlens 100000 tokens with --dims [1, 16, 128, 128] need about",
            "over the limit of 1073741824",
        ],
    );
    // A fold error talked about tree kernels before (the tree was built for every op).
    let r = make_case(&with_tol(&["--op", "fold", "--seqlens", "40"]));
    assert!(r.clean_failure(), "{}", r.text());
    assert!(
        r.stderr
            .contains("--seqlens: request 0 has 40 tokens; op fold takes at most 16"),
        "{}",
        r.text()
    );
    assert!(
        !r.stderr.contains("tree"),
        "a fold error must not mention trees: {}",
        r.text()
    );
    make_case_refuses(
        &with_tol(&["--op", "verify_tree", "--seqlens", "17"]),
        &["op verify_tree takes at most 16", "tree kernels"],
    );
    make_case_refuses(
        &with_tol(&["--op", "decode", "--cache-len", "0"]),
        &["--cache-len 0 is outside 1..=65536"],
    );
    make_case_refuses(
        &with_tol(&["--op", "decode", "--cache-len", "70000"]),
        &["--cache-len 70000 is outside 1..=65536"],
    );
    make_case_refuses(
        &with_tol(&["--op", "fold_tree", "--accept-node=-5,1"]),
        &["--accept-node -5 is outside -1..=15"],
    );
    make_case_refuses(
        &with_tol(&["--op", "fold_tree", "--accept-node=7,1"]),
        &["--accept-node: request 0 accepts node 7, outside -1..=2"],
    );
    make_case_refuses(
        &with_tol(&["--op", "bogus"]),
        &["invalid value 'bogus' for '--op <OP>'", "verify_tree"],
    );
    make_case_refuses(&with_tol(&["--dims", "1,2,3"]), &["--dims takes H,HV,K,V"]);
    make_case_refuses(&with_tol(&["--dims", "2,3,8,8"]), &["--dims [2, 3, 8, 8]"]);
    make_case_refuses(
        &with_tol(&["--accept", "1,1"]),
        &["--accept is for op fold, not recurrent"],
    );
    // The default accept used to overflow (a panic in debug builds) on a large seed.
    let r = make_case(&with_tol(&["--op", "fold", "--seed", "18446744073709551615"]));
    assert_eq!(r.code, Some(0), "{}", r.text());
}

#[test]
fn check_escapes_control_and_bidi_characters_from_the_file() {
    let good = std::fs::read(shipped("gdn_bf16_raw")).unwrap();
    let evil = "\u{202e}txt.exe\u{1b}[2J\u{1b}]0;owned\u{7}\u{9b}31m";
    for key in ["op", "format", "variant", "atol"] {
        let p = tmp(&format!("evil_{key}.safetensors"));
        std::fs::write(&p, with_metadata(&good, key, evil)).unwrap();
        let r = check(&p);
        assert!(r.clean_failure(), "{key}: {}", r.text());
        for raw in ['\u{202e}', '\u{1b}', '\u{7}', '\u{9b}'] {
            assert!(
                !r.stdout.contains(raw) && !r.stderr.contains(raw),
                "{key}: raw {:?} printed: {:?}",
                raw,
                r.stdout
            );
        }
        assert!(
            r.stdout.contains("\\u{202e}txt.exe\\u{1b}[2J"),
            "{key}: expected the escaped text: {:?}",
            r.stdout
        );
    }
}

#[test]
fn bench_refuses_unwritable_output_paths_before_running_any_case() {
    let bench = |flag: &str, path: &Path| {
        let mut c = bin();
        c.args(["bench", "--backend", "emulated", "--shapes", "tiny", "--batches", "1"])
            .args(["--windows", "2", "--kernels", "R-decode", flag])
            .arg(path);
        run_limited(c, 4 * GIB, Duration::from_secs(300))
    };
    let missing_dir = tmp("no-such-dir").join("out.json");
    let dir = tmp("a_dir_not_a_file");
    std::fs::create_dir_all(&dir).unwrap();
    for (flag, path, why) in [
        ("--json", missing_dir.clone(), "cannot write"),
        ("--plot", dir.clone(), "is a directory"),
    ] {
        let r = bench(flag, &path);
        assert_eq!(r.code, Some(2), "{flag}: {}", r.text());
        assert!(
            r.stderr.contains(&format!("bench: {flag} {}: {why}", path.display())),
            "{flag}: {}",
            r.text()
        );
        // Refused before the first case: no progress line.
        assert!(!r.stderr.contains("[   1/"), "{flag}: ran cases first: {}", r.text());
    }
    // A writable path still works, and nothing is left behind when the check creates it.
    let json = tmp("bench_ok.json");
    let _ = std::fs::remove_file(&json);
    let r = bench("--json", &json);
    assert_eq!(r.code, Some(0), "{}", r.text());
    assert!(std::fs::read(&json).unwrap().starts_with(b"{"));
}

/// One table over every subcommand: each bad invocation fails cleanly (exit 1 or 2, no panic, no
/// abort, no hang, bounded memory) with a message saying what was wrong.
#[test]
fn every_subcommand_refuses_a_catalogue_of_bad_invocations() {
    let zero = "/dev/zero";
    let cases: &[(&[&str], &str)] = &[
        (&["check", zero], "regular file"),
        (&["check", "/nonexistent/case.safetensors"], "case"),
        (
            &[
                "validate",
                "--enable-linear-replayssm",
                "--linear-replayssm-cache-len",
                "-5",
            ],
            "A4",
        ),
        (
            &[
                "validate",
                "--enable-linear-replayssm",
                "--linear-replayssm-cache-len",
                "99999999999",
            ],
            "1..=65536",
        ),
        (
            &[
                "validate",
                "--enable-linear-replayssm-spec",
                "--speculative-algorithm",
                "EAGLE",
                "--speculative-num-draft-tokens",
                "100000",
            ],
            "16 or fewer",
        ),
        (
            &[
                "validate",
                "--enable-linear-replayssm-spec",
                "--speculative-algorithm",
                "EAGLE",
                "--speculative-eagle-topk",
                "-3",
            ],
            "at least 1",
        ),
        (&["validate", "--speculative-eagle-topk", "abc"], "invalid value 'abc'"),
        (&["validate", "--mamba-ssm-dtype", "float8"], "float8"),
        (
            &["floor", "--bandwidth", "nan"],
            "--bandwidth nan is not a number in 0.01..=100 TB/s",
        ),
        (&["floor", "--bandwidth", "inf"], "--bandwidth"),
        (
            &["bench", "--backend", "emulated", "--shapes", "nosuch"],
            "unknown shape 'nosuch'",
        ),
        (
            &["bench", "--backend", "emulated", "--shapes", "tiny", "--batches", "0"],
            "--batches 0 is outside 1..=65535",
        ),
        (
            &[
                "bench",
                "--backend",
                "emulated",
                "--shapes",
                "tiny",
                "--batches",
                "99999999",
            ],
            "--batches 99999999 is outside",
        ),
        (
            &["bench", "--backend", "emulated", "--shapes", "tiny", "--windows", "99"],
            "--windows 99 is outside 2..=16",
        ),
        (
            &[
                "make-case",
                "--op",
                "nosuch",
                "--out",
                "/nonexistent/x.st",
                "--dims",
                "1,1,32,8",
                "--seqlens",
                "2",
                "--atol",
                "1e-3",
                "--rtol",
                "8e-3",
            ],
            "invalid value 'nosuch' for '--op <OP>'",
        ),
    ];
    for (args, expect) in cases {
        let mut c = bin();
        c.args(*args);
        let r = run_limited(c, GIB, Duration::from_secs(60));
        assert!(r.clean_failure(), "{args:?}: {}", r.text());
        // (`check` reports each file's failure on stdout, the others on stderr.)
        assert!(
            r.stderr.contains(expect) || r.stdout.contains(expect),
            "{args:?}: expected '{expect}' in {}",
            r.text()
        );
    }
    // Straight to stderr: the harness hides println! of a passing test.
    let _ = writeln!(
        std::io::stderr().lock(),
        "CLI catalogue: {} inputs, 0 crashes, 0 silent accepts",
        cases.len()
    );
}

/// The write end of a pipe whose read end is already closed: every write fails with EPIPE.
#[cfg(target_os = "linux")]
fn closed_pipe() -> Stdio {
    use std::os::fd::{FromRawFd, OwnedFd};
    extern "C" {
        fn pipe2(fds: *mut [i32; 2], flags: i32) -> i32;
    }
    // Close-on-exec, so no child spawned meanwhile by another test inherits the read end.
    const O_CLOEXEC: i32 = 0o2_000_000;
    let mut fds = [-1; 2];
    // SAFETY: pipe2 writes two new descriptors into `fds`; each is owned exactly once below.
    let (read, write) = unsafe {
        assert_eq!(pipe2(&mut fds, O_CLOEXEC), 0, "pipe2");
        (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1]))
    };
    drop(read);
    Stdio::from(write)
}

#[cfg(target_os = "linux")]
fn dev_full() -> Stdio {
    Stdio::from(std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap())
}

/// No panic message and no backtrace (the children run with `RUST_BACKTRACE=1`).
fn assert_no_panic(what: &str, r: &Run) {
    for bad in ["panicked", "stack backtrace", "RUST_BACKTRACE"] {
        assert!(!r.stderr.contains(bad), "{what}: '{bad}' on stderr: {}", r.text());
    }
}

/// The smallest bench run: one kernel, one shape, one batch, one window, on the emulator.
const TINY_BENCH: &[&str] = &[
    "bench",
    "--backend",
    "emulated",
    "--shapes",
    "tiny",
    "--batches",
    "1",
    "--windows",
    "2",
    "--kernels",
    "R-decode",
];

/// The documented exit code when stdout cannot be written (docs/input-contract.md §4).
const EXIT_STDOUT_FAILED: i32 = 1;

/// Every subcommand that prints, with stdout a pipe nobody reads (`replayssm floor | head -0`)
/// and stdout `/dev/full`: exit 1 with one line on stderr saying so, no panic, no backtrace.
/// Before the fix `println!` panicked (exit 101 and a backtrace), and clap's `--help` and
/// `--version` exited 0 having written nothing.
#[cfg(target_os = "linux")]
#[test]
fn stdout_that_cannot_be_written_is_a_clean_exit_1() {
    let case = shipped("gdn_bf16_raw");
    let made = tmp("stdout_made.safetensors");
    let case = case.to_str().unwrap();
    let made = made.to_str().unwrap();
    let make_case = [
        "make-case",
        "--out",
        made,
        "--dims",
        "1,1,32,8",
        "--seqlens",
        "2",
        "--atol",
        "1e-3",
        "--rtol",
        "8e-3",
    ];
    let invocations: &[&[&str]] = &[
        &["floor"],
        &["floor", "--json"],
        &["info"],
        &["validate"],
        &["validate", "--enable-linear-replayssm"],
        &["check", case, "--backend", "emulated"],
        &make_case,
        &["demo", "--backend", "emulated", "--steps", "1"],
        &["demo", "--backend", "emulated", "--mode", "decode", "--steps", "1"],
        TINY_BENCH,
        &["--help"],
        &["--version"],
        &["floor", "--help"],
        &["help", "bench"],
    ];
    let mut n = 0;
    for args in invocations {
        for (sink, why) in [("closed pipe", "Broken pipe"), ("/dev/full", "No space left on device")] {
            let stdout = if sink == "/dev/full" { dev_full() } else { closed_pipe() };
            let mut c = bin();
            c.args(*args).env("RUST_BACKTRACE", "1");
            let r = run_to(c, 4 * GIB, Duration::from_secs(120), Some(stdout), None);
            let what = format!("{args:?} > {sink}");
            assert_eq!(r.code, Some(EXIT_STDOUT_FAILED), "{what}: {}", r.text());
            assert_no_panic(&what, &r);
            let said: Vec<&str> = r
                .stderr
                .lines()
                .filter(|l| l.starts_with("replayssm: cannot write to stdout: "))
                .collect();
            assert_eq!(said.len(), 1, "{what}: one line naming the failure: {}", r.text());
            assert!(
                said[0].contains(why) && said[0].ends_with("; output truncated"),
                "{what}: {}",
                r.text()
            );
            n += 1;
        }
    }
    let _ = writeln!(
        std::io::stderr().lock(),
        "CLI stdout failures: {n} inputs, 0 crashes, 0 silent accepts"
    );
}

/// stderr `/dev/full`: a refusal keeps its exit code, a run its result. Before the fix
/// `eprintln!` panicked (exit 101).
#[cfg(target_os = "linux")]
#[test]
fn stderr_that_cannot_be_written_changes_no_exit_code() {
    let cases: &[(&[&str], i32)] = &[
        (&["floor", "--bandwidth", "0"], 2),
        (&["floor", "--no-such-flag"], 2),
        (&["check", "/dev/zero"], 1),
        (
            &[
                "validate",
                "--enable-linear-replayssm",
                "--linear-replayssm-cache-len",
                "0",
            ],
            2,
        ),
        (
            &[
                "make-case",
                "--out",
                "/nonexistent/x",
                "--dims",
                "1,2,3",
                "--atol",
                "0",
                "--rtol",
                "0",
            ],
            1,
        ),
        // "timing skipped" and the progress go to stderr; the table still reaches stdout.
        (TINY_BENCH, 0),
    ];
    for (args, code) in cases {
        let mut c = bin();
        c.args(*args).env("RUST_BACKTRACE", "1");
        let r = run_to(c, 4 * GIB, Duration::from_secs(120), None, Some(dev_full()));
        assert_eq!(r.code, Some(*code), "{args:?} 2>/dev/full: {}", r.text());
        if args[0] == "bench" {
            assert!(r.stdout.contains("R-decode"), "{args:?}: the table: {}", r.text());
        }
    }
    // Both full: the stdout failure's exit code, and nothing to say it on.
    let mut c = bin();
    c.arg("floor").env("RUST_BACKTRACE", "1");
    let r = run_to(c, GIB, Duration::from_secs(60), Some(dev_full()), Some(dev_full()));
    assert_eq!(
        r.code,
        Some(EXIT_STDOUT_FAILED),
        "floor >/dev/full 2>/dev/full: {}",
        r.text()
    );
    let _ = writeln!(
        std::io::stderr().lock(),
        "CLI stderr failures: {} inputs, 0 crashes, 0 silent accepts",
        cases.len() + 1
    );
}

/// A file the CLI writes that cannot be written (a full device) fails naming the path. (A guard:
/// this held before issue 28.)
#[cfg(target_os = "linux")]
#[test]
fn files_that_cannot_be_written_fail_naming_the_path() {
    let cases: &[(&[&str], &str)] = &[
        (
            &[
                "make-case",
                "--out",
                "/dev/full",
                "--dims",
                "1,1,32,8",
                "--seqlens",
                "2",
                "--atol",
                "1e-3",
                "--rtol",
                "8e-3",
            ],
            "make-case: /dev/full: No space left on device",
        ),
        (
            &[
                "bench",
                "--backend",
                "emulated",
                "--shapes",
                "tiny",
                "--batches",
                "1",
                "--windows",
                "2",
                "--kernels",
                "R-decode",
                "--json",
                "/dev/full",
            ],
            "bench: writing /dev/full: No space left on device",
        ),
    ];
    for (args, expect) in cases {
        let mut c = bin();
        c.args(*args).env("RUST_BACKTRACE", "1");
        let r = run_limited(c, 4 * GIB, Duration::from_secs(120));
        assert_eq!(r.code, Some(1), "{args:?}: {}", r.text());
        assert_no_panic(&format!("{args:?}"), &r);
        assert!(
            r.stderr.contains(expect),
            "{args:?}: expected '{expect}' in {}",
            r.text()
        );
    }
}

/// The help text of `--flag` in `help` (from its line to the next option's).
fn flag_help<'a>(help: &'a str, flag: &str) -> &'a str {
    let start = help
        .find(&format!("{flag} <"))
        .unwrap_or_else(|| panic!("{flag} not in the help:\n{help}"));
    let rest = &help[start..];
    let end = rest.find("\n  -").unwrap_or(rest.len());
    &rest[..end]
}

/// Every numeric flag of every subcommand has a range in its help and refuses a value outside
/// it (exit 2, the flag, the value and the range in the message). Before the fix
/// `floor --bandwidth 1e-320` printed `inf` times under a 320-digit header, and most of these
/// were accepted or refused without a range.
#[test]
fn numeric_flags_refuse_values_outside_their_documented_range() {
    let u64_range = "0..=18446744073709551615";
    // (subcommand and the other arguments, flag, bad values, range as printed).
    let tiny = [
        "--backend",
        "emulated",
        "--shapes",
        "tiny",
        "--batches",
        "1",
        "--windows",
        "2",
    ];
    let demo: &[&str] = &["demo", "--backend", "emulated"];
    let bench: &[&str] = &[&["bench"][..], &tiny[..]].concat();
    // (The tolerances, required, are added below unless they are the flag under test.)
    let make: &[&str] = &["make-case", "--out", "/nonexistent/never.safetensors"];
    let floor: &[&str] = &["floor"];
    let catalogue: &[(&[&str], &str, &[&str], &str)] = &[
        (
            floor,
            "--bandwidth",
            &["1e-320", "0", "0.001", "100.5", "1e308", "-4.3", "nan", "inf", "abc"],
            "0.01..=100",
        ),
        (demo, "--seed", &["-1", "18446744073709551616"], u64_range),
        (demo, "--steps", &["0", "1001", "99999999999999999999"], "1..=1000"),
        (demo, "--cache-len", &["0", "65537"], "1..=65536"),
        (bench, "--batches", &["0", "65536"], "1..=65535"),
        (bench, "--windows", &["1", "17"], "2..=16"),
        (bench, "--samples", &["0", "10001"], "1..=10000"),
        (bench, "--warmup-ms", &["-1", "nan", "1e9"], "0..=10000"),
        (bench, "--l2-multiple", &["-1", "inf", "65"], "0..=64"),
        (bench, "--plot-window", &["1", "17"], "2..=16"),
        (bench, "--seed", &["-1"], u64_range),
        (make, "--steps", &["0", "65"], "1..=64"),
        (make, "--cache-len", &["0", "65537"], "1..=65536"),
        (make, "--dims", &["0", "65537"], "1..=65536"),
        (make, "--seqlens", &["1048577"], "0..=1048576"),
        (make, "--accept", &["-1", "17"], "0..=16"),
        (make, "--accept-node", &["-2", "16"], "-1..=15"),
        (make, "--seed", &["-1"], u64_range),
        (make, "--atol", &["nan", "-1", "2"], "0..=1"),
        (make, "--rtol", &["inf", "-1e-3", "1.5"], "0..=1"),
    ];
    let mut n = 0;
    for (args, flag, values, range) in catalogue {
        for value in *values {
            let mut c = bin();
            c.args(*args);
            if args[0] == "make-case" {
                for tol in ["--atol", "--rtol"].into_iter().filter(|t| t != flag) {
                    c.args([tol, "1e-3"]);
                }
            }
            // `--flag=value`: a negative value is a value, not an option.
            c.arg(format!("{flag}={value}")).env("RUST_BACKTRACE", "1");
            let r = run_limited(c, GIB, Duration::from_secs(10));
            let what = format!("{} {flag}={value}", args[0]);
            assert_eq!(r.code, Some(2), "{what}: {}", r.text());
            assert_no_panic(&what, &r);
            for part in [*flag, *value, *range] {
                assert!(r.stderr.contains(part), "{what}: '{part}' not in {}", r.text());
            }
            n += 1;
        }
        let mut c = bin();
        c.args([args[0], "--help"]);
        let r = run_limited(c, GIB, Duration::from_secs(10));
        assert_eq!(r.code, Some(0), "{} --help: {}", args[0], r.text());
        let help = flag_help(&r.stdout, flag);
        assert!(
            help.contains(range),
            "{} {flag}: no range {range} in its help: {help}",
            args[0]
        );
    }
    // The ends of a range are in it, and the floor prints sensibly at both.
    for bw in ["0.01", "100"] {
        let mut c = bin();
        c.args(["floor", "--bandwidth", bw]);
        let r = run_limited(c, GIB, Duration::from_secs(30));
        assert_eq!(r.code, Some(0), "--bandwidth {bw}: {}", r.text());
        let header = r.stdout.lines().next().unwrap_or_default();
        assert!(header.contains(&format!("at {bw} TB/s")), "{header}");
        assert!(
            r.stdout.lines().all(|l| l.len() < 300) && !r.stdout.contains("inf"),
            "--bandwidth {bw}: {}",
            r.text()
        );
        n += 1;
    }
    let _ = writeln!(
        std::io::stderr().lock(),
        "CLI numeric flags: {n} inputs, 0 crashes, 0 silent accepts"
    );
}
