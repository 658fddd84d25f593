//! The ranges of the CLI's numeric flags, and [`Ranged`], the clap parser that refuses a value
//! outside one: `--bandwidth 1e-320 is outside 0.01..=100 TB/s` (exit 2), naming the flag, the
//! value as given (escaped) and the range. Each flag's help states its range; the ranges are
//! listed in docs/input-contract.md §4.

use std::ffi::OsStr;
use std::fmt::Display;
use std::str::FromStr;

use clap::builder::TypedValueParser;
use clap::error::ErrorKind;

use crate::case::escape_untrusted;

/// A clap value parser for numbers in `lo..=hi` (both ends included).
#[derive(Clone, Copy, Debug)]
pub struct Ranged<T> {
    pub lo: T,
    pub hi: T,
    /// What a value is: "a whole number" or "a number".
    noun: &'static str,
    /// After the range in a message (" TB/s"), or "".
    unit: &'static str,
}

impl<T> Ranged<T> {
    /// Whole numbers in `lo..=hi`.
    pub const fn int(lo: T, hi: T) -> Self {
        Ranged {
            lo,
            hi,
            noun: "a whole number",
            unit: "",
        }
    }

    /// Finite numbers in `lo..=hi` (NaN and the infinities are outside every range).
    pub const fn float(lo: T, hi: T, unit: &'static str) -> Self {
        Ranged {
            lo,
            hi,
            noun: "a number",
            unit,
        }
    }
}

impl<T: Display> Ranged<T> {
    /// `lo..=hi` and the unit, as the help and the messages write it.
    pub fn text(&self) -> String {
        format!("{}..={}{}", self.lo, self.hi, self.unit)
    }
}

/// Longest part of a refused value a message repeats.
const MAX_SHOWN_CHARS: usize = 40;

impl<T> TypedValueParser for Ranged<T>
where
    T: Copy + PartialOrd + FromStr + Display + Send + Sync + 'static,
{
    type Value = T;

    fn parse_ref(&self, cmd: &clap::Command, arg: Option<&clap::Arg>, value: &OsStr) -> Result<T, clap::Error> {
        let text = value.to_string_lossy();
        let why = match text.parse::<T>() {
            Ok(v) if self.lo <= v && v <= self.hi => return Ok(v),
            // NaN compares with nothing, itself included.
            Ok(v) if v.partial_cmp(&v).is_some() => "is outside",
            _ => match self.noun {
                "a number" => "is not a number in",
                _ => "is not a whole number in",
            },
        };
        let flag = arg
            .and_then(clap::Arg::get_long)
            .map_or_else(|| "a value".to_string(), |l| format!("--{l}"));
        let mut shown: String = text.chars().take(MAX_SHOWN_CHARS).collect();
        if text.chars().nth(MAX_SHOWN_CHARS).is_some() {
            shown.push_str("...");
        }
        let message = format!("{flag} {} {why} {}", escape_untrusted(&shown), self.text());
        // Formatted like clap's own errors: the usage and where to find more after the message.
        Err(clap::Error::raw(ErrorKind::ValueValidation, message).format(&mut cmd.clone()))
    }
}

/// Any seed (`--seed`).
pub const SEED: Ranged<u64> = Ranged::int(0, u64::MAX);
/// `floor --bandwidth`, TB/s: from a slow link to well past any device's copy bandwidth.
pub const BANDWIDTH_TBS: Ranged<f64> = Ranged::float(0.01, 100.0, " TB/s");
/// `demo --steps`: the decode mode's f64 reference keeps a state per token (4 requests x steps).
pub const DEMO_STEPS: Ranged<usize> = Ranged::int(1, 1000);
/// `--cache-len` (demo, make-case): the buffered-decode ring's limit.
pub const CACHE_LEN: Ranged<usize> = Ranged::int(1, replayssm::MAX_CACHE_LEN);
/// `bench --batches`: the launch limit on B.
pub const BATCH: Ranged<usize> = Ranged::int(1, replayssm::limits::MAX_BATCH);
/// `bench --windows`, `--plot-window`: the verify kernel's longest window (D needs L >= 2).
pub const WINDOW: Ranged<usize> = Ranged::int(2, replayssm::MAX_VERIFY_WINDOW);
/// `bench --samples`.
pub const SAMPLES: Ranged<usize> = Ranged::int(1, 10_000);
/// `bench --warmup-ms`.
pub const WARMUP_MS: Ranged<f64> = Ranged::float(0.0, 10_000.0, "");
/// `bench --l2-multiple`.
pub const L2_MULTIPLE: Ranged<f64> = Ranged::float(0.0, 64.0, "");
/// `make-case --steps` (verify_fold_steps).
pub const CASE_STEPS: Ranged<usize> = Ranged::int(1, crate::case::MAX_CASE_STEPS);
/// Each of `make-case --dims` H, HV, K, V (their relations are checked after).
pub const HEAD_DIM: Ranged<usize> = Ranged::int(1, 1 << 16);
/// Most tokens, all requests together, `make-case` writes.
pub const MAX_CASE_TOKENS: usize = 1 << 20;
/// Each of `make-case --seqlens`.
pub const SEQLEN: Ranged<usize> = Ranged::int(0, MAX_CASE_TOKENS);
/// Each of `make-case --accept`: at most a verify window (and at most its request's tokens).
pub const ACCEPT: Ranged<i32> = Ranged::int(0, replayssm::MAX_VERIFY_WINDOW as i32);
/// Each of `make-case --accept-node`: a tree node, or -1 for none.
pub const ACCEPT_NODE: Ranged<i32> = Ranged::int(-1, replayssm::MAX_TREE_NODES as i32 - 1);
/// `make-case --atol`, `--rtol`: over 1 a tolerance passes outputs off by their own size.
pub const TOLERANCE: Ranged<f64> = Ranged::float(0.0, 1.0, "");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts() {
        assert_eq!(BANDWIDTH_TBS.text(), "0.01..=100 TB/s");
        assert_eq!(SEED.text(), "0..=18446744073709551615");
        assert_eq!(CACHE_LEN.text(), "1..=65536");
        assert_eq!(BATCH.text(), "1..=65535");
        assert_eq!(WINDOW.text(), "2..=16");
        assert_eq!(CASE_STEPS.text(), "1..=64");
        assert_eq!(ACCEPT.text(), "0..=16");
        assert_eq!(ACCEPT_NODE.text(), "-1..=15");
        assert_eq!(TOLERANCE.text(), "0..=1");
    }
}
