//! The launch plumbing every kernel wrapper shares: where a launch runs ([`Exec`]: backend,
//! stream, device error word), the pointers of its buffers (each checked to be memory that
//! backend computes on: no staging, no copy), its status and its error word.

use std::ffi::c_void;

use crate::backend::Backend;
use crate::error::{Error, Result, Status};
use crate::ffi;
use crate::memory::{ActLayout, ActLayoutMut, ActStorage, Location, SliceMutRef, SliceRef, Storage, Stream};

/// Where one launch runs: the backend, the stream it is enqueued on, the error word it reports
/// into.
pub(crate) struct Exec {
    pub backend: Backend,
    pub stream: *mut c_void,
    pub word: *mut u32,
}

impl Exec {
    /// A launch on host memory (the emulator; the Cuda backend refuses host memory tensor by
    /// tensor), its error word `word` read by the caller after the launch.
    pub fn host(backend: Backend, word: &mut u32) -> Exec {
        Exec {
            backend,
            stream: std::ptr::null_mut(),
            word,
        }
    }

    /// A launch on device memory, on the caller's stream, reporting into the stream's word.
    pub fn on(stream: &Stream) -> Exec {
        Exec {
            backend: stream.backend(),
            stream: stream.as_raw(),
            word: stream.error_word(),
        }
    }

    fn reach(&self, name: &'static str, loc: Location) -> Result<()> {
        loc.check_reachable(name, self.backend)
    }

    /// Element `offset` of a read-only view.
    pub fn view(&self, name: &'static str, v: &impl ActLayout) -> Result<*const u8> {
        self.reach(name, v.location())?;
        Ok(elem_ptr(v.base(), v.layout().0, v.dtype().size()))
    }

    /// Element `offset` of an output view.
    pub fn view_mut(&self, name: &'static str, v: &mut impl ActLayoutMut) -> Result<*mut u8> {
        self.reach(name, v.location())?;
        let (offset, size) = (v.layout().0, v.dtype().size());
        Ok(v.base_mut().wrapping_add(offset.wrapping_mul(size)))
    }

    pub fn slice<T>(&self, name: &'static str, s: &impl SliceRef<T>) -> Result<*const T> {
        self.reach(name, s.location())?;
        Ok(s.ptr())
    }

    pub fn slice_mut<T>(&self, name: &'static str, s: &mut impl SliceMutRef<T>) -> Result<*mut T> {
        self.reach(name, s.location())?;
        Ok(s.ptr_mut())
    }

    pub fn store<T: crate::dtype::Pod>(&self, name: &'static str, s: &impl Storage<T>) -> Result<*const T> {
        self.reach(name, s.location())?;
        Ok(s.ptr())
    }

    pub fn store_mut<T: crate::dtype::Pod>(&self, name: &'static str, s: &mut impl Storage<T>) -> Result<*mut T> {
        self.reach(name, s.location())?;
        Ok(s.ptr_mut())
    }

    pub fn act(&self, name: &'static str, a: &impl ActStorage) -> Result<*const c_void> {
        self.reach(name, a.location())?;
        Ok(a.ptr().cast())
    }

    pub fn act_mut(&self, name: &'static str, a: &mut impl ActStorage) -> Result<*mut c_void> {
        self.reach(name, a.location())?;
        Ok(a.ptr_mut().cast())
    }
}

/// Runs `launch` on host memory with a local error word and checks the word afterwards (the
/// emulator has finished when the launcher returns).
pub(crate) fn on_host(backend: Backend, kernel: &'static str, launch: impl FnOnce(&Exec) -> Result<()>) -> Result<()> {
    let mut word = 0u32;
    launch(&Exec::host(backend, &mut word))?;
    check_error_word(kernel, word)
}

/// Turns a launcher's status into a typed error with the backend's own message: the one status
/// mapping of the Rust wrappers and the C ABI (which reports it through `From<Error>`).
pub(crate) fn check_status(kernel: &'static str, backend: Backend, raw: ffi::rssm_status) -> Result<()> {
    Status::check(raw).map_err(|status| {
        let (message, cuda_error) = match (status, backend) {
            // SAFETY: NUL-terminated thread-local string owned by the emulator.
            (Status::Emulator, _) => (
                unsafe { std::ffi::CStr::from_ptr(ffi::rssm_emu_last_error()) }
                    .to_string_lossy()
                    .into_owned(),
                0,
            ),
            #[cfg(replayssm_cuda)]
            (Status::LaunchFailed, Backend::Cuda) => {
                // SAFETY: plain call into the CUDA runtime.
                let code = unsafe { ffi::rssm_cuda_last_error() };
                (
                    format!("CUDA error {code} ({})", crate::runtime::cuda::error_string(code)),
                    code,
                )
            }
            (Status::Unsupported, _) => ("configuration not compiled in".to_string(), 0),
            _ => (
                format!("rejected by rssm_{kernel}_can_implement (the host checks, run again by the kernel layer)"),
                0,
            ),
        };
        Error::Kernel {
            kernel,
            status,
            message,
            cuda_error,
        }
    })
}

/// Calls the launcher of the launch's backend, `$cuda` or `$emu`, with the params on its stream.
macro_rules! launch {
    ($exec:expr, $cuda:ident, $emu:ident, $params:expr) => {{
        let (p, e) = ($params, $exec);
        match e.backend {
            // SAFETY: every pointer in the params covers the extent the wrapper validated, in
            // memory the backend computes on (`Exec` checked each one's location).
            $crate::backend::Backend::Emulated => unsafe { $crate::ffi::$emu(p, e.stream) },
            #[cfg(replayssm_cuda)]
            // SAFETY: as above, in device memory, on the caller's stream.
            $crate::backend::Backend::Cuda => unsafe { $crate::ffi::$cuda(p, e.stream) },
            _ => $crate::ffi::rssm_status_RSSM_ERR_UNSUPPORTED,
        }
    }};
}
pub(crate) use launch;

/// Checks the device error word after a launch.
pub(crate) fn check_error_word(kernel: &'static str, word: u32) -> Result<()> {
    if word != 0 {
        return Err(Error::DeviceReported { kernel, bits: word });
    }
    Ok(())
}

/// Byte offset of element `offset` of a view: pointers into act buffers.
pub(crate) fn elem_ptr(base: *const u8, offset: usize, elem_size: usize) -> *const u8 {
    // Wrapping: an empty view's offset is not range-checked (nothing is read through it).
    base.wrapping_add(offset.wrapping_mul(elem_size))
}
