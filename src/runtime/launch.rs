//! Where a launch's buffers live: host memory for the emulator (pointers are the slices
//! themselves), device memory for CUDA (inputs uploaded, outputs uploaded too so untouched
//! elements keep their values, then copied back after the launch). Every wrapper builds its
//! params once through [`Memory`] and runs on either backend.

use crate::backend::Backend;
use crate::dtype::Pod;
#[cfg(replayssm_cuda)]
use crate::dtype::{bytes_of, bytes_of_mut};
use crate::error::{Error, Result, Status};
use crate::ffi;

pub(crate) enum Memory {
    Host,
    #[cfg(replayssm_cuda)]
    Device {
        buffers: Vec<crate::runtime::cuda::DeviceBuffer>,
        /// (index into buffers, host destination, bytes) of every output.
        outputs: Vec<(usize, *mut u8, usize)>,
    },
}

impl Memory {
    /// Memory for a kernel backend (not `Reference`).
    pub fn for_backend(backend: Backend) -> Result<Memory> {
        match backend {
            Backend::Emulated => Ok(Memory::Host),
            Backend::Cuda => {
                crate::runtime::cuda::device().map_err(|reason| Error::BackendUnavailable {
                    backend: Backend::Cuda,
                    reason,
                })?;
                #[cfg(replayssm_cuda)]
                return Ok(Memory::Device {
                    buffers: vec![],
                    outputs: vec![],
                });
                #[cfg(not(replayssm_cuda))]
                unreachable!("device() fails without the CUDA backend")
            }
            Backend::Reference => unreachable!("the reference backend launches no kernel"),
        }
    }

    /// A pointer to `s` (read only) where the kernel can read it.
    pub fn input<T: Pod>(&mut self, s: &[T]) -> Result<*const T> {
        match self {
            Memory::Host => Ok(s.as_ptr()),
            #[cfg(replayssm_cuda)]
            Memory::Device { buffers, .. } => {
                let b = crate::runtime::cuda::DeviceBuffer::from_bytes(bytes_of(s))?;
                let p = b.ptr() as *const T;
                buffers.push(b);
                Ok(p)
            }
        }
    }

    /// A pointer to `s` where the kernel can write it; `s` holds the result after `finish`.
    /// `s` must stay alive and unaliased until then (the wrappers hold the borrow throughout).
    pub fn output<T: Pod>(&mut self, s: &mut [T]) -> Result<*mut T> {
        match self {
            Memory::Host => Ok(s.as_mut_ptr()),
            #[cfg(replayssm_cuda)]
            Memory::Device { buffers, outputs } => {
                let bytes = bytes_of_mut(s);
                let b = crate::runtime::cuda::DeviceBuffer::from_bytes(bytes)?;
                let p = b.ptr() as *mut T;
                outputs.push((buffers.len(), bytes.as_mut_ptr(), bytes.len()));
                buffers.push(b);
                Ok(p)
            }
        }
    }

    /// Waits for the launch and copies every output back.
    pub fn finish(self) -> Result<()> {
        match self {
            Memory::Host => Ok(()),
            #[cfg(replayssm_cuda)]
            Memory::Device { buffers, outputs } => {
                crate::runtime::cuda::synchronize()?;
                for (i, host, len) in outputs {
                    // SAFETY: `host` came from a live `&mut [T]` of `len` bytes (see `output`).
                    let dst = unsafe { std::slice::from_raw_parts_mut(host, len) };
                    buffers[i].copy_to(dst)?;
                }
                Ok(())
            }
        }
    }
}

/// Turns a launcher's status into a typed error with the backend's own message.
pub(crate) fn check_status(kernel: &'static str, backend: Backend, raw: ffi::rssm_status) -> Result<()> {
    Status::check(raw).map_err(|status| {
        let message = match backend {
            // SAFETY: NUL-terminated thread-local string owned by the emulator.
            Backend::Emulated => unsafe { std::ffi::CStr::from_ptr(ffi::rssm_emu_last_error()) }
                .to_string_lossy()
                .into_owned(),
            #[cfg(replayssm_cuda)]
            // SAFETY: plain call into the CUDA runtime.
            Backend::Cuda => crate::runtime::cuda::error_string(unsafe { ffi::rssm_cuda_last_error() }),
            _ => String::new(),
        };
        Error::Kernel {
            kernel,
            status,
            message: if message.is_empty() {
                format!("rejected by rssm_{kernel}_can_implement")
            } else {
                message
            },
        }
    })
}

/// Calls the launcher of `backend`: `$cuda` or `$emu`, with the params and a null stream.
macro_rules! launch {
    ($backend:expr, $cuda:ident, $emu:ident, $params:expr) => {{
        let p = $params;
        match $backend {
            // SAFETY: every pointer in the params covers the extent the wrapper validated.
            $crate::backend::Backend::Emulated => unsafe { $crate::ffi::$emu(p, std::ptr::null_mut()) },
            #[cfg(replayssm_cuda)]
            // SAFETY: as above, in device memory; null stream = the legacy default stream.
            $crate::backend::Backend::Cuda => unsafe { $crate::ffi::$cuda(p, std::ptr::null_mut()) },
            _ => unreachable!("no kernel launcher for this backend"),
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
    base.wrapping_add(offset * elem_size)
}
