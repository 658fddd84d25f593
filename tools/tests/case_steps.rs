//! Case ops `verify_fold_steps` (the deferred fold over several steps) and
//! `verify_buffered_steps` (the buffered speculative verify over the same steps): the shipped
//! cases and freshly written ones pass on the host backends and fail when their expectations or
//! accept lengths are changed; hostile files are refused with the tensor, value and limit named;
//! the `make-case` arguments of the ops are checked by name.
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use replayssm::backend::Backend;
use replayssm::numerics::Tolerance;
use replayssm::{DType, GateForm, HeadDims, LowerBound, Variant};
use replayssm_tools::case::{self, CaseError, CaseKind, Op, MAX_CASE_STEPS};
use replayssm_tools::workload::{GateData, RecurrentData, WorkloadSpec};
use safetensors::tensor::{Dtype, SafeTensors, TensorView};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_replayssm"))
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("replayssm-case-steps-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// The shipped cases whose file name starts with `prefix`.
fn shipped(prefix: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cases");
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix))
        .collect();
    v.sort();
    v
}

#[test]
fn shipped_step_cases_commit_nothing_and_whole_windows_and_pass_on_the_host_backends() {
    let files = shipped("verify_fold_steps_");
    assert_eq!(files.len(), 2, "{files:?}");
    let mut variants = vec![];
    for f in &files {
        let c = case::load(f).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.op, Op::VerifyFoldSteps);
        variants.push(c.data.variant);
        let steps = c.steps.as_ref().unwrap();
        assert!(steps.count() >= 3, "{}", f.display());
        // Accept lengths of 0 and of the whole window both occur.
        let lens: Vec<i32> = c.data.cu_seqlens.windows(2).map(|w| w[1] - w[0]).collect();
        let r = lens.len();
        assert!(steps.accept.contains(&0), "{}", f.display());
        assert!(
            steps.accept.iter().enumerate().any(|(i, &a)| a == lens[i % r]),
            "{}",
            f.display()
        );
        for backend in [Backend::Emulated, Backend::Reference] {
            let rep = case::run(&c, backend).unwrap();
            assert!(
                rep.passed(),
                "{backend} {}: {} / {:?}",
                f.display(),
                rep.o,
                rep.state_out
            );
        }
    }
    variants.sort_by_key(|v| v.name());
    assert_eq!(variants, [Variant::Gdn, Variant::Kda]);
}

/// A written case: step 0 and the rest of the windows, drawn from `seed`.
fn windows(variant: Variant, dtype: DType, raw_gate: bool, seqlens: &[usize], steps: usize) -> Vec<RecurrentData> {
    let spec = WorkloadSpec {
        variant,
        dims: HeadDims {
            h: 1,
            hv: 2,
            k: 32,
            v: 16,
        },
        dtype,
        seqlens: seqlens.to_vec(),
        null_requests: vec![],
        spare_slots: 1,
        raw_gate,
        // KDA's raw-gate cases carry the safe gate: `lower_bound` through the file and back.
        gate_form: match variant {
            Variant::Kda => GateForm::Bounded(LowerBound::new(-5.0).unwrap()),
            Variant::Gdn => GateForm::Softplus,
        },
        qk_l2norm: true,
    };
    let first = RecurrentData::random(&spec, 40);
    let mut all = vec![first.clone()];
    for s in 1..steps {
        let mut w = RecurrentData::random(&spec, 40 + s as u64);
        if let (
            GateData::Raw { a_log, dt_bias, .. },
            GateData::Raw {
                a_log: l, dt_bias: b, ..
            },
        ) = (&first.gate, &mut w.gate)
        {
            l.clone_from(a_log);
            b.clone_from(dt_bias);
        }
        all.push(w);
    }
    all
}

fn write(path: &Path, all: &[RecurrentData], accept: &[i32], tol: Tolerance) -> std::io::Result<()> {
    case::write_case(
        path,
        CaseKind::VerifyFoldSteps {
            rest: &all[1..],
            accept,
        },
        &all[0],
        tol,
    )
}

