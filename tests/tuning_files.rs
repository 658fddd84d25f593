//! `REPLAYSSM_TUNE_TABLE` naming something that is not a small regular file (issue 28, class 5):
//! a FIFO, a device, a directory or an oversized file is refused quickly, with bounded memory,
//! with one warning naming the variable, the path and the rule, and every call takes the default.
//!
//! The table is read once per process, so each case runs this test binary again as a child (the
//! test `child_reports_its_choice`), under an address-space limit and a timeout: before the fix a
//! FIFO blocked the first kernel call forever and /dev/zero grew a string until memory ran out.
mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::child::{self, vm, Outcome};
use replayssm::tuning::{self, Kernel, Key};

const CHILD: &str = "REPLAYSSM_TUNING_FILES_TEST_CHILD";
/// How long a child may take to read its table and report (it needs well under a second).
const TIMEOUT: Duration = Duration::from_secs(30);

fn key() -> Key {
    Key {
        kernel: Kernel::V,
        kda: false,
        k: 128,
        v: 128,
        hv: 64,
        window: 4,
        batch: 100,
    }
}

#[test]
fn child_reports_its_choice() {
    if std::env::var_os(CHILD).is_none() {
        return; // only meaningful as the child of the tests below
    }
    // The rise of the address space's high-water mark while the table is read (a lower bound of
    // what reading took beyond the earlier peak: 1 GiB read shows as about 1 GiB).
    let before = vm("VmPeak:");
    println!("\nCHOICE {}", tuning::choose(&key()));
    if let (Some(before), Some(peak)) = (before, vm("VmPeak:")) {
        println!("\nGROWTH {}", peak.saturating_sub(before));
    }
}

/// Runs `child_reports_its_choice` with the table at `table`, under 1 GiB of address space,
/// killed after `TIMEOUT`.
fn child(table: &Path) -> Outcome {
    let mut cmd = child::this_test("child_reports_its_choice");
    cmd.env(CHILD, "1").env(tuning::TABLE_ENV, table);
    child::run(cmd, Some(1 << 30), TIMEOUT)
}

/// The child ran to the end, took the default and warned once, naming the variable, the path
/// and `rule`, and reading the table raised its address space's peak by less than 16 MiB.
fn assert_refused(table: &Path, rule: &str) {
    let out = child(table);
    let text = format!("{}: {}", table.display(), out.text());
    assert!(!out.timed_out && out.code == Some(0), "{text}");
    assert!(out.stdout.contains("CHOICE default"), "{text}");
    let warnings: Vec<&str> = out.stderr.lines().filter(|l| l.contains("warning")).collect();
    assert_eq!(warnings.len(), 1, "exactly one warning: {text}");
    let w = warnings[0];
    assert!(
        w.contains(tuning::TABLE_ENV) && w.contains(&table.display().to_string()) && w.contains(rule),
        "the warning must name {}, the path and {rule:?}: {text}",
        tuning::TABLE_ENV
    );
    if cfg!(target_os = "linux") {
        let growth: u64 = out
            .line_after("GROWTH ")
            .and_then(|g| g.trim().parse().ok())
            .unwrap_or_else(|| panic!("no GROWTH line: {text}"));
        assert!(
            growth < 16 << 20,
            "reading the table grew the address space by {} MiB: {text}",
            growth >> 20
        );
    }
}

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("replayssm-tuning-files-{}-{name}", std::process::id()))
}

/// Removes its paths when dropped, also when an assertion fails (one is a 2 GiB sparse file).
struct Cleanup(Vec<PathBuf>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for p in &self.0 {
            if p.is_dir() {
                std::fs::remove_dir(p).ok();
            } else {
                std::fs::remove_file(p).ok();
            }
        }
    }
}

#[cfg(unix)]
fn mkfifo(path: &Path) {
    use std::os::unix::ffi::OsStrExt;
    extern "C" {
        fn mkfifo(path: *const std::ffi::c_char, mode: u32) -> i32;
    }
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo {}", path.display());
}

#[cfg(unix)]
#[test]
fn a_fifo_is_refused_without_blocking() {
    let p = temp("fifo");
    let _cleanup = Cleanup(vec![p.clone()]);
    std::fs::remove_file(&p).ok();
    mkfifo(&p);
    assert_refused(&p, "not a regular file");
}

#[cfg(unix)]
#[test]
fn a_symlink_to_a_fifo_is_refused_without_blocking() {
    let (fifo, link) = (temp("fifo-target"), temp("fifo-link"));
    let _cleanup = Cleanup(vec![link.clone(), fifo.clone()]);
    std::fs::remove_file(&fifo).ok();
    std::fs::remove_file(&link).ok();
    mkfifo(&fifo);
    std::os::unix::fs::symlink(&fifo, &link).unwrap();
    assert_refused(&link, "not a regular file");
}

#[cfg(target_os = "linux")]
#[test]
fn dev_zero_is_refused_quickly_with_bounded_memory() {
    assert_refused(Path::new("/dev/zero"), "not a regular file");
}

#[test]
fn a_directory_is_refused() {
    let d = temp("dir");
    let _cleanup = Cleanup(vec![d.clone()]);
    std::fs::create_dir_all(&d).unwrap();
    assert_refused(&d, "not a regular file");
}

#[test]
fn an_oversized_table_is_refused_without_reading_it() {
    // 2 GiB, sparse: before the fix it was read whole (2 GiB of memory: the child's 1 GiB
    // address-space limit turned that into an abort).
    let (p, over) = (temp("huge.json"), temp("over.json"));
    let _cleanup = Cleanup(vec![p.clone(), over.clone()]);
    let f = std::fs::File::create(&p).unwrap();
    f.set_len(2 << 30).unwrap();
    drop(f);
    assert_refused(&p, &format!("larger than {} bytes", tuning::MAX_TABLE_BYTES));
    // Just over the cap, but otherwise plausible JSON: refused by size, not parsed.
    let p = over;
    let mut text = String::from("{\"format\": \"replayssm-tune/1\", \"entries\": []}");
    text.push_str(&" ".repeat(tuning::MAX_TABLE_BYTES as usize + 1 - text.len()));
    std::fs::write(&p, &text).unwrap();
    assert_refused(&p, &format!("larger than {} bytes", tuning::MAX_TABLE_BYTES));
}
