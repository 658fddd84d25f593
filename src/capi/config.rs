//! Configuration validation through the C ABI: the engine's own server flags in, the capability
//! gates of design §5 applied, the resolved configuration (or the refusal) out as text.

use std::ffi::{c_char, CStr};

use super::{guard, replayssm_status, Failure};
use crate::config::resolve;
use crate::engine_args::parse_engine_args;

/// Copies `text` into `out` (capacity `len`, always NUL-terminated, truncated if needed).
unsafe fn write_out(out: *mut c_char, len: usize, text: &str) {
    if out.is_null() || len == 0 {
        return;
    }
    let n = text.len().min(len - 1);
    std::ptr::copy_nonoverlapping(text.as_ptr() as *const c_char, out, n);
    *out.add(n) = 0;
}

/// Checks engine flags, spelled as SGLang spells them (`argv` = {"--enable-linear-replayssm-spec",
/// "--speculative-algorithm", "EAGLE", ...}, no program name), against the capability gates.
/// `REPLAYSSM_OK`: `out` receives the resolved configuration (mode, draft shape, the kernels that
/// will run, warnings as lines starting with "warning: "). `REPLAYSSM_ERR_CONFIG_REFUSED`: the
/// rule that refused it, the value and the fix, in `out` and as the last error message.
/// `REPLAYSSM_ERR_INVALID_ARGUMENT`: a flag is unknown or its value does not parse.
/// `out` may be NULL; otherwise it holds `out_len` bytes and is always NUL-terminated.
///
/// # Safety
/// `argv` holds `argc` NUL-terminated strings (or is NULL with `argc` = 0); `out` is NULL or
/// writable for `out_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn replayssm_validate_config(
    argc: i32,
    argv: *const *const c_char,
    out: *mut c_char,
    out_len: usize,
) -> replayssm_status {
    let mut text = String::new();
    let status = guard("replayssm_validate_config", || {
        if argc < 0 || (argc > 0 && argv.is_null()) {
            return Err(Failure::invalid(format!("argc = {argc} with argv {argv:p}")));
        }
        let mut args = Vec::with_capacity(argc as usize);
        for i in 0..argc as usize {
            let a = *argv.add(i);
            if a.is_null() {
                return Err(Failure::invalid(format!("argv[{i}] is NULL")));
            }
            let s = CStr::from_ptr(a)
                .to_str()
                .map_err(|_| Failure::invalid(format!("argv[{i}] is not UTF-8")))?;
            args.push(s.to_string());
        }
        let parsed = parse_engine_args(&args).map_err(|e| {
            text = e.clone();
            Failure::invalid(e)
        })?;
        match resolve(&parsed) {
            Ok(cfg) => {
                text = cfg.to_string();
                if !text.ends_with('\n') {
                    text.push('\n');
                }
                for w in &cfg.warnings {
                    text.push_str(&format!("warning: {w}\n"));
                }
                Ok(())
            }
            Err(e) => {
                text = e.to_string();
                Err(Failure::new(
                    replayssm_status::REPLAYSSM_ERR_CONFIG_REFUSED,
                    e.to_string(),
                ))
            }
        }
    });
    if text.is_empty() && status != replayssm_status::REPLAYSSM_OK {
        text = CStr::from_ptr(super::replayssm_last_error_message())
            .to_string_lossy()
            .into_owned();
    }
    write_out(out, out_len, &text);
    status
}
