//! The `replayssm` binary: `check` on the shipped cases and on broken files, `info`, `demo`.
use std::path::{Path, PathBuf};
use std::process::Command;

use replayssm::MAX_TREE_NODES;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_replayssm"))
}

fn cases() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cases"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .collect();
    v.sort();
    v
}

#[test]
fn the_sglang_golden_fold_cases_pass_check() {
    // SGLang 0.5.23's outputs and folded checkpoints as expectations (tests/cases/sglang).
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/cases/sglang");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".fold.safetensors"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 4,
        "expected the SGLang fold cases in {dir:?}, found {files:?}"
    );
    let out = bin().arg("check").args(&files).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        stdout.lines().filter(|l| l.starts_with("PASS ")).count(),
        files.len(),
        "{stdout}"
    );
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("replayssm-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

#[test]
fn shipped_cases_pass_on_emulated_and_reference() {
    let files = cases();
    assert!(files.len() >= 10, "expected the shipped cases, found {files:?}");
    for backend in ["emulated", "reference"] {
        let out = bin()
            .arg("check")
            .args(&files)
            .args(["--backend", backend])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{backend}: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            stdout.lines().filter(|l| l.starts_with("PASS ")).count(),
            files.len(),
            "{stdout}"
        );
    }
}

fn check_fails(path: &Path, expect: &str) {
    let out = bin()
        .arg("check")
        .arg(path)
        .args(["--backend", "emulated"])
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !out.status.success(),
        "{}: expected failure, got: {text}",
        path.display()
    );
    assert!(
        text.contains(expect),
        "{}: expected '{expect}' in: {text}",
        path.display()
    );
    assert!(
        text.contains(&path.display().to_string()),
        "the message must name the file: {text}"
    );
}

#[test]
fn broken_cases_fail_with_a_clear_message() {
    let good = std::fs::read(&cases()[0]).unwrap();

    check_fails(&tmp("missing.safetensors"), "cannot read");

    let p = tmp("garbage.safetensors");
    std::fs::write(&p, b"this is not a safetensors file at all").unwrap();
    check_fails(&p, "not a safetensors file");

    // Corrupt the expected outputs: the run no longer matches them.
    let p = tmp("corrupted_o.safetensors");
    let header = u64::from_le_bytes(good[..8].try_into().unwrap()) as usize;
    let (_, meta) = safetensors::SafeTensors::read_metadata(&good).unwrap();
    let (start, end) = meta.info("o").unwrap().data_offsets;
    let mut bad = good.clone();
    for i in (8 + header + start..8 + header + end).step_by(4 * 13) {
        bad[i + 2] ^= 0x40; // an f32 exponent/mantissa bit of every 13th output
    }
    std::fs::write(&p, &bad).unwrap();
    check_fails(&p, "FAIL");

    // Corrupt bytes anywhere in the payload: whatever breaks, the exit is non-zero and named.
    let p = tmp("corrupted.safetensors");
    let mut bad = good.clone();
    for i in (8 + header..bad.len()).step_by(7) {
        bad[i] ^= 0x5a;
    }
    std::fs::write(&p, &bad).unwrap();
    check_fails(&p, "corrupted.safetensors");

    // Another format version in the metadata.
    let p = tmp("version.safetensors");
    std::fs::write(
        &p,
        edit_header(&good, |t| t.replace("replayssm-case/1", "replayssm-case/9")),
    )
    .unwrap();
    check_fails(&p, "replayssm-case/9");

    // A missing tensor: rename "state_out" in the header.
    let p = tmp("missing_tensor.safetensors");
    std::fs::write(&p, edit_header(&good, |t| t.replace("\"state_out\"", "\"state_xxx\""))).unwrap();
    check_fails(&p, "missing tensor 'state_out'");

    // A decode case without its cache length.
    let d = std::fs::read(shipped("decode_")).unwrap();
    let p = tmp("decode_no_cache_len.safetensors");
    std::fs::write(&p, edit_header(&d, |t| t.replace("\"cache_len\"", "\"cache_lxx\""))).unwrap();
    check_fails(&p, "cache_len");

    // One bad file among good ones still fails the whole run.
    let mut args: Vec<PathBuf> = cases();
    args.push(p);
    let out = bin().arg("check").args(&args).output().unwrap();
    assert!(!out.status.success());
}

