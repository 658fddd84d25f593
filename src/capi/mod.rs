//! The C ABI for engines (`include/replayssm.h`, generated from this module by cbindgen and
//! checked in). Every export:
//! - takes a pointer to its params struct (first field `struct_size`), the backend and the
//!   caller's stream last; never allocates device memory, never synchronises;
//! - validates what the host can see (null pointers, sizes, enums, strides, alignment) and
//!   returns a [`replayssm_status`]; the message of the last failure on the calling thread is
//!   `replayssm_last_error_message()`, the CUDA error code `replayssm_last_cuda_error()`;
//! - catches panics (`REPLAYSSM_ERR_INTERNAL`): nothing unwinds into the caller.
//!
//! Backends: `REPLAYSSM_BACKEND_CUDA` (device pointers, the caller's stream and current device)
//! or `REPLAYSSM_BACKEND_EMULATED` (host pointers, runs the same kernel source on the CPU
//! synchronously; the stream is ignored). Device-side values (slots, cu_seqlens, accept lengths,
//! cursors) are not read by the host: kernels check them and OR `RSSM_DEVERR_*` bits into
//! `error_word` (see the kernel layer), so every entry is safe to capture in a CUDA graph.
#![allow(non_camel_case_types)]

mod config;
mod kernels;
pub mod params;

use std::cell::RefCell;
use std::ffi::{c_char, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

pub use config::replayssm_validate_config;
pub use kernels::{
    replayssm_buffered, replayssm_decode, replayssm_decode_cursors, replayssm_decode_materialize, replayssm_defer,
    replayssm_fold, replayssm_recurrent, replayssm_replay, replayssm_verify, replayssm_verify_buffered,
    replayssm_verify_fold,
};
pub use params::*;

use crate::backend::Backend;

/// Version of the C ABI: bumped when a struct or a signature changes incompatibly (3: every
/// kernel's params composed of one params base, the token part and the spec ring).
pub const REPLAYSSM_ABI_VERSION: u32 = 3;

/// What every entry returns.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum replayssm_status {
    REPLAYSSM_OK = 0,
    /// A field is inconsistent: NULL pointer, size or stride out of range, unknown enum value.
    REPLAYSSM_ERR_INVALID_ARGUMENT = 1,
    /// Well formed but not compiled in (head dim K outside {32, 64, 96, 128, 256}).
    REPLAYSSM_ERR_UNSUPPORTED = 2,
    /// The CUDA runtime refused the launch: see `replayssm_last_cuda_error()`.
    REPLAYSSM_ERR_CUDA = 3,
    /// The SIMT emulator refused the launch or caught a kernel bug.
    REPLAYSSM_ERR_EMULATOR = 4,
    /// `struct_size` is not a size this library knows for that struct.
    REPLAYSSM_ERR_STRUCT_SIZE = 5,
    /// The backend asked for is not available here (no CUDA build, no driver, no device).
    REPLAYSSM_ERR_BACKEND_UNAVAILABLE = 6,
    /// A capability gate (design §5) refused the engine configuration.
    REPLAYSSM_ERR_CONFIG_REFUSED = 7,
    /// A bug in this library (a caught panic); the message says where.
    REPLAYSSM_ERR_INTERNAL = 8,
    /// `replayssm_check_error_word` found device error bits: kernels skipped rows whose
    /// device-side indices they could not trust; the message names the bits.
    REPLAYSSM_ERR_DEVICE_REPORTED = 9,
}

/// Where a kernel entry runs.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum replayssm_backend {
    /// Device pointers, launched on the caller's stream (current device of the calling thread).
    REPLAYSSM_BACKEND_CUDA = 0,
    /// Host pointers, the kernel source run on the CPU by the SIMT emulator, synchronously.
    REPLAYSSM_BACKEND_EMULATED = 1,
}

/// Element type of the activations (q, k, v, a, b, o, and the spec ring's v and k) of a call.
/// Gates (A_log, dt_bias, g, beta), states, snapshots and the decode ring's g are always f32; the
/// decode ring's d and k are f32 or the activations' dtype (`ring_dtype`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum replayssm_dtype {
    REPLAYSSM_DTYPE_F32 = 0,
    REPLAYSSM_DTYPE_F16 = 1,
    REPLAYSSM_DTYPE_BF16 = 2,
}

