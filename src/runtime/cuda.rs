//! Minimal CUDA runtime access through the crate's own C wrappers (csrc/kernels/cuda_runtime.cu):
//! device discovery and RAII device buffers for the Cuda backend. No bindings crate needed.

use std::sync::OnceLock;

use crate::backend::Backend;

#[cfg(replayssm_cuda)]
use crate::error::{Error, Result};

/// Where each backend can run: here, the one that needs a device asks for it.
impl Backend {
    /// `Ok` if this backend can run here, else why not.
    pub fn availability(self) -> Result<(), String> {
        match self {
            Backend::Reference | Backend::Emulated => Ok(()),
            Backend::Cuda => device().map(|_| ()),
        }
    }

    /// Cuda when a device is usable, else Emulated.
    pub fn best() -> Backend {
        if Backend::Cuda.availability().is_ok() {
            Backend::Cuda
        } else {
            Backend::Emulated
        }
    }
}

/// The device the Cuda backend runs on.
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    pub name: String,
    pub compute_capability: (i32, i32),
    pub runtime_version: i32,
    pub driver_version: i32,
    pub count: i32,
}

/// The first CUDA device, or why none is usable (CUDA not compiled in, no driver, no device).
pub fn device() -> Result<&'static DeviceInfo, String> {
    static DEVICE: OnceLock<Result<DeviceInfo, String>> = OnceLock::new();
    DEVICE.get_or_init(probe).as_ref().map_err(Clone::clone)
}

#[cfg(not(replayssm_cuda))]
fn probe() -> Result<DeviceInfo, String> {
    Err("the CUDA backend is not compiled in (nvcc was not found when the crate was built)".into())
}

#[cfg(replayssm_cuda)]
fn probe() -> Result<DeviceInfo, String> {
    use crate::ffi;
    let mut count = 0i32;
    // SAFETY: plain out-parameter calls into the CUDA runtime.
    let code = unsafe { ffi::rssm_cuda_device_count(&mut count) };
    if code != 0 {
        return Err(format!(
            "cudaGetDeviceCount returned {code} ({}){}",
            error_string(code),
            if code == 35 {
                ": no NVIDIA driver on this machine"
            } else {
                ""
            }
        ));
    }
    if count == 0 {
        return Err("the CUDA driver reports no device".into());
    }
    let (mut rt, mut drv) = (0, 0);
    // SAFETY: out-parameters only.
    unsafe { ffi::rssm_cuda_versions(&mut rt, &mut drv) };
    let mut name = [0 as std::os::raw::c_char; 256];
    let (mut major, mut minor) = (0, 0);
    // SAFETY: the buffer length is passed; the callee NUL-terminates within it.
    let code = unsafe { ffi::rssm_cuda_device_name(0, name.as_mut_ptr(), 256, &mut major, &mut minor) };
    if code != 0 {
        return Err(format!(
            "cudaGetDeviceProperties returned {code} ({})",
            error_string(code)
        ));
    }
    // SAFETY: NUL-terminated by rssm_cuda_device_name.
    let name = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    Ok(DeviceInfo {
        name,
        compute_capability: (major, minor),
        runtime_version: rt,
        driver_version: drv,
        count,
    })
}

#[cfg(replayssm_cuda)]
pub fn error_string(code: i32) -> String {
    // SAFETY: cudaGetErrorString returns a static NUL-terminated string for any code.
    unsafe { std::ffi::CStr::from_ptr(crate::ffi::rssm_cuda_error_string(code)) }
        .to_string_lossy()
        .into_owned()
}

#[cfg(replayssm_cuda)]
pub fn check(call: &'static str, code: i32) -> Result<()> {
    if code == 0 {
        Ok(())
    } else {
        Err(Error::Cuda {
            call,
            code,
            message: error_string(code),
        })
    }
}

/// A device allocation of `bytes` bytes, freed on drop: the storage of
/// [`crate::memory::DeviceVec`] (which counts its allocations and transfers) and of the bench's
/// buffers.
#[cfg(replayssm_cuda)]
pub struct DeviceBuffer {
    ptr: *mut std::ffi::c_void,
    bytes: usize,
}

