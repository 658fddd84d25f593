//! The CLI's output streams.
//!
//! stdout: every line the `replayssm` binary prints goes through [`outln!`] (or [`out!`]), which
//! returns a [`StdoutError`] where `println!` panics: when stdout is a closed pipe
//! (`replayssm floor | head -1`: EPIPE) or a full device (`> /dev/full`: ENOSPC). The
//! subcommands pass it up with `?` and `main` ends the run through [`finish`], which also makes
//! the final flush: one line on stderr (`replayssm: cannot write to stdout: Broken pipe (os
//! error 32); output truncated`) and exit code [`EXIT_STDOUT_FAILED`] (1), no panic.
//!
//! stderr: diagnostics go through [`errln!`], which drops a failed write (`eprintln!` panics
//! when stderr is full): a message that cannot be shown must not change what the run does or
//! its exit code.

use std::fmt;
use std::io::{self, Write};
use std::process::ExitCode;

/// The exit code of a run whose stdout could not be written (docs/input-contract.md §4).
pub const EXIT_STDOUT_FAILED: u8 = 1;

/// A write to stdout failed (a closed pipe, a full disk, ...): the output is incomplete.
#[derive(Debug)]
pub struct StdoutError(pub io::Error);

impl fmt::Display for StdoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot write to stdout: {}; output truncated", self.0)
    }
}

impl std::error::Error for StdoutError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

/// What writing to stdout returns.
pub type Result<T = ()> = std::result::Result<T, StdoutError>;

/// Writes `args` (and a newline) to stdout: [`outln!`] and [`out!`].
#[doc(hidden)]
pub fn write_stdout(args: fmt::Arguments<'_>, newline: bool) -> Result {
    let mut out = io::stdout().lock();
    out.write_fmt(args)
        .and_then(|()| if newline { out.write_all(b"\n") } else { Ok(()) })
        .map_err(StdoutError)
}

/// Writes `args` and a newline to stderr, dropping a failed write: [`errln!`].
#[doc(hidden)]
pub fn write_stderr(args: fmt::Arguments<'_>) {
    let mut err = io::stderr().lock();
    let _ = err.write_fmt(args).and_then(|()| err.write_all(b"\n"));
}

/// Flushes stdout (what [`finish`] does last).
pub fn flush() -> Result {
    io::stdout().lock().flush().map_err(StdoutError)
}

/// Ends a run: flushes stdout and returns the run's exit code, or, when a write to stdout
/// failed, says so in one line on stderr and returns [`EXIT_STDOUT_FAILED`].
pub fn finish(run: Result<ExitCode>) -> ExitCode {
    match run.and_then(|code| flush().map(|()| code)) {
        Ok(code) => code,
        Err(e) => {
            write_stderr(format_args!("replayssm: {e}"));
            ExitCode::from(EXIT_STDOUT_FAILED)
        }
    }
}

/// `println!` that returns [`output::Result`](Result) instead of panicking.
#[macro_export]
macro_rules! outln {
    () => {
        $crate::output::write_stdout(format_args!(""), true)
    };
    ($($arg:tt)*) => {
        $crate::output::write_stdout(format_args!($($arg)*), true)
    };
}

/// `print!` that returns [`output::Result`](Result) instead of panicking.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::write_stdout(format_args!($($arg)*), false)
    };
}

/// `eprintln!` that drops a failed write instead of panicking.
#[macro_export]
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::output::write_stderr(format_args!($($arg)*))
    };
}