/// The linear-attention layer kind.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum replayssm_variant {
    /// Gated DeltaNet: one scalar decay per (token, value head).
    REPLAYSSM_VARIANT_GDN = 0,
    /// Kimi Delta Attention: per-channel decay, gates are `[.., HV, K]`.
    REPLAYSSM_VARIANT_KDA = 1,
}

/// Most draft tokens of one request in a verify (chain window or tree nodes, root included).
pub const REPLAYSSM_MAX_VERIFY_WINDOW: i32 = 16;
/// Device error word bit: a slot outside -1..num_slots-1 (the row was skipped).
pub const REPLAYSSM_DEVERR_SLOT_OUT_OF_RANGE: u32 = 0x1;
/// Device error word bit: cu_seqlens not increasing, beyond num_tokens / max_seqlen, or not
/// from 0 to num_tokens (the request skipped; in the last case the first or last request's
/// tokens and the uncovered ones get zero outputs).
pub const REPLAYSSM_DEVERR_BAD_SEQLENS: u32 = 0x2;
/// Device error word bit: an accept length, replay count, cursor or position out of range.
pub const REPLAYSSM_DEVERR_BAD_LENGTH: u32 = 0x4;
/// Device error word bit: a track slot out of range, or (VF) with records pending (the track was
/// skipped).
pub const REPLAYSSM_DEVERR_TRACK_SLOT: u32 = 0x8;
/// Device error word bit: a bad tree parent or accepted path (the request was skipped).
pub const REPLAYSSM_DEVERR_BAD_TREE: u32 = 0x10;
/// Device error word bit: a live slot repeated in one launch (every row on it was skipped), or a
/// track slot equal to a live slot or to another row's track slot (those tracks were skipped).
pub const REPLAYSSM_DEVERR_DUPLICATE_SLOT: u32 = 0x20;
/// Device error word bit: a track slot on a row whose track step lies outside the steps it
/// commits (a null row commits none): no snapshot was stored there.
pub const REPLAYSSM_DEVERR_TRACK_STEP: u32 = 0x40;
/// Largest value head dim V a call accepts (a bound on the launch grid).
pub const REPLAYSSM_MAX_V: i32 = 65536;
/// Longest buffered-decode ring (`cache_len`: pending records per slot and layer).
pub const REPLAYSSM_MAX_CACHE_LEN: i32 = 65536;
/// Longest spec ring of the buffered speculative verify (`cache_len`, the ring's `window` in
/// `replayssm_verify_buffered`): VB stages a slot's history in shared memory.
pub const REPLAYSSM_MAX_BUFFERED_CACHE_LEN: i32 = 64;
/// Key head dims K the kernels are compiled for, in units of 32: bit i set means K = 32 (i + 1)
/// is compiled (32, 64, 96, 128, 256). It replaces `REPLAYSSM_HEAD_DIMS_MASK` (powers of two),
/// which could not name K = 96.
pub const REPLAYSSM_HEAD_DIMS_MASK32: u32 = 0x8F;