/// `good` with its safetensors header text edited by `f`.
fn edit_header(good: &[u8], f: impl Fn(String) -> String) -> Vec<u8> {
    let header = u64::from_le_bytes(good[..8].try_into().unwrap()) as usize;
    let text = f(String::from_utf8_lossy(&good[8..8 + header]).into_owned());
    let mut v = (text.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(text.as_bytes());
    v.extend_from_slice(&good[8 + header..]);
    v
}

/// `good` with the i32 tensor `name` overwritten by `values` (same length).
fn edit_i32(good: &[u8], name: &str, values: &[i32]) -> Vec<u8> {
    let header = u64::from_le_bytes(good[..8].try_into().unwrap()) as usize;
    let (_, meta) = safetensors::SafeTensors::read_metadata(good).unwrap();
    let (start, end) = meta.info(name).unwrap().data_offsets;
    assert_eq!(end - start, values.len() * 4, "{name}");
    let mut v = good.to_vec();
    for (i, x) in values.iter().enumerate() {
        let at = 8 + header + start + 4 * i;
        v[at..at + 4].copy_from_slice(&x.to_le_bytes());
    }
    v
}

fn shipped(prefix: &str) -> PathBuf {
    cases()
        .into_iter()
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix))
        .unwrap_or_else(|| panic!("a shipped {prefix}* case"))
}

#[test]
fn tree_cases_use_their_parents_and_paths_and_refuse_bad_ones() {
    // The same file read as a chain verify/fold (parents ignored) no longer matches: the tree
    // expectations are not what V computes for a non-chain tree.
    let vt = std::fs::read(shipped("verify_tree_gdn")).unwrap();
    let p = tmp("tree_as_chain.safetensors");
    std::fs::write(&p, edit_header(&vt, |t| t.replace("\"verify_tree\"", "\"verify\""))).unwrap();
    check_fails(&p, "FAIL");

    // A parent that is not earlier in its request's window.
    let ft = std::fs::read(shipped("fold_tree_gdn")).unwrap();
    let (_, meta) = safetensors::SafeTensors::read_metadata(&ft).unwrap();
    let nodes = meta.info("parent").unwrap().shape[0];
    let mut parent: Vec<i32> = (0..nodes as i32).map(|i| i - 1).collect();
    parent[1] = 1;
    let p = tmp("tree_bad_parent.safetensors");
    std::fs::write(&p, edit_i32(&ft, "parent", &parent)).unwrap();
    check_fails(&p, "tensor 'parent'");

    // An accepted path that does not follow parent links.
    let shape = &meta.info("accept_path").unwrap().shape;
    let mut path = vec![-1i32; shape[0] * shape[1]];
    path[0] = 1; // node 1's parent is 0, not the checkpoint
    let p = tmp("tree_bad_path.safetensors");
    std::fs::write(&p, edit_i32(&ft, "accept_path", &path)).unwrap();
    check_fails(&p, "tensor 'accept_path'");

    // A different (valid) accepted path than the one the expectations were made for.
    let mut path = vec![-1i32; shape[0] * shape[1]];
    path[0] = 0;
    let p = tmp("tree_other_path.safetensors");
    std::fs::write(&p, edit_i32(&ft, "accept_path", &path)).unwrap();
    check_fails(&p, "FAIL");

    // fold_tree without accept_path.
    let p = tmp("tree_no_path.safetensors");
    std::fs::write(
        &p,
        edit_header(&ft, |t| t.replace("\"accept_path\"", "\"accept_xxxx\"")),
    )
    .unwrap();
    check_fails(&p, "missing tensor 'accept_path'");
}

