//! Which implementation of a kernel a launch runs (`rssm_impl` and `block_rows` of the kernel
//! params), chosen per call from a tuning table keyed by (kernel, GDN | KDA, K, HV, T bucket,
//! B bucket).
//!
//! Every implementation computes the same contract (F and P bit for bit, V within its tolerance),
//! so the choice is only about speed, and a table can never make a valid call fail: a choice that
//! does not fit the call (shared memory, window) falls back to [`Impl::Default`]. The table is
//! data: `bench/autotune/h200.json` is compiled in, `REPLAYSSM_TUNE_TABLE=<path>` replaces it, and
//! `replayssm bench --tune` writes one. The path must name a regular file (a FIFO, device or
//! directory is refused without being opened for reading) of at most [`MAX_TABLE_BYTES`]. A
//! missing, unusable or corrupt table prints one warning on stderr and every call takes the
//! default. Tests and the bench pin a choice with [`force`].

use std::cell::RefCell;
use std::fmt;
use std::io::{Read, Write};
use std::path::Path;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use crate::ffi;

/// The format tag of a table file.
pub const TABLE_FORMAT: &str = "replayssm-tune/1";

/// The table shipped with the crate (the H200 targets).
pub const SHIPPED_TABLE: &str = include_str!("../bench/autotune/h200.json");

/// The environment variable naming a table file that replaces the shipped one.
pub const TABLE_ENV: &str = "REPLAYSSM_TUNE_TABLE";

/// The largest table file read, in bytes (1 MiB). The shipped table is a few hundred bytes and
/// an entry about 150, so a table of every bucket of every kernel fits many times over; a larger
/// file is refused without being read.
pub const MAX_TABLE_BYTES: u64 = 1 << 20;

/// A tunable kernel. VT runs V's implementations, FT F's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Kernel {
    V,
    F,
    P,
    /// Buffered decode (materialise has one implementation).
    D,
    /// The deferred fold (fold-then-verify).
    VF,
    /// The buffered speculative verify: STAGED only, its rows per block chosen here (keyed by the
    /// draft window T; the table's entries are the model's at cache length 16). A choice is taken
    /// only where its shared memory fits the largest ring; otherwise the launch keeps the whole
    /// head where it fits, else the most rows that do (`kernels::verify_buffered`).
    VB,
}

impl fmt::Display for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// An implementation (`rssm_impl`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Impl {
    /// V: one block per 16 rows; F, P: records read in the step loop; D: token inputs after the
    /// pending records.
    Default,
    /// V, VF: window built once per block, state streamed over `block_rows` rows (VF: each row
    /// folded with F's operations before its verify).
    Staged,
    /// F, P: the request's records staged in shared memory before the step loop; D: token inputs
    /// issued before the pending records.
    Prefetch,
}

impl Impl {
    pub fn to_ffi(self) -> i32 {
        (match self {
            Impl::Default => ffi::rssm_impl_RSSM_IMPL_DEFAULT,
            Impl::Staged => ffi::rssm_impl_RSSM_IMPL_STAGED,
            Impl::Prefetch => ffi::rssm_impl_RSSM_IMPL_PREFETCH,
        }) as i32
    }
}

/// What a launch runs: an implementation and its rows per block (0 = its own default).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Choice {
    #[serde(rename = "impl")]
    pub imp: Impl,
    #[serde(default)]
    pub block_rows: u32,
}

impl Choice {
    pub const DEFAULT: Choice = Choice {
        imp: Impl::Default,
        block_rows: 0,
    };

    /// Every implementation `kernel` has, with the row splits worth timing: what `bench --tune`
    /// sweeps and the correctness suites run.
    pub fn all(kernel: Kernel) -> Vec<Choice> {
        let c = |imp, block_rows| Choice { imp, block_rows };
        match kernel {
            Kernel::V | Kernel::VF => vec![
                Choice::DEFAULT,
                c(Impl::Staged, 0),
                c(Impl::Staged, 16),
                c(Impl::Staged, 32),
                c(Impl::Staged, 64),
            ],
            Kernel::F | Kernel::P | Kernel::D => vec![Choice::DEFAULT, c(Impl::Prefetch, 0)],
            Kernel::VB => vec![
                c(Impl::Staged, 0),
                c(Impl::Staged, 16),
                c(Impl::Staged, 32),
                c(Impl::Staged, 64),
            ],
        }
    }
}

