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
    /// A params field out of range (the C ABI's and the launch's checks, `checks::params`): the
    /// message names the field, its value and the limit.
    #[error("{0}")]
    BadParam(String),
    /// A params field asks for a configuration the kernels are not compiled for.
    #[error("{0}")]
    UnsupportedParam(String),
    /// An index array breaks a kernel rule (`checks::indices`): the message names the element, its
    /// value and the limit.
    #[error("{0}")]
    BadIndex(String),
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
        /// The `cudaError_t` of a failed CUDA launch (0 otherwise).
        cuda_error: i32,
    },
    #[error("CUDA error {code} in {call}: {message}")]
    Cuda {
        call: &'static str,
        code: i32,
        message: String,
    },
    #[error("kernel {kernel} skipped rows it could not trust (device error word {bits:#x}: {})", device_error_names(*bits))]
    DeviceReported { kernel: &'static str, bits: u32 },
    /// A capability gate of design §5 refused the configuration.
    #[error(transparent)]
    Gate(#[from] crate::config::GateError),
    #[error("slot {slot} has {pending} pending buffered-decode records: materialise it before copying from it (a copy-on-write source must be fully flushed)")]
    PendingRing { slot: usize, pending: usize },
    #[error("slot {slot} has {pending} accepted records not yet folded into its checkpoint (deferred fold): {action} needs it flushed first (DeferredRing::flush, or Stream::defer_flush on device memory)")]
    PendingFold {
        slot: usize,
        pending: usize,
        action: &'static str,
    },
    #[error("slot {slot} has {pending} accepted records in its buffered history, not yet in its checkpoint: {action} needs it flushed first (Stream::buffered_fold with BufferedFold::Flush)")]
    PendingHistory {
        slot: usize,
        pending: usize,
        action: &'static str,
    },
    #[error("{what} belongs to another pool: attach the ring to the pool it is used with")]
    ForeignPool { what: &'static str },
    #[error("the decode step was taken before the ring's cursors last changed ({why}): begin a new step")]
    StaleStep { why: &'static str },
    /// A buffer sized from the inputs could not be allocated (reported, not aborted on).
    #[error("cannot allocate {bytes} bytes for {buffer}")]
    Alloc { buffer: &'static str, bytes: u64 },
    /// A buffer is not where the launch computes (host memory on Cuda, another backend's memory).
    #[error("{tensor}: {why}")]
    Memory { tensor: &'static str, why: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The bits of the device error word (`RSSM_DEVERR_*`), with what each means for the launch.
pub const DEVICE_ERROR_BITS: [(u32, &str, &str); 7] = [
    (ffi::RSSM_DEVERR_SLOT_OUT_OF_RANGE, "SLOT_OUT_OF_RANGE", "a slot outside -1..num_slots (row skipped)"),
    (ffi::RSSM_DEVERR_BAD_SEQLENS, "BAD_SEQLENS", "cu_seqlens not increasing or beyond num_tokens / max_seqlen (request skipped), or not from 0 to num_tokens (request skipped, its and the uncovered tokens zeroed)"),
    (ffi::RSSM_DEVERR_BAD_LENGTH, "BAD_LENGTH", "an accept length, replay count, cursor or position out of range (row skipped)"),
    (ffi::RSSM_DEVERR_TRACK_SLOT, "TRACK_SLOT", "a track slot out of range, or (VF) with records pending (track skipped)"),
    (ffi::RSSM_DEVERR_BAD_TREE, "BAD_TREE", "a bad tree parent or accepted path (request skipped)"),
    (ffi::RSSM_DEVERR_DUPLICATE_SLOT, "DUPLICATE_SLOT", "a live slot repeated in one launch, or a track slot equal to a live or another track slot (those rows or tracks skipped)"),
    (ffi::RSSM_DEVERR_TRACK_STEP, "TRACK_STEP", "a track step outside the steps its row commits (no snapshot stored)"),
];

/// The names and meanings of the set bits of a device error word, `; `-separated (unknown bits
/// are named by value).
pub fn device_error_names(bits: u32) -> String {
    let mut parts: Vec<String> = DEVICE_ERROR_BITS
        .iter()
        .filter(|(bit, ..)| bits & bit != 0)
        .map(|(_, name, meaning)| format!("{name}: {meaning}"))
        .collect();
    let known = DEVICE_ERROR_BITS.iter().fold(0, |acc, (bit, ..)| acc | bit);
    if bits & !known != 0 {
        parts.push(format!("unknown bits {:#x}", bits & !known));
    }
    parts.join("; ")
}