const _: () = {
    assert!(REPLAYSSM_MAX_VERIFY_WINDOW as u32 == crate::ffi::RSSM_MAX_VERIFY_WINDOW);
    assert!(REPLAYSSM_DEVERR_SLOT_OUT_OF_RANGE == crate::ffi::RSSM_DEVERR_SLOT_OUT_OF_RANGE);
    assert!(REPLAYSSM_DEVERR_BAD_SEQLENS == crate::ffi::RSSM_DEVERR_BAD_SEQLENS);
    assert!(REPLAYSSM_DEVERR_BAD_LENGTH == crate::ffi::RSSM_DEVERR_BAD_LENGTH);
    assert!(REPLAYSSM_DEVERR_TRACK_SLOT == crate::ffi::RSSM_DEVERR_TRACK_SLOT);
    assert!(REPLAYSSM_DEVERR_BAD_TREE == crate::ffi::RSSM_DEVERR_BAD_TREE);
    assert!(REPLAYSSM_DEVERR_DUPLICATE_SLOT == crate::ffi::RSSM_DEVERR_DUPLICATE_SLOT);
    assert!(REPLAYSSM_DEVERR_TRACK_STEP == crate::ffi::RSSM_DEVERR_TRACK_STEP);
    assert!(REPLAYSSM_MAX_V as u32 == crate::ffi::RSSM_MAX_V);
    assert!(REPLAYSSM_MAX_CACHE_LEN as u32 == crate::ffi::RSSM_MAX_CACHE_LEN);
    assert!(REPLAYSSM_HEAD_DIMS_MASK32 == crate::ffi::RSSM_HEAD_DIMS_MASK32);
    assert!(REPLAYSSM_MAX_BUFFERED_CACHE_LEN as u32 == crate::ffi::RSSM_MAX_BUFFERED_CACHE_LEN);
    // The public enums pass through as int32 into the kernel layer's params: same values.
    use crate::ffi as k;
    assert!(replayssm_dtype::REPLAYSSM_DTYPE_F32 as u32 == k::rssm_dtype_RSSM_DTYPE_F32);
    assert!(replayssm_dtype::REPLAYSSM_DTYPE_F16 as u32 == k::rssm_dtype_RSSM_DTYPE_F16);
    assert!(replayssm_dtype::REPLAYSSM_DTYPE_BF16 as u32 == k::rssm_dtype_RSSM_DTYPE_BF16);
    assert!(replayssm_variant::REPLAYSSM_VARIANT_GDN as u32 == k::rssm_variant_RSSM_VARIANT_GDN);
    assert!(replayssm_variant::REPLAYSSM_VARIANT_KDA as u32 == k::rssm_variant_RSSM_VARIANT_KDA);
    assert!(replayssm_cursor_op::REPLAYSSM_CURSOR_SNAPSHOT as u32 == k::rssm_cursor_op_RSSM_CURSOR_SNAPSHOT);
    assert!(replayssm_cursor_op::REPLAYSSM_CURSOR_ADVANCE as u32 == k::rssm_cursor_op_RSSM_CURSOR_ADVANCE);
    assert!(replayssm_cursor_op::REPLAYSSM_CURSOR_RESET as u32 == k::rssm_cursor_op_RSSM_CURSOR_RESET);
    assert!(replayssm_defer_op::REPLAYSSM_DEFER_COMMIT as u32 == k::rssm_defer_op_RSSM_DEFER_COMMIT);
    assert!(replayssm_defer_op::REPLAYSSM_DEFER_GATHER as u32 == k::rssm_defer_op_RSSM_DEFER_GATHER);
    assert!(replayssm_defer_op::REPLAYSSM_DEFER_RESET as u32 == k::rssm_defer_op_RSSM_DEFER_RESET);
    assert!(replayssm_buffered_op::REPLAYSSM_BUFFERED_COMMIT as u32 == k::rssm_buffered_op_RSSM_BUFFERED_COMMIT);
    assert!(replayssm_buffered_op::REPLAYSSM_BUFFERED_FLUSH as u32 == k::rssm_buffered_op_RSSM_BUFFERED_FLUSH);
    assert!(replayssm_buffered_op::REPLAYSSM_BUFFERED_RESET as u32 == k::rssm_buffered_op_RSSM_BUFFERED_RESET);
};

/// A refused call: its status, its message and, for CUDA failures, the cudaError_t.
pub(crate) struct Failure {
    pub status: replayssm_status,
    pub message: String,
    pub cuda_error: i32,
}

/// Every check the library runs (`crate::checks`) refuses with a typed error; the C ABI reports it
/// with the matching status and the same message.
impl From<crate::Error> for Failure {
    fn from(e: crate::Error) -> Failure {
        use crate::error::Status;
        let (status, cuda_error) = match e {
            crate::Error::UnsupportedParam(_)
            | crate::Error::Unsupported { .. }
            | crate::Error::Kernel {
                status: Status::Unsupported,
                ..
            } => (replayssm_status::REPLAYSSM_ERR_UNSUPPORTED, 0),
            crate::Error::Kernel {
                status: Status::Emulator,
                ..
            } => (replayssm_status::REPLAYSSM_ERR_EMULATOR, 0),
            crate::Error::Kernel {
                status: Status::LaunchFailed | Status::Unknown(_),
                cuda_error,
                ..
            } => (replayssm_status::REPLAYSSM_ERR_CUDA, cuda_error),
            _ => (replayssm_status::REPLAYSSM_ERR_INVALID_ARGUMENT, 0),
        };
        Failure {
            status,
            message: e.to_string(),
            cuda_error,
        }
    }
}