impl fmt::Display for Choice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.imp, self.block_rows) {
            (Impl::Staged, 0) => write!(f, "staged/all-rows"),
            (Impl::Staged, r) => write!(f, "staged/{r}-rows"),
            (imp, _) => write!(f, "{}", format!("{imp:?}").to_lowercase()),
        }
    }
}

/// The shape of one call, as the table keys it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Key {
    pub kernel: Kernel,
    pub kda: bool,
    pub k: usize,
    pub v: usize,
    pub hv: usize,
    /// Draft window T (V) or ring window W (F, P).
    pub window: usize,
    pub batch: usize,
}

/// Upper ends of the window buckets.
pub const T_BUCKETS: [usize; 4] = [2, 4, 8, 16];
/// Upper ends of kernel D's cache-length buckets (its `T` is the cache length L, up to 65536).
pub const L_BUCKETS: [usize; 16] = [
    2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536,
];

/// The window buckets of `kernel`: T for V, F and P, the cache length L for D.
pub fn window_buckets(kernel: Kernel) -> &'static [usize] {
    match kernel {
        Kernel::D => &L_BUCKETS,
        _ => &T_BUCKETS,
    }
}
/// Upper ends of the batch buckets.
pub const B_BUCKETS: [usize; 10] = [1, 8, 32, 64, 128, 256, 512, 1024, 4096, 65535];

fn bucket(x: usize, ends: &[usize]) -> usize {
    ends.iter().copied().find(|&e| x <= e).unwrap_or(usize::MAX)
}

/// One row of a table: the bucket it covers and what to run there.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub kernel: Kernel,
    /// "gdn" or "kda".
    pub variant: String,
    #[serde(rename = "K")]
    pub k: usize,
    #[serde(rename = "HV")]
    pub hv: usize,
    /// The window bucket's upper end: T in 2, 4, 8, 16 (V, F, P), or D's cache length L ([`L_BUCKETS`]).
    #[serde(rename = "T")]
    pub t: usize,
    /// The batch bucket's upper end.
    #[serde(rename = "B")]
    pub b: usize,
    #[serde(flatten)]
    pub choice: Choice,
    /// The timing that chose it (microseconds; absent when untimed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub median_us: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_us: Option<f64>,
    /// Whether a device run timed this choice or the executable model (`replayssm model
    /// --write-table`) ranked it first; absent in tables older than the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<EntrySource>,
}

/// Where a table entry's choice comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EntrySource {
    /// Timed on a device (`replayssm bench --tune`).
    Measured,
    /// Ranked first by the executable model from the compiled code: a prediction.
    Model,
}

/// A tuning table (`bench/autotune/*.json`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Table {
    pub format: String,
    pub device: Option<String>,
    /// How the entries were obtained (the run, or why there are none).
    pub source: String,
    pub command: Option<String>,
    pub date: Option<String>,
    pub entries: Vec<Entry>,
    /// What an untimed run (the emulator) ran and checked, one line per case and implementation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checked: Vec<String>,
}

/// Why a table could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    #[error("tuning table {origin}: not valid JSON of the table format: {source}")]
    Parse { origin: String, source: serde_json::Error },
    #[error("tuning table {origin}: format is {found:?}, expected {TABLE_FORMAT:?}")]
    Format { origin: String, found: String },
    #[error("tuning table {origin}: entry {index}: {why}")]
    Entry { origin: String, index: usize, why: String },
    #[error("tuning table {origin}: cannot read it: {source}")]
    Read { origin: String, source: std::io::Error },
    #[error("tuning table {origin}: not a regular file ({kind}); a table must be a regular file")]
    NotRegular { origin: String, kind: &'static str },
    #[error(
        "tuning table {origin}: {size} bytes, larger than {MAX_TABLE_BYTES} bytes (MAX_TABLE_BYTES), the most a \
         table may have"
    )]
    TooLarge { origin: String, size: u64 },
}

