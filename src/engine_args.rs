//! The engine flags as SGLang spells them (`--enable-linear-replayssm-spec`, ...), parsed into
//! [`EngineFlags`]: the one parser behind `replayssm validate`, the C ABI's
//! `replayssm_validate_config` and Python's `validate_config`, so an engine can hand over its own
//! server arguments unchanged. Every other flag is refused by name.

use std::str::FromStr;

use crate::config::{EngineFlags, KernelFamily};

/// Every flag the parser takes: (name, takes a value).
pub const ENGINE_FLAGS: [(&str, bool); 13] = [
    ("--enable-linear-replayssm", false),
    ("--enable-linear-replayssm-spec", false),
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
                _ => f.enable_linear_replayssm_spec = true,
            }
            continue;
        }
        let v = match inline {
            Some(v) => v,
            None if i < args.len() => {
                i += 1;
                args[i - 1].as_ref()
            }
            None => {
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
