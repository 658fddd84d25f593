//! The tuning table reaches dispatch: a table named by REPLAYSSM_TUNE_TABLE selects the
//! implementation of a matching call, a corrupt or missing one prints a warning and every call
//! takes the default. The table is read once per process, so each case runs this test binary
//! again as a child with its own environment.
use std::process::Command;

use replayssm::tuning::{self, Choice, Impl, Kernel, Key};

const CHILD: &str = "REPLAYSSM_TUNING_TEST_CHILD";

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

/// 16 positions over a 4096-row head: STAGED over all rows would need 512 KB of tiles.
fn big() -> Key {
    Key {
        v: 4096,
        window: 16,
        ..key()
    }
}

/// Runs `child_reports_its_choice` in a child process with the table at `table` (or none).
fn child(table: Option<&std::path::Path>) -> (String, String) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "child_reports_its_choice", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1");
    match table {
        Some(p) => cmd.env(tuning::TABLE_ENV, p),
        None => cmd.env_remove(tuning::TABLE_ENV),
    };
    let out = cmd.output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "child failed: {stdout}\n{stderr}");
    (stdout, stderr)
}

#[test]
fn child_reports_its_choice() {
    if std::env::var_os(CHILD).is_none() {
        return; // only meaningful as the child of the tests below
    }
    println!("CHOICE {}", tuning::choose(&key()));
    println!("OTHER {}", tuning::choose(&other()));
    println!("BIG {}", tuning::choose(&big()));
}

/// What the shipped table (the model's entries) chooses for `key`: the default outside them.
fn shipped_choice(key: &Key) -> Choice {
    let shipped = tuning::Table::parse(tuning::SHIPPED_TABLE, "shipped").unwrap();
    shipped.lookup(key).unwrap_or(Choice::DEFAULT)
}

/// The key `child_reports_its_choice` prints as OTHER.
fn other() -> Key {
    Key { batch: 1, ..key() }
}

fn write(name: &str, text: &str) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("replayssm-tuning-{}-{name}.json", std::process::id()));
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn a_table_entry_selects_the_implementation_of_matching_calls() {
    let mut t = tuning::Table::parse(tuning::SHIPPED_TABLE, "shipped").unwrap();
    t.insert(
        &key(),
        Choice {
            imp: Impl::Staged,
            block_rows: 32,
        },
        Some(1.0),
        Some(2.0),
    );
    let p = write("good", &serde_json::to_string(&t).unwrap());
    let (out, err) = child(Some(&p));
    assert!(out.contains("CHOICE staged/32-rows"), "{out}");
    // A call outside the entry's bucket keeps what the rest of the table says.
    assert!(
        out.contains(&format!("OTHER {}", shipped_choice(&other()))),
        "a call outside the entry's bucket: {out}"
    );
    assert!(!err.contains("warning"), "{err}");
    std::fs::remove_file(p).ok();
}

#[test]
fn a_corrupt_or_missing_table_warns_and_every_call_takes_the_default() {
    let p = write("corrupt", "{\"format\": \"replayssm-tune/1\", \"entries\": [");
    let (out, err) = child(Some(&p));
    assert!(out.contains("CHOICE default"), "{out}");
    assert!(
        err.contains("warning: tuning table") && err.contains("not valid JSON"),
        "{err}"
    );
    std::fs::remove_file(&p).ok();
    let (out, err) = child(Some(std::path::Path::new("/nonexistent/replayssm-table.json")));
    assert!(out.contains("CHOICE default"), "{out}");
    assert!(err.contains("cannot read it"), "{err}");
    // A table whose entry does not fit the call (16 positions over a 4096-row head in one block)
    // is not taken either: the call keeps the default.
    let mut t = tuning::Table::parse(tuning::SHIPPED_TABLE, "shipped").unwrap();
    t.insert(
        &big(),
        Choice {
            imp: Impl::Staged,
            block_rows: 0,
        },
        None,
        None,
    );
    let p = write("unfit", &serde_json::to_string(&t).unwrap());
    let (out, _) = child(Some(&p));
    assert!(out.contains("BIG default"), "{out}");
    std::fs::remove_file(p).ok();
    // The shipped table (no env): the model's entries, a call outside them the default.
    let (out, err) = child(None);
    assert!(
        out.contains(&format!("CHOICE {}", shipped_choice(&key())))
            && out.contains(&format!("OTHER {}", shipped_choice(&other())))
            && out.contains("BIG default")
            && !err.contains("warning"),
        "{out} {err}"
    );
}