/// What a file that is not a regular file is, for messages.
fn file_kind(t: std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "a FIFO";
        }
        if t.is_char_device() {
            return "a character device";
        }
        if t.is_block_device() {
            return "a block device";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    if t.is_dir() {
        "a directory"
    } else if t.is_file() {
        "a regular file"
    } else {
        "neither a file nor a directory"
    }
}

/// Opens `path` for reading without blocking on a FIFO where the platform allows (`O_NONBLOCK`
/// has no effect on a regular file).
fn open_nonblocking(path: &Path) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(all(
        target_os = "linux",
        any(
            target_arch = "x86_64",
            target_arch = "x86",
            target_arch = "aarch64",
            target_arch = "arm",
            target_arch = "riscv64",
            target_arch = "powerpc64",
            target_arch = "s390x",
            target_arch = "loongarch64"
        )
    ))]
    {
        use std::os::unix::fs::OpenOptionsExt;
        const O_NONBLOCK: i32 = 0o4000; // <asm-generic/fcntl.h> and x86, arm, powerpc, s390
        options.custom_flags(O_NONBLOCK);
    }
    options.open(path)
}

/// Reads a table file: a regular file of at most [`MAX_TABLE_BYTES`], checked before it is
/// opened (so a FIFO never blocks and a device is never read) and again on the opened file (the
/// path may have been replaced in between); at most `MAX_TABLE_BYTES + 1` bytes are read
/// whatever the file claims. `origin` names it in errors.
pub fn read_table_file(path: &Path, origin: &str) -> Result<String, TableError> {
    let read_error = |source| TableError::Read {
        origin: origin.to_string(),
        source,
    };
    let check = |meta: &std::fs::Metadata| {
        if !meta.is_file() {
            return Err(TableError::NotRegular {
                origin: origin.to_string(),
                kind: file_kind(meta.file_type()),
            });
        }
        if meta.len() > MAX_TABLE_BYTES {
            return Err(TableError::TooLarge {
                origin: origin.to_string(),
                size: meta.len(),
            });
        }
        Ok(())
    };
    check(&std::fs::metadata(path).map_err(read_error)?)?;
    let file = open_nonblocking(path).map_err(read_error)?;
    let meta = file.metadata().map_err(read_error)?;
    check(&meta)?;
    let mut bytes = Vec::with_capacity(meta.len() as usize + 1);
    file.take(MAX_TABLE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.len() as u64 > MAX_TABLE_BYTES {
        // It grew after the check.
        return Err(TableError::TooLarge {
            origin: origin.to_string(),
            size: bytes.len() as u64,
        });
    }
    String::from_utf8(bytes)
        .map_err(|_| read_error(std::io::Error::new(std::io::ErrorKind::InvalidData, "not valid UTF-8")))
}

impl Table {
    /// Parses and checks a table; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Table, TableError> {
        let table: Table = serde_json::from_str(text).map_err(|source| TableError::Parse {
            origin: origin.to_string(),
            source,
        })?;
        if table.format != TABLE_FORMAT {
            return Err(TableError::Format {
                origin: origin.to_string(),
                found: table.format,
            });
        }
        for (index, e) in table.entries.iter().enumerate() {
            let bad = |why: String| TableError::Entry {
                origin: origin.to_string(),
                index,
                why,
            };
            if e.variant != "gdn" && e.variant != "kda" {
                return Err(bad(format!("variant {:?} is neither \"gdn\" nor \"kda\"", e.variant)));
            }
            let staged_rows = matches!(e.kernel, Kernel::V | Kernel::VF | Kernel::VB)
                && e.choice.imp == Impl::Staged
                && e.choice.block_rows % 16 == 0;
            if !(Choice::all(e.kernel).contains(&e.choice) || staged_rows) {
                return Err(bad(format!("kernel {} has no implementation {}", e.kernel, e.choice)));
            }
            let windows = window_buckets(e.kernel);
            if !windows.contains(&e.t) {
                return Err(bad(format!(
                    "T = {} is not a window bucket of {} {windows:?}",
                    e.t, e.kernel
                )));
            }
            if !B_BUCKETS.contains(&e.b) {
                return Err(bad(format!("B = {} is not a batch bucket {B_BUCKETS:?}", e.b)));
            }
        }
        Ok(table)
    }

    /// The entry covering `key`, if any.
    pub fn lookup(&self, key: &Key) -> Option<Choice> {
        self.entry_of(key).map(|e| e.choice)
    }

    /// Sets the entry of `key`'s bucket (replacing one already there); a timed one is `measured`.
    pub fn insert(&mut self, key: &Key, choice: Choice, median_us: Option<f64>, default_us: Option<f64>) {
        let source = median_us.map(|_| EntrySource::Measured);
        self.insert_from(key, choice, median_us, default_us, source);
    }

    /// Sets the entry of `key`'s bucket to the model's choice, unless a measured entry is there.
    pub fn insert_modelled(&mut self, key: &Key, choice: Choice) {
        if self
            .entry_of(key)
            .is_some_and(|e| e.source == Some(EntrySource::Measured))
        {
            return;
        }
        self.insert_from(key, choice, None, None, Some(EntrySource::Model));
    }

    /// The entry of `key`'s bucket.
    pub fn entry_of(&self, key: &Key) -> Option<&Entry> {
        let variant = if key.kda { "kda" } else { "gdn" };
        let (t, b) = (
            bucket(key.window, window_buckets(key.kernel)),
            bucket(key.batch, &B_BUCKETS),
        );
        self.entries.iter().find(|e| {
            e.kernel == key.kernel && e.variant == variant && e.k == key.k && e.hv == key.hv && e.t == t && e.b == b
        })
    }

    fn insert_from(
        &mut self,
        key: &Key,
        choice: Choice,
        median_us: Option<f64>,
        default_us: Option<f64>,
        source: Option<EntrySource>,
    ) {
        let entry = Entry {
            kernel: key.kernel,
            variant: if key.kda { "kda" } else { "gdn" }.to_string(),
            k: key.k,
            hv: key.hv,
            t: bucket(key.window, window_buckets(key.kernel)),
            b: bucket(key.batch, &B_BUCKETS),
            choice,
            median_us,
            default_us,
            source,
        };
        match self.entries.iter_mut().find(|e| {
            (e.kernel, &e.variant, e.k, e.hv, e.t, e.b)
                == (entry.kernel, &entry.variant, entry.k, entry.hv, entry.t, entry.b)
        }) {
            Some(e) => *e = entry,
            None => self.entries.push(entry),
        }
    }
}