// SAFETY: a device address is valid from any host thread; the buffer owns it alone.
#[cfg(replayssm_cuda)]
unsafe impl Send for DeviceBuffer {}
// SAFETY: `&DeviceBuffer` only exposes the address and blocking copies out of it.
#[cfg(replayssm_cuda)]
unsafe impl Sync for DeviceBuffer {}

#[cfg(replayssm_cuda)]
impl DeviceBuffer {
    pub fn new(bytes: usize) -> Result<Self> {
        let mut ptr = std::ptr::null_mut();
        // SAFETY: out-parameter; a zero-byte request still yields a valid (null or unique) pointer.
        check("cudaMalloc", unsafe {
            crate::ffi::rssm_cuda_malloc(&mut ptr, bytes.max(1) as u64)
        })?;
        Ok(Self { ptr, bytes })
    }

    /// Copies `src` into the start of the buffer on `stream` and waits for it (ordered after the
    /// stream's work, whether or not the stream blocks on the legacy default stream).
    pub(crate) fn copy_from_on(&mut self, src: &[u8], stream: *mut std::ffi::c_void) -> Result<()> {
        assert!(src.len() <= self.bytes);
        copy_htod_on(self.ptr, src, stream)
    }

    /// Copies the start of the buffer into `dst` on `stream` and waits for it.
    pub(crate) fn copy_to_on(&self, dst: &mut [u8], stream: *mut std::ffi::c_void) -> Result<()> {
        assert!(dst.len() <= self.bytes);
        copy_dtoh_on(dst, self.ptr, stream)
    }

    /// A blocking copy of the start of the buffer into `dst`.
    pub fn copy_to(&self, dst: &mut [u8]) -> Result<()> {
        assert!(dst.len() <= self.bytes);
        // SAFETY: dst holds dst.len() <= self.bytes bytes.
        check("cudaMemcpy", unsafe {
            crate::ffi::rssm_cuda_memcpy_dtoh(dst.as_mut_ptr().cast(), self.ptr, dst.len() as u64)
        })
    }

    pub fn ptr(&self) -> *mut std::ffi::c_void {
        self.ptr
    }
}

#[cfg(replayssm_cuda)]
impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // SAFETY: ptr came from cudaMalloc and is freed once.
        unsafe { crate::ffi::rssm_cuda_free(self.ptr) };
    }
}

#[cfg(replayssm_cuda)]
pub fn synchronize() -> Result<()> {
    // SAFETY: no arguments.
    check("cudaDeviceSynchronize", unsafe { crate::ffi::rssm_cuda_synchronize() })
}

/// Copies `src` to device address `dst` on `stream` and waits for it. `dst` covers `src.len()`
/// bytes (the callers' buffers say so).
#[cfg(replayssm_cuda)]
pub(crate) fn copy_htod_on(dst: *mut std::ffi::c_void, src: &[u8], stream: *mut std::ffi::c_void) -> Result<()> {
    // SAFETY: the caller's buffer covers the bytes; `stream` is live.
    check("cudaMemcpyAsync", unsafe {
        crate::ffi::rssm_cuda_memcpy_htod_async(dst, src.as_ptr().cast(), src.len() as u64, stream)
    })?;
    // SAFETY: as above.
    check("cudaStreamSynchronize", unsafe {
        crate::ffi::rssm_cuda_stream_synchronize(stream)
    })
}

/// Copies `dst.len()` bytes from device address `src` into `dst` on `stream` and waits for it.
#[cfg(replayssm_cuda)]
pub(crate) fn copy_dtoh_on(dst: &mut [u8], src: *const std::ffi::c_void, stream: *mut std::ffi::c_void) -> Result<()> {
    // SAFETY: the caller's buffer covers the bytes; `stream` is live.
    check("cudaMemcpyAsync", unsafe {
        crate::ffi::rssm_cuda_memcpy_dtoh_async(dst.as_mut_ptr().cast(), src, dst.len() as u64, stream)
    })?;
    // SAFETY: as above.
    check("cudaStreamSynchronize", unsafe {
        crate::ffi::rssm_cuda_stream_synchronize(stream)
    })
}