impl Failure {
    pub fn new(status: replayssm_status, message: impl Into<String>) -> Failure {
        Failure {
            status,
            message: message.into(),
            cuda_error: 0,
        }
    }
    pub fn invalid(message: impl Into<String>) -> Failure {
        Failure::new(replayssm_status::REPLAYSSM_ERR_INVALID_ARGUMENT, message)
    }
}

thread_local! {
    static LAST_ERROR: RefCell<(CString, i32)> = RefCell::new((CString::default(), 0));
}

fn set_last_error(message: &str, cuda_error: i32) {
    let c = CString::new(message.replace('\0', " ")).unwrap_or_default();
    // A thread being torn down has no last error to keep.
    let _ = LAST_ERROR.try_with(|e| *e.borrow_mut() = (c, cuda_error));
}

/// Runs an entry: clears the thread's last error, catches panics, records the failure.
pub(crate) fn guard(entry: &str, f: impl FnOnce() -> Result<(), Failure>) -> replayssm_status {
    set_last_error("", 0);
    let outcome = catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        Err(Failure::new(
            replayssm_status::REPLAYSSM_ERR_INTERNAL,
            format!("internal error (a bug in replayssm, please report it): {what}"),
        ))
    });
    match outcome {
        Ok(()) => replayssm_status::REPLAYSSM_OK,
        Err(fail) => {
            set_last_error(&format!("{entry}: {}", fail.message), fail.cuda_error);
            fail.status
        }
    }
}

/// Reads a params struct whose first field is `struct_size`: checks the pointer and the size
/// before reading the rest (a smaller struct must not be over-read).
///
/// # Safety
/// `p` is NULL or points to at least 4 readable bytes, and to `size_of::<T>()` of them when its
/// first u32 equals that size.
pub(crate) unsafe fn read_params<T: Copy>(p: *const T, name: &str) -> Result<T, Failure> {
    if p.is_null() {
        return Err(Failure::invalid("params is NULL"));
    }
    let size = std::ptr::read_unaligned(p as *const u32);
    let want = std::mem::size_of::<T>();
    if size as usize != want {
        return Err(Failure::new(
            replayssm_status::REPLAYSSM_ERR_STRUCT_SIZE,
            format!(
                "{name}.struct_size is {size}, but this library (ABI {REPLAYSSM_ABI_VERSION}) expects {want}: \
                 set struct_size = sizeof({name}) and rebuild against this version's replayssm.h"
            ),
        ));
    }
    Ok(std::ptr::read_unaligned(p))
}

/// The backend of an entry, available here.
pub(crate) fn backend_of(raw: i32) -> Result<Backend, Failure> {
    let backend = match raw {
        0 => Backend::Cuda,
        1 => Backend::Emulated,
        _ => {
            return Err(Failure::invalid(format!(
                "backend {raw} is not a replayssm_backend (0 = CUDA, 1 = EMULATED)"
            )))
        }
    };
    backend.availability().map_err(|why| {
        Failure::new(
            replayssm_status::REPLAYSSM_ERR_BACKEND_UNAVAILABLE,
            format!("the {backend} backend is not available: {why}"),
        )
    })?;
    Ok(backend)
}

/// Runs an accessor that cannot fail on valid input, with `fallback` if it panics anyway
/// (nothing unwinds into the caller from any export).
fn never_unwind<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(fallback)
}

/// The library version as `major * 10000 + minor * 100 + patch`.
#[no_mangle]
pub extern "C" fn replayssm_version() -> u32 {
    never_unwind(0, || {
        let part = |s: &str| s.parse::<u32>().unwrap_or(0);
        part(env!("CARGO_PKG_VERSION_MAJOR")) * 10000
            + part(env!("CARGO_PKG_VERSION_MINOR")) * 100
            + part(env!("CARGO_PKG_VERSION_PATCH"))
    })
}

/// The C ABI version this library implements (`REPLAYSSM_ABI_VERSION` of its header).
#[no_mangle]
pub extern "C" fn replayssm_abi_version() -> u32 {
    REPLAYSSM_ABI_VERSION
}