/// The process's table: `REPLAYSSM_TUNE_TABLE` if set, else the shipped one; `None` (after one
/// warning on stderr) when it cannot be used.
pub fn active_table() -> Option<&'static Table> {
    static TABLE: OnceLock<Option<Table>> = OnceLock::new();
    TABLE
        .get_or_init(|| {
            let loaded = match std::env::var_os(TABLE_ENV) {
                Some(path) => {
                    // Control and bidi characters of the path escaped: it goes to a terminal.
                    let origin = format!("{} (from {TABLE_ENV})", path.to_string_lossy().escape_debug());
                    read_table_file(Path::new(&path), &origin).and_then(|text| Table::parse(&text, &origin))
                }
                None => Table::parse(SHIPPED_TABLE, "bench/autotune/h200.json (shipped)"),
            };
            match loaded {
                Ok(t) => Some(t),
                Err(e) => {
                    // Not eprintln!: a closed or full stderr must not panic a kernel call.
                    let _ = writeln!(
                        std::io::stderr(),
                        "replayssm: warning: {e}; every kernel runs its default implementation"
                    );
                    None
                }
            }
        })
        .as_ref()
}

thread_local! {
    static FORCED: RefCell<Vec<(Kernel, Choice)>> = const { RefCell::new(Vec::new()) };
}

/// Pins `kernel`'s choice on this thread until the guard drops (tests, `bench --tune`). A pinned
/// choice that does not fit a call is refused by that call's checks, not replaced.
pub fn force(kernel: Kernel, choice: Choice) -> Forced {
    FORCED.with(|f| f.borrow_mut().push((kernel, choice)));
    Forced { _private: () }
}

/// Undoes one [`force`] when dropped.
pub struct Forced {
    _private: (),
}