#[test]
fn make_case_writes_tree_cases_that_check_passes() {
    for (op, extra) in [
        ("verify_tree", vec!["--tree", "star"]),
        ("fold_tree", vec!["--tree", "topk3", "--accept-node", "5,-1"]),
    ] {
        let p = tmp(&format!("made_{op}.safetensors"));
        let out = bin()
            .args(["make-case", "--op", op, "--out"])
            .arg(&p)
            .args(["--seqlens", "8,4", "--atol", "1e-4", "--rtol", "8e-3"])
            .args(&extra)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let out = bin().arg("check").arg(&p).output().unwrap();
        let s = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && s.contains(&format!("op={op}")), "{s}");
    }
    let out = bin()
        .args(["make-case", "--op", "fold_tree", "--accept-node", "9", "--seqlens", "8"])
        .args(["--atol", "1e-4", "--rtol", "8e-3", "--out"])
        .arg(tmp("never.safetensors"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--accept-node"));
}

#[test]
fn info_reports_build_and_gpu() {
    let out = bin().arg("info").output().unwrap();
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{s}");
    assert!(s.contains("backends compiled in: reference, emulated"), "{s}");
    assert!(s.contains("gpu: "), "{s}");
    if replayssm::build_info::CUDA_COMPILED {
        assert!(s.contains("release 13.0") || s.contains("nvcc:"), "{s}");
        assert!(s.contains("recurrent_kernel"), "resource report missing: {s}");
    }
}

#[test]
fn demo_runs_on_the_best_backend_and_reports_bit_identical_commits() {
    let out = bin().args(["demo", "--steps", "40"]).output().unwrap();
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{s}{}", String::from_utf8_lossy(&out.stderr));
    let expected_backend = replayssm::Backend::best().name();
    assert!(
        s.contains(&format!(
            "kernel R (recurrent baseline) on the {expected_backend} backend"
        )),
        "{s}"
    );
    assert!(s.contains("largest error vs f64"), "{s}");
    assert!(s.contains("BIT-IDENTICAL to the baseline"), "{s}");
    assert!(
        s.contains("speculative scratch") && s.contains("modelled bytes per step"),
        "{s}"
    );
    // The deferred fold (VF): one line per check, each passing.
    let deferred: Vec<&str> = s.lines().filter(|l| l.contains("deferred (VF)")).collect();
    assert_eq!(deferred.len(), 3, "{s}");
    assert!(deferred.iter().all(|l| l.ends_with(": PASS")), "{s}");
    assert!(s.contains("deferred (VF) outputs vs ReplaySSM verify"), "{s}");
    assert!(
        s.contains("deferred (VF) committed checkpoints vs ReplaySSM V+F, at every step and after the final flush: BIT-IDENTICAL: PASS"),
        "{s}"
    );
    assert!(
        s.contains("deferred (VF) committed checkpoints vs the baseline, at every step and after the final flush: BIT-IDENTICAL: PASS"),
        "{s}"
    );
    assert!(
        s.contains("deferred VF (fold of the previous step's records + verify)"),
        "{s}"
    );
    assert!(s.contains(&format!("result: backend={expected_backend} PASS")), "{s}");
}

#[test]
fn demo_decode_mode_reports_bit_identical_buffered_decode() {
    let out = bin()
        .args(["demo", "--mode", "decode", "--steps", "60", "--cache-len", "7"])
        .output()
        .unwrap();
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{s}{}", String::from_utf8_lossy(&out.stderr));
    assert!(s.contains("cache length L=7"), "{s}");
    assert!(
        s.contains("outputs BIT-IDENTICAL and final checkpoints BIT-IDENTICAL"),
        "{s}"
    );
    // 4 requests x floor(60 / 7) periodic flushes.
    assert!(s.contains("32 flushes over 240 row-steps"), "{s}");
    assert!(s.contains("result: backend="), "{s}");
}

#[test]
fn demo_buffered_mode_reports_bit_identical_flushed_checkpoints() {
    let out = bin()
        .args(["demo", "--mode", "buffered", "--steps", "12", "--cache-len", "8"])
        .output()
        .unwrap();
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{s}{}", String::from_utf8_lossy(&out.stderr));
    assert!(s.contains("cache length L=8"), "{s}");
    assert!(s.contains("VB outputs vs f64 from the baseline's checkpoints"), "{s}");
    // L = 2 T: a history holds at most T records, so a row flushes once its accepted records
    // pass T; the run must see some.
    let flushes: usize = s
        .split("each of the ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no flush count: {s}"));
    assert!(flushes > 0, "{s}");
    assert!(s.contains("flushes during the run"), "{s}");
    assert!(s.contains("BIT-IDENTICAL: PASS"), "{s}");
    assert!(!s.contains("DIFFERENT"), "{s}");
    assert!(s.contains("result: backend="), "{s}");
    assert!(s.contains("PASS"), "{s}");
}

