//! The crate's error type: every input problem is caught before a launch and named here.

use crate::backend::Backend;
use crate::dtype::DType;
use crate::ffi;

/// Status returned by a C launcher.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    InvalidArgument,
    Unsupported,
    LaunchFailed,
    Emulator,
    Unknown(u32),
}

impl Status {
    /// `Ok(())` for `RSSM_OK`, the status otherwise.
    pub(crate) fn check(raw: ffi::rssm_status) -> Result<(), Status> {
        #[allow(non_upper_case_globals)]
        match raw {
            ffi::rssm_status_RSSM_OK => Ok(()),
            ffi::rssm_status_RSSM_ERR_INVALID_ARGUMENT => Err(Status::InvalidArgument),
            ffi::rssm_status_RSSM_ERR_UNSUPPORTED => Err(Status::Unsupported),
            ffi::rssm_status_RSSM_ERR_LAUNCH => Err(Status::LaunchFailed),
            ffi::rssm_status_RSSM_ERR_EMULATOR => Err(Status::Emulator),
            other => Err(Status::Unknown(other)),
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Status::InvalidArgument => f.write_str("RSSM_ERR_INVALID_ARGUMENT"),
            Status::Unsupported => f.write_str("RSSM_ERR_UNSUPPORTED"),
            Status::LaunchFailed => f.write_str("RSSM_ERR_LAUNCH"),
            Status::Emulator => f.write_str("RSSM_ERR_EMULATOR"),
            Status::Unknown(v) => write!(f, "unknown status {v}"),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{tensor}: expected {expected}, got {got}")]
    Shape {
        tensor: &'static str,
        expected: String,
        got: String,
    },
    #[error("{tensor}: dtype {got} does not match {expected}, the dtype of q")]
    DType {
        tensor: &'static str,
        expected: DType,
        got: DType,
    },
    #[error("{tensor}: token stride {stride} is smaller than its row of {row} elements")]
    StrideTooSmall {
        tensor: &'static str,
        stride: usize,
        row: usize,
    },
    #[error("{tensor}: the view reaches element {needed} but the buffer holds {len}")]
    OutOfBounds {
        tensor: &'static str,
        needed: usize,
        len: usize,
    },
    #[error("slots[{index}] = {slot} is out of range: expected -1 (null) or 0..{num_slots}")]
    SlotOutOfRange { index: usize, slot: i32, num_slots: usize },
    #[error("slots[{first}] and slots[{second}] are both {slot}: live slots in one launch must be distinct")]
    DuplicateSlot { first: usize, second: usize, slot: i32 },
    #[error("cu_seqlens: {0}")]
    SeqLens(String),
    #[error("head dims: {0}")]
    Dims(String),
    #[error("invalid {what}: {why}")]
    InvalidValue { what: &'static str, why: String },
    #[error("{what} is not supported by the {backend} backend: {why}")]
    Unsupported {
        backend: Backend,
        what: String,
        why: String,
    },
    #[error("the {backend} backend is not available: {reason}")]
    BackendUnavailable { backend: Backend, reason: String },
    #[error("kernel {kernel} returned {status}: {message}")]
    Kernel {
        kernel: &'static str,
        status: Status,
        message: String,
    },
    #[error("CUDA error {code} in {call}: {message}")]
    Cuda {
        call: &'static str,
        code: i32,
        message: String,
    },
    #[error("kernel {kernel} skipped rows it could not trust (device error word {bits:#x})")]
    DeviceReported { kernel: &'static str, bits: u32 },
    /// A capability gate of SPEC §5 refused the configuration.
    #[error(transparent)]
    Gate(#[from] crate::config::GateError),
    #[error("slot {slot} has {pending} pending buffered-decode records: materialise it before copying from it (a copy-on-write source must be fully flushed)")]
    PendingRing { slot: usize, pending: usize },
    #[error("{what} belongs to another pool: attach the ring to the pool it is used with")]
    ForeignPool { what: &'static str },
    #[error("the decode step was taken before the ring's cursors last changed ({why}): begin a new step")]
    StaleStep { why: &'static str },
    /// A buffer sized from the inputs could not be allocated (reported, not aborted on).
    #[error("cannot allocate {bytes} bytes for {buffer}")]
    Alloc { buffer: &'static str, bytes: u64 },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
