//! The kernel layer's `can_implement` (CUTLASS's name): the C++ launchers (`csrc/kernels/*.cu`,
//! through `csrc/include/replayssm/can_implement.h`) call these before every launch, so the last
//! line in front of a kernel runs the very rules of [`super::params`] that the C ABI, the Rust
//! wrappers and Python report with messages: one definition of each host rule. They see only the
//! struct (no index array is read: the kernels check device-side indices themselves) and return a
//! status; `vector_aligned` is the CUDA launchers' need for 16-byte aligned bases.

use super::params::{self, Reach};
use crate::error::{Error, Result};
use crate::ffi;

/// The status of a check (a panic, which no check should raise, refuses rather than unwinding
/// into C++).
fn status(check: impl FnOnce() -> Result<()> + std::panic::UnwindSafe) -> ffi::rssm_status {
    match std::panic::catch_unwind(check) {
        Ok(Ok(())) => ffi::rssm_status_RSSM_OK,
        Ok(Err(Error::UnsupportedParam(_))) => ffi::rssm_status_RSSM_ERR_UNSUPPORTED,
        _ => ffi::rssm_status_RSSM_ERR_INVALID_ARGUMENT,
    }
}

macro_rules! can_implement {
    ($($(#[$doc:meta])* $name:ident($params:ident) => $check:path;)*) => {$(
        $(#[$doc])*
        ///
        /// # Safety
        /// `p` is NULL or points to a readable params struct; no pointer inside it is read.
        #[no_mangle]
        pub unsafe extern "C" fn $name(p: *const ffi::$params, vector_aligned: i32) -> ffi::rssm_status {
            let reach = Reach {
                vector_aligned: vector_aligned != 0,
                host_indices: false,
            };
            // SAFETY: the caller's contract above.
            match unsafe { p.as_ref() } {
                Some(p) => status(|| $check(p, reach)),
                None => ffi::rssm_status_RSSM_ERR_INVALID_ARGUMENT,
            }
        }
    )*};
}

can_implement! {
    /// Kernel R's params.
    rssm_recurrent_can_implement(rssm_recurrent_params) => params::recurrent;
    /// Kernel V's (and VT's) params.
    rssm_verify_can_implement(rssm_verify_params) => params::verify;
    /// Kernel F's (and FT's) params.
    rssm_fold_can_implement(rssm_fold_params) => params::fold;
    /// Kernel P's params.
    rssm_replay_can_implement(rssm_replay_params) => params::replay;
    /// Kernel D's params.
    rssm_decode_can_implement(rssm_decode_params) => params::decode;
    /// The materialise entry's params (D's struct; no token fields).
    rssm_materialize_can_implement(rssm_decode_params) => params::materialize;
    /// The cursor kernel's params.
    rssm_cursors_can_implement(rssm_cursor_params) => params::cursors;
    /// Kernel VF's params.
    rssm_verify_fold_can_implement(rssm_verify_fold_params) => params::verify_fold;
    /// The defer kernel's params.
    rssm_defer_can_implement(rssm_defer_params) => params::defer;
    /// Kernel VB's params.
    rssm_verify_buffered_can_implement(rssm_verify_buffered_params) => params::verify_buffered;
    /// The buffered spec cursors' params.
    rssm_buffered_can_implement(rssm_buffered_params) => params::buffered;
}