impl Drop for Forced {
    fn drop(&mut self) {
        FORCED.with(|f| {
            f.borrow_mut().pop();
        });
    }
}

/// The choice [`force`] pinned for `kernel` on this thread, if any.
pub fn forced(kernel: Kernel) -> Option<Choice> {
    FORCED.with(|f| f.borrow().iter().rev().find(|(k, _)| *k == kernel).map(|(_, c)| *c))
}

/// Whether `choice` can run the call `key` describes (the launch layer's own limits).
pub fn fits(key: &Key, choice: Choice) -> bool {
    let kda = key.kda as i32;
    match (key.kernel, choice.imp) {
        (Kernel::VB, Impl::Default) => false,
        (_, Impl::Default) => choice.block_rows == 0,
        (Kernel::V | Kernel::VF | Kernel::VB, Impl::Staged) => {
            // (The size query takes only launchable shapes: a garbage V or window is the params
            // checks' to refuse, never arithmetic here.)
            let launchable = key.v <= crate::limits::MAX_V
                && key.k <= 256
                && key.window <= crate::limits::MAX_VERIFY_WINDOW
                && choice.block_rows % 16 == 0
                && choice.block_rows as usize <= crate::limits::MAX_V;
            let (t, k, rows, v) = (key.window as i32, key.k as i32, choice.block_rows as i32, key.v as i32);
            // SAFETY: pure size computations. VF's and VB's are taken at the largest ring (VF: two
            // windows of MAX_VERIFY_WINDOW records; VB: MAX_BUFFERED_CACHE_LEN positions), so a
            // fit holds for every ring of the call's shape.
            let smem = || unsafe {
                match key.kernel {
                    Kernel::VF => {
                        let ring = 2 * crate::limits::MAX_VERIFY_WINDOW as i32;
                        ffi::rssm_verify_fold_staged_smem_bytes(t, ring, k, kda, rows, v)
                    }
                    Kernel::VB => {
                        let ring = crate::limits::MAX_BUFFERED_CACHE_LEN as i32;
                        ffi::rssm_verify_buffered_smem_bytes(t, ring, k, kda, rows, v)
                    }
                    _ => ffi::rssm_verify_staged_smem_bytes(t, k, kda, rows, v),
                }
            };
            launchable && smem() <= ffi::RSSM_VERIFY_STAGED_MAX_SMEM as i64
        }
        (Kernel::F | Kernel::P, Impl::Prefetch) => {
            choice.block_rows == 0 && key.window <= crate::limits::MAX_VERIFY_WINDOW
        }
        (Kernel::D, Impl::Prefetch) => choice.block_rows == 0,
        _ => false,
    }
}

/// The choice for one call: a forced one, else the table's if it fits, else the default.
pub fn choose(key: &Key) -> Choice {
    if let Some(c) = forced(key.kernel) {
        return c;
    }
    active_table()
        .and_then(|t| t.lookup(key))
        .filter(|&c| fits(key, c))
        .unwrap_or(Choice::DEFAULT)
}

impl Key {
    /// The key of a launch: its params base's shape with `window` positions (V: its draft
    /// window; F, P: the ring window; D: the cache length).
    pub(crate) fn of_launch(kernel: Kernel, b: &ffi::rssm_base_params, window: i32) -> Key {
        Key {
            kernel,
            kda: b.variant == ffi::rssm_variant_RSSM_VARIANT_KDA as i32,
            k: b.K.max(0) as usize,
            v: b.V.max(0) as usize,
            hv: b.HV.max(0) as usize,
            window: window.max(0) as usize,
            batch: b.batch.max(0) as usize,
        }
    }
}

/// Sets the implementation fields of a launch's params base from [`choose`] (the Rust wrappers
/// and the C ABI both call it, right before the params checks).
pub(crate) fn apply(kernel: Kernel, b: &mut ffi::rssm_base_params, window: i32) {
    (b.impl_, b.block_rows) = ffi_choice(&Key::of_launch(kernel, b, window));
}