/// A static, NUL-terminated name and meaning of a status value (any int32_t is accepted).
#[no_mangle]
pub extern "C" fn replayssm_status_string(status: i32) -> *const c_char {
    let s: &'static [u8] = match status {
        0 => b"REPLAYSSM_OK: success\0",
        1 => b"REPLAYSSM_ERR_INVALID_ARGUMENT: a field is NULL, out of range or inconsistent\0",
        2 => b"REPLAYSSM_ERR_UNSUPPORTED: valid, but not compiled in (head dim)\0",
        3 => b"REPLAYSSM_ERR_CUDA: the CUDA runtime refused the launch\0",
        4 => b"REPLAYSSM_ERR_EMULATOR: the SIMT emulator refused the launch\0",
        5 => b"REPLAYSSM_ERR_STRUCT_SIZE: struct_size does not match this library's struct\0",
        6 => b"REPLAYSSM_ERR_BACKEND_UNAVAILABLE: the backend cannot run here\0",
        7 => b"REPLAYSSM_ERR_CONFIG_REFUSED: a capability gate refused the configuration\0",
        8 => b"REPLAYSSM_ERR_INTERNAL: a bug in replayssm (a caught panic)\0",
        9 => b"REPLAYSSM_ERR_DEVICE_REPORTED: kernels skipped rows with untrustworthy device-side indices\0",
        _ => b"unknown replayssm_status\0",
    };
    s.as_ptr() as *const c_char
}

/// The names and meanings of the bits set in a device error word (`REPLAYSSM_DEVERR_*`),
/// `; `-separated, unknown bits by value: the one table Rust, C and Python print. Writes at most
/// `len` bytes into `buf`, NUL-terminated (truncated to fit), and returns the length of the whole
/// text without its NUL, so `buf = NULL, len = 0` asks for the size.
///
/// # Safety
/// `buf` is NULL (with `len` 0) or points to `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn replayssm_device_error_string(bits: u32, buf: *mut c_char, len: usize) -> usize {
    never_unwind(0, || {
        let text = crate::error::device_error_names(bits);
        if !buf.is_null() && len > 0 {
            let n = text.len().min(len - 1);
            std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), n);
            *buf.add(n) = 0;
        }
        text.len()
    })
}

/// The message of the last entry called on this thread ("" if it succeeded), NUL-terminated;
/// valid until the next replayssm call on this thread.
#[no_mangle]
pub extern "C" fn replayssm_last_error_message() -> *const c_char {
    // During thread teardown the thread-local may be gone: answer "" rather than unwind.
    never_unwind(c"".as_ptr(), || {
        LAST_ERROR.try_with(|e| e.borrow().0.as_ptr()).unwrap_or(c"".as_ptr())
    })
}

/// The cudaError_t of the last entry called on this thread (0 if it did not fail in CUDA).
#[no_mangle]
pub extern "C" fn replayssm_last_cuda_error() -> i32 {
    never_unwind(0, || LAST_ERROR.try_with(|e| e.borrow().1).unwrap_or(0))
}

/// `REPLAYSSM_OK` if `backend` (a `replayssm_backend`) can run here; otherwise
/// `REPLAYSSM_ERR_BACKEND_UNAVAILABLE` (or `INVALID_ARGUMENT`) with the reason as the last error
/// message (e.g. "cudaGetDeviceCount returned 35 ...: no NVIDIA driver").
#[no_mangle]
pub extern "C" fn replayssm_backend_available(backend: i32) -> replayssm_status {
    guard("replayssm_backend_available", || backend_of(backend).map(|_| ()))
}

/// Reads the device error word `word` (a `uint32_t`: device memory for CUDA, host memory for
/// EMULATED), and if any bit is set resets it to 0 and returns `REPLAYSSM_ERR_DEVICE_REPORTED`
/// with the bits named in the last error message; `REPLAYSSM_OK` when it is 0. For CUDA this
/// waits for `stream` (and the reset for the device): call it after a step or a graph replay,
/// outside stream capture. Every kernel entry ORs its `REPLAYSSM_DEVERR_*` bits into the word it
/// is given; without a word the device cannot report, so engines should always pass one.
///
/// # Safety
/// `word` is NULL or points to a `uint32_t` in the backend's memory; `stream` is NULL or a
/// live CUDA stream of the current device.
#[no_mangle]
pub unsafe extern "C" fn replayssm_check_error_word(
    backend: i32,
    word: *mut u32,
    stream: *mut std::ffi::c_void,
) -> replayssm_status {
    guard("replayssm_check_error_word", || {
        let backend = backend_of(backend)?;
        if word.is_null() {
            return Err(Failure::invalid("word is NULL"));
        }
        let bits = read_and_reset_word(backend, word, stream)?;
        if bits == 0 {
            return Ok(());
        }
        Err(Failure::new(
            replayssm_status::REPLAYSSM_ERR_DEVICE_REPORTED,
            format!(
                "device error word {bits:#x}: {}",
                crate::error::device_error_names(bits)
            ),
        ))
    })
}

