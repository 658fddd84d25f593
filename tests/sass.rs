//! SASS inspection of the compiled sm_90 kernels (no device needed): `cuobjdump --dump-sass` of
//! the build's nvcc objects (PyPI `nvidia-cuda-cuobjdump==13.2.51` + `nvidia-cuda-nvdisasm`,
//! installed by scripts/test into .toolchain/sass), then per kernel instantiation:
//! - no local memory at all (no LDL / STL): nothing spills or lives in a stack array;
//! - the fp32 state rows move with the widest access a lane's `EPL = K/32` floats allow:
//!   128-bit (LDG.E.128 / STG.E.128) at K >= 128, 64-bit at K = 64;
//! - every instantiation ptxas reported is found in the SASS.
//!
//! Skips, saying why, when cuobjdump is not installed or CUDA was not compiled;
//! `REPLAYSSM_REQUIRE_SASS=1` (set by scripts/test) turns the skip into a failure.
mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use replayssm::build_info;

fn cuobjdump() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("CUOBJDUMP") {
        return Some(PathBuf::from(p));
    }
    let local = Path::new(env!("CARGO_MANIFEST_DIR")).join(".toolchain/sass/nvidia/cu13/bin/cuobjdump");
    local.is_file().then_some(local)
}

fn skip(why: &str) {
    if std::env::var("REPLAYSSM_REQUIRE_SASS").as_deref() == Ok("1") {
        panic!("REPLAYSSM_REQUIRE_SASS=1 but {why}");
    }
    common::say(&format!("SKIPPED sass checks: {why}"));
}

/// One kernel instantiation's SASS: family (`fold_kernel`), EPL, and opcode counts.
struct Function {
    family: String,
    epl: u32,
    ops: BTreeMap<String, u32>,
}

/// `_ZN4rssm11fold_kernelILi8EfLb0EEEv16rssm_fold_params` -> (`fold_kernel`, 8).
fn parse_mangled(name: &str) -> Option<(String, u32)> {
    let rest = name.strip_prefix("_ZN4rssm")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let len: usize = digits.parse().ok()?;
    let family = rest.get(digits.len()..digits.len() + len)?.to_string();
    let args = rest.get(digits.len() + len..)?.strip_prefix("ILi")?;
    let epl: u32 = args
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .ok()?;
    Some((family, epl))
}