fn ffi_choice(key: &Key) -> (i32, i32) {
    let c = choose(key);
    (c.imp.to_ffi(), c.block_rows as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> Key {
        Key {
            kernel: Kernel::V,
            kda: false,
            k: 128,
            v: 128,
            hv: 32,
            window: 3,
            batch: 100,
        }
    }

    fn staged(block_rows: u32) -> Choice {
        Choice {
            imp: Impl::Staged,
            block_rows,
        }
    }

    /// A table without entries (the shipped one carries the model's).
    fn empty() -> Table {
        let mut t = Table::parse(SHIPPED_TABLE, "shipped").unwrap();
        t.entries.clear();
        t
    }

    #[test]
    fn the_shipped_table_parses_and_says_where_each_entry_comes_from() {
        let t = Table::parse(SHIPPED_TABLE, "shipped").unwrap();
        assert_eq!(t.format, TABLE_FORMAT);
        assert!(
            t.entries.iter().all(|e| e.source.is_some()),
            "an entry without its source"
        );
    }

    #[test]
    fn a_modelled_entry_never_replaces_a_measured_one() {
        let mut t = empty();
        let staged = staged(0);
        t.insert_modelled(&key(), staged);
        assert_eq!(t.entry_of(&key()).unwrap().source, Some(EntrySource::Model));
        t.insert(&key(), Choice::DEFAULT, Some(1.0), Some(1.0));
        assert_eq!(t.entry_of(&key()).unwrap().source, Some(EntrySource::Measured));
        t.insert_modelled(&key(), staged);
        assert_eq!(t.lookup(&key()), Some(Choice::DEFAULT));
        assert_eq!(t.entries.len(), 1);
    }

    #[test]
    fn lookup_uses_buckets_and_falls_back() {
        let mut t = empty();
        let staged = staged(32);
        t.insert(&key(), staged, Some(1.0), Some(2.0));
        assert_eq!(t.entries[t.entries.len() - 1].t, 4);
        assert_eq!(t.entries[t.entries.len() - 1].b, 128);
        assert_eq!(t.lookup(&key()), Some(staged));
        assert_eq!(t.lookup(&Key { batch: 129, ..key() }), None);
        assert_eq!(t.lookup(&Key { kda: true, ..key() }), None);
        let back = Table::parse(&serde_json::to_string(&t).unwrap(), "round trip").unwrap();
        assert_eq!(back, t);
    }

    #[test]
    fn corrupt_tables_are_refused_with_their_reason() {
        let e = Table::parse("{", "x.json").unwrap_err().to_string();
        assert!(e.contains("x.json") && e.contains("not valid JSON"), "{e}");
        let e = Table::parse(&SHIPPED_TABLE.replace(TABLE_FORMAT, "other/9"), "y")
            .unwrap_err()
            .to_string();
        assert!(e.contains("other/9"), "{e}");
        let bad = r#"{"format":"replayssm-tune/1","device":null,"source":"t","command":null,"date":null,
            "entries":[{"kernel":"F","variant":"gdn","K":128,"HV":32,"T":4,"B":64,"impl":"staged"}]}"#;
        let e = Table::parse(bad, "z").unwrap_err().to_string();
        assert!(e.contains("entry 0") && e.contains("no implementation"), "{e}");
        let bad = bad
            .replace(r#""impl":"staged""#, r#""impl":"prefetch""#)
            .replace(r#""T":4"#, r#""T":5"#);
        let e = Table::parse(&bad, "z").unwrap_err().to_string();
        assert!(e.contains("T = 5"), "{e}");
    }

    #[test]
    fn decode_is_bucketed_by_its_cache_length() {
        let mut t = empty();
        let d = Key {
            kernel: Kernel::D,
            window: 100,
            ..key()
        };
        let prefetch = Choice {
            imp: Impl::Prefetch,
            block_rows: 0,
        };
        t.insert(&d, prefetch, None, None);
        assert_eq!(t.entries[0].t, 128);
        assert_eq!(t.lookup(&Key { window: 128, ..d }), Some(prefetch));
        assert_eq!(t.lookup(&Key { window: 129, ..d }), None);
        let back = Table::parse(&serde_json::to_string(&t).unwrap(), "round trip").unwrap();
        assert_eq!(back, t);
    }

    #[test]
    fn garbage_shapes_never_reach_the_size_query() {
        let staged = staged(0);
        assert!(!fits(
            &Key {
                v: i32::MAX as usize,
                ..key()
            },
            staged
        ));
        assert!(!fits(
            &Key {
                window: 1 << 20,
                ..key()
            },
            staged
        ));
    }

    #[test]
    fn a_choice_that_does_not_fit_is_not_taken() {
        let staged_all = staged(0);
        assert!(fits(&key(), staged_all));
        // 16 positions over a whole head of 4096 rows: 512 KB of tiles.
        assert!(!fits(
            &Key {
                window: 16,
                v: 4096,
                ..key()
            },
            staged_all
        ));
        let prefetch = Choice {
            imp: Impl::Prefetch,
            block_rows: 0,
        };
        assert!(fits(
            &Key {
                kernel: Kernel::F,
                window: 16,
                ..key()
            },
            prefetch
        ));
        assert!(!fits(
            &Key {
                kernel: Kernel::F,
                window: 17,
                ..key()
            },
            prefetch
        ));
        assert!(!fits(&key(), prefetch));
    }

    fn temp(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("replayssm-tuning-unit-{}-{name}", std::process::id()))
    }

    #[test]
    fn a_table_file_must_be_a_small_regular_file() {
        // A good table reads and parses.
        let good = temp("good.json");
        std::fs::write(&good, SHIPPED_TABLE).unwrap();
        let text = read_table_file(&good, "good").unwrap();
        assert_eq!(Table::parse(&text, "good").unwrap().format, TABLE_FORMAT);
        // Exactly the cap is read; one byte more is refused by size, before reading.
        std::fs::write(&good, " ".repeat(MAX_TABLE_BYTES as usize)).unwrap();
        assert_eq!(read_table_file(&good, "cap").unwrap().len() as u64, MAX_TABLE_BYTES);
        std::fs::write(&good, " ".repeat(MAX_TABLE_BYTES as usize + 1)).unwrap();
        let e = read_table_file(&good, "over").unwrap_err().to_string();
        assert!(e.contains("over") && e.contains("larger than 1048576 bytes"), "{e}");
        // A 4 GiB sparse file: refused by its size, nothing read.
        std::fs::File::create(&good).unwrap().set_len(4 << 30).unwrap();
        let e = read_table_file(&good, "huge").unwrap_err().to_string();
        assert!(e.contains("4294967296 bytes"), "{e}");
        // Not UTF-8.
        std::fs::write(&good, [0xffu8, 0xfe, b'{']).unwrap();
        let e = read_table_file(&good, "bytes").unwrap_err().to_string();
        assert!(e.contains("not valid UTF-8"), "{e}");
        std::fs::remove_file(&good).ok();
        // A directory.
        let dir = temp("dir");
        std::fs::create_dir_all(&dir).unwrap();
        let e = read_table_file(&dir, "dir").unwrap_err().to_string();
        assert!(e.contains("not a regular file (a directory)"), "{e}");
        std::fs::remove_dir(&dir).ok();
        // A device that never ends.
        #[cfg(target_os = "linux")]
        {
            let e = read_table_file(Path::new("/dev/zero"), "zero").unwrap_err().to_string();
            assert!(e.contains("not a regular file (a character device)"), "{e}");
        }
        // Missing.
        let e = read_table_file(&temp("missing.json"), "missing")
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot read it"), "{e}");
    }

    #[test]
    fn force_pins_a_choice_on_this_thread_only() {
        // A shape the shipped table has no entry for (no model shape has 7 value heads).
        let unmodelled = || Key { hv: 7, ..key() };
        let staged = staged(16);
        assert_eq!(choose(&unmodelled()), Choice::DEFAULT);
        {
            let _g = force(Kernel::V, staged);
            assert_eq!(choose(&unmodelled()), staged);
            assert_eq!(
                choose(&Key {
                    kernel: Kernel::F,
                    ..unmodelled()
                }),
                Choice::DEFAULT
            );
            std::thread::spawn(move || assert_eq!(choose(&unmodelled()), Choice::DEFAULT))
                .join()
                .unwrap();
        }
        assert_eq!(choose(&unmodelled()), Choice::DEFAULT);
    }
}
