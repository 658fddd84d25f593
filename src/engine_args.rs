//! The engine flags as SGLang spells them (`--enable-linear-replayssm-spec`, ...), parsed into
//! [`EngineFlags`]: the one parser behind `replayssm validate`, the C ABI's
//! `replayssm_validate_config` and Python's `validate_config`, so an engine can hand over its own
//! server arguments unchanged. Every other flag is refused by name.

use std::str::FromStr;

use crate::config::{EngineFlags, KernelFamily};

/// Every flag the parser takes: (name, takes a value).
pub const ENGINE_FLAGS: [(&str, bool); 15] = [
    ("--enable-linear-replayssm", false),
    ("--enable-linear-replayssm-spec", false),
    ("--linear-replayssm-spec-deferred-fold", false),
    ("--linear-replayssm-spec-buffered", false),
    ("--linear-replayssm-cache-len", true),
    ("--disaggregation-mode", true),
    ("--mamba-radix-cache-strategy", true),
    ("--speculative-algorithm", true),
    ("--speculative-eagle-topk", true),
    ("--speculative-num-draft-tokens", true),
    ("--linear-attn-decode-backend", true),
    ("--linear-attn-verify-backend", true),
    ("--mamba-ssm-dtype", true),
    ("--ragged-verify-mode", true),
    ("--linear-attn-kind", true),
];

fn value<T: FromStr>(flag: &str, v: &str) -> Result<T, String>
where
    T::Err: std::fmt::Display,
{
    v.parse::<T>()
        .map_err(|e| format!("invalid value '{v}' for '{flag} <VALUE>': {e}"))
}

/// A leading '-' not followed by a digit (`-3` is a value, `--x` and `-x` are flags).
fn looks_like_flag(s: &str) -> bool {
    s.strip_prefix('-')
        .is_some_and(|rest| !rest.starts_with(|c: char| c.is_ascii_digit()))
}

/// Parses flags (without a program name), e.g. `["--enable-linear-replayssm-spec"]`; both
/// `--flag value` and `--flag=value`. Unset flags keep SGLang's defaults.
pub fn parse_engine_args<S: AsRef<str>>(args: &[S]) -> Result<EngineFlags, String> {
    let mut f = EngineFlags::default();
    let mut seen: Vec<&str> = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let arg = args[i].as_ref();
        i += 1;
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v)),
            _ => (arg, None),
        };
        let Some(&(flag, takes_value)) = ENGINE_FLAGS.iter().find(|(n, _)| *n == name) else {
            return Err(format!(
                "unexpected argument '{arg}' (the ReplaySSM engine flags are: {})",
                ENGINE_FLAGS.map(|(n, _)| n).join(", ")
            ));
        };
        if seen.contains(&flag) {
            return Err(format!("the argument '{flag}' cannot be used multiple times"));
        }
        seen.push(flag);
        if !takes_value {
            if let Some(v) = inline {
                return Err(format!("unexpected value '{v}' for '{flag}': it takes none"));
            }
            match flag {
                "--enable-linear-replayssm" => f.enable_linear_replayssm = true,
                "--linear-replayssm-spec-deferred-fold" => f.linear_replayssm_spec_deferred_fold = true,
                "--linear-replayssm-spec-buffered" => f.linear_replayssm_spec_buffered = true,
                _ => f.enable_linear_replayssm_spec = true,
            }
            continue;
        }
        // As clap: the next token is this flag's value unless it looks like a flag itself (a
        // leading '-' not followed by a digit: negative numbers are values).
        let next = args.get(i).map(|a| a.as_ref());
        let v = match (inline, next) {
            (Some(v), _) => v,
            (None, Some(n)) if !looks_like_flag(n) => {
                i += 1;
                n
            }
            _ => {
                return Err(format!(
                    "a value is required for '{flag} <VALUE>' but none was supplied"
                ))
            }
        };
        match flag {
            "--linear-replayssm-cache-len" => f.linear_replayssm_cache_len = Some(value(flag, v)?),
            "--disaggregation-mode" => f.disaggregation_mode = value(flag, v)?,
            "--mamba-radix-cache-strategy" => f.mamba_radix_cache_strategy = value(flag, v)?,
            "--speculative-algorithm" => f.speculative_algorithm = Some(value(flag, v)?),
            "--speculative-eagle-topk" => f.speculative_eagle_topk = Some(value(flag, v)?),
            "--speculative-num-draft-tokens" => f.speculative_num_draft_tokens = Some(value(flag, v)?),
            "--linear-attn-decode-backend" => f.linear_attn_decode_backend = KernelFamily::parse(v),
            "--linear-attn-verify-backend" => f.linear_attn_verify_backend = Some(KernelFamily::parse(v)),
            "--mamba-ssm-dtype" => f.mamba_ssm_dtype = Some(value(flag, v)?),
            "--ragged-verify-mode" => f.ragged_verify_mode = value(flag, v)?,
            _ => f.linear_attn_kind = value(flag, v)?,
        }
    }
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::parse_engine_args;

    #[test]
    fn values_flags_and_refusals_as_clap_parsed_them() {
        let f = parse_engine_args(&["--linear-replayssm-cache-len=-3", "--speculative-eagle-topk", "-2"]).unwrap();
        assert_eq!(
            (f.linear_replayssm_cache_len, f.speculative_eagle_topk),
            (Some(-3), Some(-2))
        );
        let e = parse_engine_args(&["--linear-attn-decode-backend", "--enable-linear-replayssm-spec"]).unwrap_err();
        assert!(
            e.contains("a value is required for '--linear-attn-decode-backend"),
            "{e}"
        );
        let e = parse_engine_args(&["--linear-attn-kind", "-x"]).unwrap_err();
        assert!(e.contains("a value is required"), "{e}");
        let e = parse_engine_args(&["--speculative-eagle-topk"]).unwrap_err();
        assert!(e.contains("a value is required"), "{e}");
        let e = parse_engine_args(&["--enable-linear-replayssm", "--enable-linear-replayssm"]).unwrap_err();
        assert!(e.contains("cannot be used multiple times"), "{e}");
        let e = parse_engine_args(&["--enable-linear-replayssm=1"]).unwrap_err();
        assert!(e.contains("takes none"), "{e}");
        let e = parse_engine_args(&["--speculative-algorithm", "MEDUSA"]).unwrap_err();
        assert!(e.contains("invalid value 'MEDUSA'"), "{e}");
        assert!(parse_engine_args(&["--bogus"])
            .unwrap_err()
            .contains("unexpected argument '--bogus'"));
    }
}