fn dump(tool: &Path, object: &Path) -> Vec<Function> {
    let out = Command::new(tool)
        .arg("--dump-sass")
        .arg(object)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", tool.display()));
    assert!(
        out.status.success(),
        "cuobjdump failed on {}: {}",
        object.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let mut functions: Vec<Function> = vec![];
    for line in text.lines() {
        if let Some(name) = line.split("Function : ").nth(1) {
            let (family, epl) = parse_mangled(name.trim()).unwrap_or_else(|| panic!("unexpected kernel name {name}"));
            functions.push(Function {
                family,
                epl,
                ops: BTreeMap::new(),
            });
        } else if let (Some(f), Some(code)) = (functions.last_mut(), line.split("*/").nth(1)) {
            // `/*0070*/  @!P0 LDG.E.128 R4, desc[UR4][R2.64] ;` -> LDG.E.128
            let mut tokens = code.split_whitespace();
            let mut op = tokens.next().unwrap_or("");
            if op.starts_with('@') {
                op = tokens.next().unwrap_or("");
            }
            if op.chars().next().is_some_and(|c| c.is_ascii_uppercase()) {
                *f.ops.entry(op.trim_end_matches(';').to_string()).or_default() += 1;
            }
        }
    }
    functions
}

/// Accesses of exactly `op` (`LDG.E`: 32-bit, not `LDG.E.64`).
fn count_exact(f: &Function, op: &str) -> u32 {
    f.ops.get(op).copied().unwrap_or(0)
}

fn count(f: &Function, prefix: &str) -> u32 {
    f.ops
        .iter()
        .filter(|(op, _)| op.starts_with(prefix))
        .map(|(_, n)| n)
        .sum()
}

#[test]
fn kernels_use_no_local_memory_and_move_the_state_with_wide_accesses() {
    if !build_info::CUDA_COMPILED {
        return skip("the CUDA backend was not compiled (no nvcc objects)");
    }
    let Some(tool) = cuobjdump() else {
        return skip("cuobjdump not found (set CUOBJDUMP, or run scripts/test to install it)");
    };
    let dir = Path::new(build_info::CUDA_OBJECTS_DIR);
    let mut objects: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("the build's CUDA objects dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(".cuda.o") && !p.ends_with("cuda_runtime.cuda.o"))
        .collect();
    objects.sort();
    let functions: Vec<Function> = objects.iter().flat_map(|o| dump(&tool, o)).collect();

    // Every sm_90 instantiation in ptxas's report is in the SASS (the parse sees them all).
    let reported = build_info::kernel_resources()
        .iter()
        .filter(|r| r.arch == "sm_90")
        .count();
    assert_eq!(functions.len(), reported, "SASS functions vs ptxas report");

    let state_movers = [
        "recurrent_kernel",
        "verify_kernel",
        "verify_staged_kernel",
        "fold_kernel",
        "replay_kernel",
        "verify_fold_kernel",
        "verify_fold_staged_kernel",
        "verify_buffered_kernel",
        "decode_kernel",
        "decode_prefetch_kernel",
        "decode_materialize_kernel",
    ];
    // (family, EPL) -> [LDG.128, STG.128, LDG.64, STG.64, LDG.U16]
    let mut summary: BTreeMap<(String, u32), [u32; 5]> = BTreeMap::new();
    for f in &functions {
        let local = count(f, "LDL") + count(f, "STL");
        assert_eq!(local, 0, "{} EPL {}: {local} local-memory accesses", f.family, f.epl);
        let (ld128, st128) = (count(f, "LDG.E.128"), count(f, "STG.E.128"));
        let (ld64, st64) = (count(f, "LDG.E.64"), count(f, "STG.E.64"));
        let ld16 = count(f, "LDG.E.U16");
        let e = summary.entry((f.family.clone(), f.epl)).or_default();
        for (total, n) in e.iter_mut().zip([ld128, st128, ld64, st64, ld16]) {
            *total += n;
        }
        if !state_movers.contains(&f.family.as_str()) {
            continue;
        }
        // V and VB read the checkpoint only; every other state mover also writes it (VF STAGED's
        // groups of EPL channels are F's lanes: 16-byte accesses at EPL 4 and 8, 8-byte at 2).
        if f.family == "verify_staged_kernel" || f.family == "verify_buffered_kernel" {
            // Its streaming layout (a lane holds min(EPL, 4) consecutive channels of every row
            // of its warp's) reads rows and the staged keys and queries with 16-byte accesses
            // from K = 128 on, 8-byte at K = 64, 4-byte at K = 32 (a lane's one channel); it
            // stores the staged outputs as 16-byte vectors.
            let (state, staged) = match f.epl {
                4 | 8 => (ld128, count(f, "LDS.128")),
                2 => (ld64, count(f, "LDS.64")),
                _ => (count_exact(f, "LDG.E"), count_exact(f, "LDS")),
            };
            assert!(state > 0, "verify_staged_kernel EPL {}: no vector state load", f.epl);
            assert!(staged > 0, "verify_staged_kernel EPL {}: no vector shared read", f.epl);
            assert!(st128 > 0, "verify_staged_kernel EPL {}: no 128-bit output store", f.epl);
            continue;
        }
        // Kernel D reads the token its block shares (TokenTile) a lane's EPL channels at a time.
        if f.family.starts_with("decode_") && f.family != "decode_materialize_kernel" {
            let shared = match f.epl {
                4 | 8 => count(f, "LDS.128"),
                2 => count(f, "LDS.64"),
                _ => count_exact(f, "LDS"),
            };
            assert!(
                shared > 0,
                "{} EPL {}: no vector read of the shared token",
                f.family,
                f.epl
            );
        }
        let writes = f.family != "verify_kernel" && f.family != "verify_buffered_kernel";
        match f.epl {
            4 | 8 => {
                assert!(ld128 > 0, "{} EPL {}: no 128-bit state load", f.family, f.epl);
                assert!(
                    !writes || st128 > 0,
                    "{} EPL {}: no 128-bit state store",
                    f.family,
                    f.epl
                );
            }
            2 => {
                assert!(ld64 > 0, "{} EPL 2: no 64-bit state load", f.family);
                assert!(!writes || st64 > 0, "{} EPL 2: no 64-bit state store", f.family);
            }
            _ => {}
        }
    }
    let mut table = String::from(
        "SASS global accesses per kernel family and EPL (summed over dtypes and variants):\n  \
         family                     EPL  LDG.128 STG.128 LDG.64 STG.64 LDG.U16\n",
    );
    for ((family, epl), [a, b, c, d, e]) in &summary {
        table.push_str(&format!("  {family:<26} {epl:>3} {a:>8} {b:>7} {c:>6} {d:>6} {e:>7}\n"));
    }
    common::say(&table);
}

#[test]
fn mangled_names_parse() {
    assert_eq!(
        parse_mangled("_ZN4rssm11fold_kernelILi8EfLb0EEEv16rssm_fold_params"),
        Some(("fold_kernel".to_string(), 8))
    );
    assert_eq!(
        parse_mangled("_ZN4rssm25decode_materialize_kernelILi2ELb1EEEv18rssm_decode"),
        Some(("decode_materialize_kernel".to_string(), 2))
    );
    assert_eq!(
        parse_mangled("_ZN4rssm14cursors_kernelILi128EEEv18rssm_cursor_params"),
        Some(("cursors_kernel".to_string(), 128))
    );
    assert_eq!(parse_mangled("_Z3foov"), None);
}