/// The tensors of a case file, to edit and write back.
type Tensors = Vec<(String, Dtype, Vec<usize>, Vec<u8>)>;

fn open(bytes: &[u8]) -> (Tensors, HashMap<String, String>) {
    let (_, meta) = SafeTensors::read_metadata(bytes).unwrap();
    let m = meta.metadata().clone().unwrap();
    let st = SafeTensors::deserialize(bytes).unwrap();
    let mut t: Tensors = st
        .tensors()
        .into_iter()
        .map(|(n, v)| (n, v.dtype(), v.shape().to_vec(), v.data().to_vec()))
        .collect();
    t.sort_by(|a, b| a.0.cmp(&b.0));
    (t, m)
}

fn save(t: &Tensors, m: &HashMap<String, String>) -> Vec<u8> {
    let views: Vec<(String, TensorView<'_>)> = t
        .iter()
        .map(|(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    safetensors::serialize(views, &Some(m.clone())).unwrap()
}

fn tensor<'t>(t: &'t mut Tensors, name: &str) -> &'t mut (String, Dtype, Vec<usize>, Vec<u8>) {
    t.iter_mut().find(|x| x.0 == name).unwrap()
}

fn i32s(bytes: &[u8]) -> Vec<i32> {
    bytes
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn parse_err(bytes: &[u8]) -> String {
    match case::parse(Path::new("hostile.safetensors"), bytes) {
        Ok(_) => panic!("a hostile file was accepted"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn written_cases_pass_and_fail_when_their_expectations_or_accept_lengths_change() {
    for (variant, dtype, raw, tol) in [
        (Variant::Gdn, DType::BF16, true, Tolerance::new(1e-4, 8e-3).unwrap()),
        (Variant::Kda, DType::F16, false, Tolerance::new(1e-5, 1e-3).unwrap()),
    ] {
        let all = windows(variant, dtype, raw, &[4, 2, 3], 5);
        // 0 and whole windows, in several steps, so pending records cross the two ring halves.
        let accept = [4, 0, 3, 0, 2, 1, 1, 2, 0, 4, 2, 3, 2, 1, 1];
        let p = tmp(&format!("written_{variant}.safetensors"));
        write(&p, &all, &accept, tol).unwrap();
        let good = std::fs::read(&p).unwrap();
        let c = case::load(&p).unwrap();
        assert_eq!(c.steps.as_ref().unwrap().count(), 5);
        let rep = case::run(&c, Backend::Emulated).unwrap();
        assert!(rep.passed(), "{variant}: {} / {:?}", rep.o, rep.state_out);

        // Another accept length in the last step: only the final checkpoint can tell.
        let (mut t, m) = open(&good);
        let acc = tensor(&mut t, "accept");
        let mut a = i32s(&acc.3);
        a[13] = 0;
        acc.3 = a.iter().flat_map(|x| x.to_le_bytes()).collect();
        let c = case::parse(&p, &save(&t, &m)).unwrap();
        let rep = case::run(&c, Backend::Emulated).unwrap();
        assert!(
            rep.o.passed() && !rep.state_out.unwrap().passed(),
            "{variant}: {:?}",
            rep.state_out
        );

        // Another accept length in the first step: every later step's outputs move too.
        let (mut t, m) = open(&good);
        let acc = tensor(&mut t, "accept");
        let mut a = i32s(&acc.3);
        a[0] = 1;
        acc.3 = a.iter().flat_map(|x| x.to_le_bytes()).collect();
        let c = case::parse(&p, &save(&t, &m)).unwrap();
        assert!(!case::run(&c, Backend::Emulated).unwrap().o.passed(), "{variant}");

        // A changed expected state element.
        let (mut t, m) = open(&good);
        let so = tensor(&mut t, "state_out");
        so.3[4 * 17 + 2] ^= 0x40;
        let c = case::parse(&p, &save(&t, &m)).unwrap();
        assert!(!case::run(&c, Backend::Emulated).unwrap().passed(), "{variant}");
    }
}

#[test]
fn hostile_step_files_are_refused_naming_the_tensor_value_and_limit() {
    let good = std::fs::read(&shipped("verify_fold_steps_")[0]).unwrap();
    let (t0, m0) = open(&good);
    let steps = tensor(&mut t0.clone(), "q").2[0];
    let requests = tensor(&mut t0.clone(), "cu_seqlens").2[0] - 1;
    let stepped = ["q", "k", "v", "a", "b", "g", "beta", "o", "accept"];

    // An accept length past the request's window, and a negative one.
    for bad in [9, -1] {
        let (mut t, m) = (t0.clone(), m0.clone());
        let acc = tensor(&mut t, "accept");
        let mut a = i32s(&acc.3);
        a[requests + 1] = bad;
        acc.3 = a.iter().flat_map(|x| x.to_le_bytes()).collect();
        let e = parse_err(&save(&t, &m));
        assert!(
            e.contains("tensor 'accept'") && e.contains(&format!("accept[1][1] = {bad} outside 0..=")),
            "{e}"
        );
    }

    // More steps than the limit: every stepped tensor repeated to MAX_CASE_STEPS + 1.
    let mut t = t0.clone();
    for x in t.iter_mut().filter(|x| stepped.contains(&x.0.as_str())) {
        let per = x.3.len() / steps;
        x.3 = (0..=MAX_CASE_STEPS)
            .flat_map(|s| x.3[(s % steps) * per..(s % steps + 1) * per].to_vec())
            .collect();
        x.2[0] = MAX_CASE_STEPS + 1;
    }
    let e = parse_err(&save(&t, &m0));
    assert!(
        e.contains("steps (the leading extent of q) is 65, over the limit of 64"),
        "{e}"
    );
    assert_eq!(MAX_CASE_STEPS, 64);

    // No step at all.
    let mut t = t0.clone();
    for x in t.iter_mut().filter(|x| stepped.contains(&x.0.as_str())) {
        x.3.clear();
        x.2[0] = 0;
    }
    let e = parse_err(&save(&t, &m0));
    assert!(e.contains("tensor 'q'") && e.contains("step) extent is 0"), "{e}");

    // Expected outputs of one step fewer than the inputs.
    let mut t = t0.clone();
    let o = tensor(&mut t, "o");
    o.3.truncate(o.3.len() / steps * (steps - 1));
    o.2[0] = steps - 1;
    let e = parse_err(&save(&t, &m0));
    assert!(e.contains("tensor 'o'") && e.contains("shape"), "{e}");

    // accept with the shape of fold's (one step's lengths).
    let mut t = t0.clone();
    let acc = tensor(&mut t, "accept");
    acc.3.truncate(4 * requests);
    acc.2 = vec![requests];
    let e = parse_err(&save(&t, &m0));
    assert!(e.contains("tensor 'accept'") && e.contains("shape"), "{e}");

    // A request with no tokens (cu_seqlens still covers the N tokens).
    let mut t = t0.clone();
    let cu = tensor(&mut t, "cu_seqlens");
    let mut c = i32s(&cu.3);
    c[1] = 0;
    cu.3 = c.iter().flat_map(|x| x.to_le_bytes()).collect();
    let e = parse_err(&save(&t, &m0));
    assert!(e.contains("request 0 has no tokens"), "{e}");

    // Missing tensors.
    for name in ["accept", "state_out"] {
        let t: Tensors = t0.iter().filter(|x| x.0 != name).cloned().collect();
        let e = parse_err(&save(&t, &m0));
        assert!(e.contains(&format!("missing tensor '{name}'")), "{e}");
    }

    // A one-window file (fold's layout) named verify_fold_steps, and the other way round.
    let fold =
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cases/fold_gdn_f16.safetensors")).unwrap();
    let (t, mut m) = open(&fold);
    m.insert("op".into(), "verify_fold_steps".into());
    let e = parse_err(&save(&t, &m));
    assert!(e.contains("tensor 'q'") && e.contains("shape"), "{e}");
    let mut m = m0.clone();
    m.insert("op".into(), "fold".into());
    let e = parse_err(&save(&t0, &m));
    assert!(e.contains("tensor 'q'") && e.contains("shape"), "{e}");

    // The typed error for the step limit is a Limit.
    let mut t = t0.clone();
    for x in t.iter_mut().filter(|x| stepped.contains(&x.0.as_str())) {
        let per = x.3.len() / steps;
        x.3 = (0..=MAX_CASE_STEPS)
            .flat_map(|s| x.3[(s % steps) * per..(s % steps + 1) * per].to_vec())
            .collect();
        x.2[0] = MAX_CASE_STEPS + 1;
    }
    assert!(matches!(
        case::parse(Path::new("x"), &save(&t, &m0)),
        Err(CaseError::Limit {
            value: 65,
            limit: 64,
            ..
        })
    ));
}

#[test]
fn write_case_refuses_steps_that_do_not_fit_together() {
    let tol = Tolerance::new(1e-4, 8e-3).unwrap();
    let all = windows(Variant::Gdn, DType::BF16, true, &[3, 2], 3);
    let p = tmp("refused.safetensors");
    let e = write(&p, &all, &[3, 2, 0, 0, 4, 1], tol).unwrap_err().to_string();
    assert!(e.contains("accept[2][0] = 4 is outside 0..=3"), "{e}");
    let e = write(&p, &all, &[3, 2, 0], tol).unwrap_err().to_string();
    assert!(e.contains("accept has 3 entries for 3 steps x 2 requests"), "{e}");
    let mut other = all.clone();
    if let GateData::Raw { a_log, .. } = &mut other[2].gate {
        a_log[0] += 1.0;
    }
    let e = write(&p, &other, &[0; 6], tol).unwrap_err().to_string();
    assert!(e.contains("step 2's window differs from step 0's"), "{e}");
}

fn make_case(args: &[&str]) -> (bool, String) {
    let out = bin()
        .args([
            "make-case",
            "--op",
            "verify_fold_steps",
            "--atol",
            "1e-4",
            "--rtol",
            "8e-3",
            "--out",
        ])
        .arg(tmp("made.safetensors"))
        .args(args)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!text.contains("panicked"), "{text}");
    (out.status.success(), text)
}

#[test]
fn make_case_writes_step_cases_and_checks_its_step_arguments_by_name() {
    // The default: 3 steps, random accept lengths; check passes.
    let (ok, text) = make_case(&["--dims", "1,2,32,16", "--seqlens", "3,2"]);
    assert!(ok, "{text}");
    let c = case::load(&tmp("made.safetensors")).unwrap();
    assert_eq!(c.steps.as_ref().unwrap().count(), 3);
    let out = bin().arg("check").arg(tmp("made.safetensors")).output().unwrap();
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && s.contains("PASS") && s.contains("op=verify_fold_steps"),
        "{s}"
    );

    for (args, expect) in [
        (vec!["--steps", "65"], "--steps 65 is outside 1..=64"),
        (vec!["--steps", "0"], "--steps 0 is outside 1..=64"),
        (
            vec!["--steps", "2", "--seqlens", "3", "--accept", "1"],
            "--accept has 1 values for --steps 2 x 1 requests",
        ),
        (
            vec!["--steps", "2", "--seqlens", "3", "--accept", "1,4"],
            "--accept: step 1 request 0 accepts 4, outside 0..=3",
        ),
        (vec!["--seqlens", "3,0"], "request 1 has 0 tokens"),
        (vec!["--seqlens", "17"], "request 0 has 17 tokens"),
    ] {
        let (ok, text) = make_case(&args);
        assert!(!ok && text.contains(expect), "{args:?}: {text}");
    }
    let out = bin()
        .args([
            "make-case",
            "--op",
            "fold",
            "--steps",
            "2",
            "--atol",
            "1e-4",
            "--rtol",
            "8e-3",
            "--out",
        ])
        .arg(tmp("never.safetensors"))
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && e.contains("--steps is for ops verify_fold_steps and verify_buffered_steps, not fold"),
        "{e}"
    );
}

#[test]
fn shipped_buffered_cases_flush_and_pass_on_the_host_backends_and_fail_when_changed() {
    let files = shipped("verify_buffered_steps_");
    assert_eq!(files.len(), 2, "{files:?}");
    let mut variants = vec![];
    for f in &files {
        let c = case::load(f).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.op, Op::VerifyBufferedSteps);
        let l = c.cache_len.unwrap();
        variants.push(c.data.variant);
        let steps = c.steps.as_ref().unwrap();
        // Some row's history passes L - T: a flush during the steps, not only the final one.
        let lens: Vec<i32> = c.data.cu_seqlens.windows(2).map(|w| w[1] - w[0]).collect();
        let (r, t) = (lens.len(), *lens.iter().max().unwrap() as usize);
        let mut flushed = false;
        for row in 0..r {
            let mut h = 0usize;
            for s in 0..steps.count() {
                h += steps.accept[s * r + row] as usize;
                if h > l - t {
                    flushed = true;
                    h = 0;
                }
            }
        }
        assert!(flushed, "{}: no flush before the end", f.display());
        for backend in [Backend::Emulated, Backend::Reference] {
            let rep = case::run(&c, backend).unwrap();
            assert!(
                rep.passed(),
                "{backend} {}: {} / {:?}",
                f.display(),
                rep.o,
                rep.state_out
            );
        }
        // Another accept length in the first step: the final checkpoint tells.
        let good = std::fs::read(f).unwrap();
        let (mut tt, m) = open(&good);
        let acc = tensor(&mut tt, "accept");
        let mut a = i32s(&acc.3);
        a[0] = if a[0] == 0 { 1 } else { 0 };
        acc.3 = a.iter().flat_map(|x| x.to_le_bytes()).collect();
        let changed = case::parse(f, &save(&tt, &m)).unwrap();
        let rep = case::run(&changed, Backend::Emulated).unwrap();
        assert!(!rep.passed(), "{}: a changed accept length passed", f.display());
    }
    variants.sort_by_key(|v| v.name());
    assert_eq!(variants, [Variant::Gdn, Variant::Kda]);
}

#[test]
fn a_buffered_case_outside_its_cache_rule_is_refused_by_name() {
    let tol = Tolerance::new(1e-4, 8e-3).unwrap();
    let all = windows(Variant::Gdn, DType::BF16, true, &[4, 2], 3);
    let accept = [4, 2, 3, 0, 1, 2];
    let p = tmp("buffered_l7.safetensors");
    // L = 7 < 2 T = 8: the file is written (the format allows 1..=64), the run names the rule.
    case::write_case(
        &p,
        CaseKind::VerifyBufferedSteps {
            rest: &all[1..],
            accept: &accept,
            cache_len: 7,
        },
        &all[0],
        tol,
    )
    .unwrap();
    let c = case::load(&p).unwrap();
    for backend in [Backend::Emulated, Backend::Reference] {
        let e = case::run(&c, backend).unwrap_err().to_string();
        assert!(e.contains("cache_len = 7 is below 2 T = 8"), "{backend}: {e}");
    }
    // Past the format's limit: refused when the file is read.
    let bytes = std::fs::read(&p).unwrap();
    let (t, mut m) = open(&bytes);
    m.insert("cache_len".into(), "65".into());
    let e = parse_err(&save(&t, &m));
    assert!(e.contains("cache_len") && e.contains("65 is outside 1..=64"), "{e}");
    let out = bin()
        .args([
            "make-case",
            "--op",
            "verify_buffered_steps",
            "--cache-len",
            "6",
            "--seqlens",
            "4,2",
            "--atol",
            "1e-4",
            "--rtol",
            "8e-3",
            "--out",
        ])
        .arg(tmp("never_buffered.safetensors"))
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && e.contains("--cache-len: cache_len = 6 is below 2 T = 8"),
        "{e}"
    );
}