/// The word's value, and 0 written in its place.
///
/// # Safety
/// As `replayssm_check_error_word`, `word` non-NULL.
unsafe fn read_and_reset_word(backend: Backend, word: *mut u32, stream: *mut std::ffi::c_void) -> Result<u32, Failure> {
    match backend {
        Backend::Cuda => cuda_read_and_reset(word, stream),
        _ => {
            let bits = std::ptr::read_unaligned(word);
            std::ptr::write_unaligned(word, 0);
            let _ = stream;
            Ok(bits)
        }
    }
}

#[cfg(replayssm_cuda)]
unsafe fn cuda_read_and_reset(word: *mut u32, stream: *mut std::ffi::c_void) -> Result<u32, Failure> {
    use crate::ffi;
    let fail = |call: &str, code: i32| Failure {
        status: replayssm_status::REPLAYSSM_ERR_CUDA,
        message: format!(
            "{call} failed: error {code} ({})",
            crate::runtime::cuda::error_string(code)
        ),
        cuda_error: code,
    };
    let code = ffi::rssm_cuda_stream_synchronize(stream);
    if code != 0 {
        return Err(fail("cudaStreamSynchronize", code));
    }
    let mut bits = 0u32;
    crate::memory::count_device_to_host();
    let code = ffi::rssm_cuda_memcpy_dtoh((&mut bits as *mut u32).cast(), word as *const _, 4);
    if code != 0 {
        return Err(fail("cudaMemcpy (device to host)", code));
    }
    if bits != 0 {
        // The reset must land before the caller's next launch on any stream: wait for it.
        let code = ffi::rssm_cuda_memset(word.cast(), 0, 4);
        if code != 0 {
            return Err(fail("cudaMemset", code));
        }
        let code = ffi::rssm_cuda_synchronize();
        if code != 0 {
            return Err(fail("cudaDeviceSynchronize", code));
        }
    }
    Ok(bits)
}

#[cfg(not(replayssm_cuda))]
unsafe fn cuda_read_and_reset(_word: *mut u32, _stream: *mut std::ffi::c_void) -> Result<u32, Failure> {
    unreachable!("backend_of refuses CUDA in a build without it")
}

/// `sizeof` of the named params struct in this library (e.g. "replayssm_fold_params"), or 0 for
/// an unknown name: bindings that mirror the structs (ctypes) check their layout against it.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn replayssm_struct_size(name: *const c_char) -> usize {
    use std::mem::size_of;
    if name.is_null() {
        return 0;
    }
    let name = never_unwind(&[][..], || std::ffi::CStr::from_ptr(name).to_bytes());
    match name {
        b"replayssm_recurrent_params" => size_of::<replayssm_recurrent_params>(),
        b"replayssm_verify_params" => size_of::<replayssm_verify_params>(),
        b"replayssm_fold_params" => size_of::<replayssm_fold_params>(),
        b"replayssm_replay_params" => size_of::<replayssm_replay_params>(),
        b"replayssm_decode_params" => size_of::<replayssm_decode_params>(),
        b"replayssm_cursor_params" => size_of::<replayssm_cursor_params>(),
        b"replayssm_verify_fold_params" => size_of::<replayssm_verify_fold_params>(),
        b"replayssm_defer_params" => size_of::<replayssm_defer_params>(),
        b"replayssm_verify_buffered_params" => size_of::<replayssm_verify_buffered_params>(),
        b"replayssm_buffered_params" => size_of::<replayssm_buffered_params>(),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last() -> String {
        // SAFETY: NUL-terminated thread-local string.
        unsafe { std::ffi::CStr::from_ptr(replayssm_last_error_message()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn a_panic_inside_an_entry_becomes_an_internal_error_status() {
        let st = guard("replayssm_test", || panic!("boom at the test"));
        assert_eq!(st, replayssm_status::REPLAYSSM_ERR_INTERNAL);
        assert!(last().contains("boom at the test") && last().starts_with("replayssm_test: internal error"));
        let st = guard("replayssm_test", || Ok(()));
        assert_eq!(st, replayssm_status::REPLAYSSM_OK);
        assert_eq!(last(), "");
    }
}
