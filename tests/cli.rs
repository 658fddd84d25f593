//! The `replayssm` binary: `check` on the shipped cases and on broken files, `info`, `demo`.
use std::path::{Path, PathBuf};
use std::process::Command;

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
    let text = String::from_utf8_lossy(&good[8..8 + header]).replace("replayssm-case/1", "replayssm-case/9");
    let mut v = (text.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(text.as_bytes());
    v.extend_from_slice(&good[8 + header..]);
    std::fs::write(&p, &v).unwrap();
    check_fails(&p, "replayssm-case/9");

    // A missing tensor: rename "state_out" in the header.
    let p = tmp("missing_tensor.safetensors");
    let text = String::from_utf8_lossy(&good[8..8 + header]).replace("\"state_out\"", "\"state_xxx\"");
    let mut v = (text.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(text.as_bytes());
    v.extend_from_slice(&good[8 + header..]);
    std::fs::write(&p, &v).unwrap();
    check_fails(&p, "missing tensor 'state_out'");

    // A decode case without its cache length.
    let dec = cases()
        .into_iter()
        .find(|p| p.to_string_lossy().contains("decode_"))
        .expect("a shipped decode case");
    let d = std::fs::read(&dec).unwrap();
    let dh = u64::from_le_bytes(d[..8].try_into().unwrap()) as usize;
    let p = tmp("decode_no_cache_len.safetensors");
    let text = String::from_utf8_lossy(&d[8..8 + dh]).replace("\"cache_len\"", "\"cache_lxx\"");
    let mut v = (text.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(text.as_bytes());
    v.extend_from_slice(&d[8 + dh..]);
    std::fs::write(&p, &v).unwrap();
    check_fails(&p, "cache_len");

    // One bad file among good ones still fails the whole run.
    let mut args: Vec<PathBuf> = cases();
    args.push(p);
    let out = bin().arg("check").args(&args).output().unwrap();
    assert!(!out.status.success());
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