#[test]
fn demo_buffered_mode_refuses_a_cache_shorter_than_two_windows() {
    let out = bin()
        .args(["demo", "--mode", "buffered", "--steps", "2", "--cache-len", "7"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains('7'), "{err}");
}

#[test]
fn floor_prints_the_whole_grid_and_the_hand_worked_verify_floor() {
    let out = bin().args(["floor", "--json", "--bandwidth", "4.0"]).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    // 4 model shapes x 7 batches x 4 windows x 13 rows (9 kernels, the D cycle, 3 whole steps),
    // plus the buffered rows (VB-L<l> and step-VB-L<l>) for each L in {8, 16, 32, 64} with
    // L >= 2 T: 4 at T = 2 and 4, 3 at T = 6 and 8.
    assert_eq!(text.lines().count(), 4 * 7 * (4 * 13 + 2 * (4 + 4 + 3 + 3)));
    // Qwen3-Next, B=1, T=4, V: 2_097_152 + 4 * (12_544 + 16_512 + 8_192) bytes (worked in
    // src/floor.rs's test), and 2_246_144 / 4e12 s = 0.562 us.
    let line = text
        .lines()
        .find(|l| {
            l.contains("\"Qwen3-Next\"")
                && l.contains("\"B\":1,")
                && l.contains("\"T\":4,")
                && l.contains("\"kernel\":\"V\"")
        })
        .expect("the Qwen3-Next V line");
    assert!(
        line.contains("\"bytes\":2246144,") && line.contains("\"floor_us\":0.562,"),
        "{line}"
    );
    let bad = bin().args(["floor", "--bandwidth", "0"]).output().unwrap();
    assert_eq!(bad.status.code(), Some(2));
}

#[test]
fn bench_on_the_emulator_runs_every_case_untimed_and_writes_json_and_plot() {
    let dir = std::env::temp_dir().join(format!("replayssm-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (json, png) = (dir.join("bench.json"), dir.join("bench.png"));
    let out = bin()
        .args([
            "bench",
            "--backend",
            "emulated",
            "--shapes",
            "tiny",
            "--batches",
            "1,8",
            "--windows",
            "2,4",
            "--json",
        ])
        .arg(&json)
        .arg("--plot")
        .arg(&png)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("timing skipped"), "the skip must say why: {stderr}");
    let j: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let cases = j["cases"].as_array().unwrap();
    // Per batch: R-decode and copy once, nine windowed kernels at each of two windows.
    assert_eq!(cases.len(), 2 * (2 + 9 * 2));
    for c in cases {
        assert_eq!(c["status"], "ran", "{c}");
        assert!(c["median_us"].is_null() && c["percent_of_floor"].is_null(), "{c}");
        assert!(c["bytes"].as_f64().unwrap() > 0.0, "{c}");
    }
    assert_eq!(j["backend"], "emulated");
    assert!(j["no_timing_reason"].as_str().unwrap().contains("nothing was timed"));
    assert!(j["commit"].is_string() && j["date"].as_str().unwrap().len() == 10);
    let png_bytes = std::fs::read(&png).unwrap();
    assert_eq!(&png_bytes[..8], b"\x89PNG\r\n\x1a\n");
    let table = String::from_utf8_lossy(&out.stdout);
    assert_eq!(table.lines().count(), 1 + cases.len(), "{table}");
    std::fs::remove_dir_all(&dir).ok();

    // Refused before anything runs: a window the verify kernel cannot take, an unknown kernel.
    let bad = bin()
        .args(["bench", "--backend", "emulated", "--shapes", "tiny", "--windows", "1"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--windows 1 is outside 2..=16"));
    let bad = bin().args(["bench", "--kernels", "W"]).output().unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown kernel 'W'"));
}

#[test]
fn bench_tune_on_the_emulator_runs_every_variant_and_writes_a_table_dispatch_reads() {
    use replayssm::tuning::{Choice, Kernel, Table};
    let path = std::env::temp_dir().join(format!("replayssm-tune-{}.json", std::process::id()));
    let out = bin()
        .args([
            "bench",
            "--backend",
            "emulated",
            "--shapes",
            "tiny,tiny-kda",
            "--batches",
            "1,5",
        ])
        .args(["--windows", "2,4", "--tune", "--tune-out"])
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let table = Table::parse(&std::fs::read_to_string(&path).unwrap(), "tune output").unwrap();
    // Every implementation of V, F, P, D (its non-flush and flush cases), VF and VB (L = 16) at 2 shapes x 2
    // batches x 2 windows ran and was checked.
    let variants: usize = [
        Kernel::V,
        Kernel::F,
        Kernel::P,
        Kernel::D,
        Kernel::D,
        Kernel::VF,
        Kernel::VB,
    ]
    .iter()
    .map(|&k| Choice::all(k).len())
    .sum();
    assert_eq!(table.checked.len(), 2 * 2 * 2 * variants, "{:#?}", table.checked);
    assert!(
        table.checked.iter().any(|c| c.contains("staged/16-rows"))
            && table.checked.iter().any(|c| c.contains("prefetch"))
    );
    assert!(
        table.entries.is_empty() && table.source.contains("nothing was timed"),
        "{}",
        table.source
    );
    std::fs::remove_file(&path).ok();
}

// The `validate` subcommand (moved from tests/config.rs with the CLI).

fn validate(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_replayssm"))
        .arg("validate")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn validate_cli_exit_codes_and_messages() {
    let (code, _, err) = validate(&["--enable-linear-replayssm", "--disaggregation-mode", "decode"]);
    assert_eq!(code, 2, "{err}");
    for n in ["--enable-linear-replayssm", "--disaggregation-mode", "'decode'"] {
        assert!(err.contains(n), "{n} missing: {err}");
    }
    let (code, out, err) = validate(&[
        "--enable-linear-replayssm-spec",
        "--disaggregation-mode",
        "decode",
        "--speculative-algorithm",
        "EAGLE",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("replayssm mode: spec ring") && out.contains("state dtype: float32"),
        "{out}"
    );
    assert!(err.contains("warning: B6"), "{err}");
    let (code, _, err) = validate(&["--enable-linear-replayssm", "--linear-replayssm-cache-len", "0"]);
    assert_eq!(code, 2);
    assert!(err.contains("--linear-replayssm-cache-len=0"), "{err}");
    let (code, _, err) = validate(&["--no-such-flag"]);
    assert_eq!(code, 2);
    assert!(err.contains("unexpected argument"), "{err}");
    let (code, _, err) = validate(&["--speculative-algorithm", "MEDUSA"]);
    assert_eq!(code, 2);
    assert!(err.contains("invalid value 'MEDUSA'"), "{err}");
    let (code, out, _) = validate(&[]);
    assert_eq!(code, 0);
    assert!(out.contains("replayssm mode: off"), "{out}");
}

#[test]
fn validate_cli_accepts_an_eagle_tree_and_names_the_tree_kernel() {
    let (code, out, err) = validate(&[
        "--enable-linear-replayssm-spec",
        "--speculative-algorithm",
        "EAGLE",
        "--speculative-eagle-topk",
        "4",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("kernels: VT tree verify"), "{out}");
    assert!(out.contains("draft: tree (top-k 4)"), "{out}");
    assert!(err.contains(&format!("at most {MAX_TREE_NODES} nodes")), "{err}");
    let (code, out, err) = validate(&[
        "--enable-linear-replayssm-spec",
        "--speculative-algorithm",
        "NGRAM",
        "--speculative-num-draft-tokens",
        "12",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("kernels: VT tree verify") && out.contains("12 nodes"),
        "{out}"
    );
    let (code, _, err) = validate(&[
        "--enable-linear-replayssm-spec",
        "--speculative-algorithm",
        "EAGLE",
        "--speculative-eagle-topk",
        "4",
        "--speculative-num-draft-tokens",
        "64",
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains("B1") && err.contains(&format!("at most {MAX_TREE_NODES} nodes")),
        "{err}"
    );
}
