//! cudarc slices and streams as the crate's device views (feature `cudarc`).
//!
//! An engine built on cudarc (candle's CUDA backend, for one) owns its buffers as `CudaSlice<T>`
//! and launches on a `CudaStream`. [`DeviceView`] / [`DeviceViewMut`] lend a slice's device
//! address to one launch, holding cudarc's stream-ordering guard until the launch is enqueued,
//! and [`launch`] runs a C ABI entry on the stream's context; [`DeviceView::as_slice`] and
//! [`typed_stream`] hand the same buffers and stream to the typed runtime's `Stream` calls. Our kernels use the CUDA runtime,
//! which works on the primary context of the device, the context cudarc's `CudaContext::new`
//! retains, so the addresses are valid for both.
//!
//! ```ignore
//! let ctx = cudarc::driver::CudaContext::new(0)?;
//! let stream = ctx.default_stream();
//! let mut state = stream.alloc_zeros::<f32>(layers * slots * hv * v * k)?;
//! // ... ring buffers, slots, accept lens as CudaSlice<...>
//! let st = DeviceViewMut::write(&mut state, &stream);
//! let p = replayssm_fold_params { state: st.ptr(), /* ring, slots, sizes */ ..Default::default() };
//! unsafe { launch(&stream, |s| replayssm::capi::replayssm_fold(REPLAYSSM_BACKEND_CUDA as i32, &p, s)) }?;
//! ```

use std::ffi::c_void;
use std::marker::PhantomData;

use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut, SyncOnDrop};

use crate::backend::Backend;
use crate::capi::{replayssm_last_cuda_error, replayssm_last_error_message, replayssm_status};
use crate::memory::{DeviceSlice, DeviceSliceMut, Stream};

/// A cudarc buffer's device address and length, with cudarc's stream-ordering guard held for as
/// long as it is lent.
struct Lent<'a> {
    ptr: u64,
    len: usize,
    _sync: SyncOnDrop<'a>,
}

/// A cudarc buffer lent read-only to one launch.
pub struct DeviceView<'a, T> {
    lent: Lent<'a>,
    _elem: PhantomData<*const T>,
}

/// A cudarc buffer lent writable to one launch.
pub struct DeviceViewMut<'a, T> {
    lent: Lent<'a>,
    _elem: PhantomData<*mut T>,
}

impl<'a, T> DeviceView<'a, T> {
    /// Lends `slice` for a launch on `stream` (which waits for the slice's pending writes).
    pub fn read<S: DevicePtr<T>>(slice: &'a S, stream: &'a CudaStream) -> Self {
        let len = slice.len();
        Self::lend(len, slice.device_ptr(stream))
    }
    /// The view as a device slice of the typed runtime (`Stream::verify`, `Stream::fold`, ...),
    /// borrowed for no longer than the view keeps cudarc's stream ordering.
    pub fn as_slice(&self) -> DeviceSlice<'_, T> {
        // SAFETY: cudarc's slice holds `len` elements of CUDA memory, lent read-only while `self` lives.
        unsafe { DeviceSlice::from_raw_parts(Backend::Cuda, self.ptr(), self.lent.len) }
    }
}

impl<'a, T> DeviceViewMut<'a, T> {
    /// Lends `slice` for a launch on `stream` (which waits for the slice's pending reads and writes).
    pub fn write<S: DevicePtrMut<T>>(slice: &'a mut S, stream: &'a CudaStream) -> Self {
        let len = slice.len();
        Self::lend(len, slice.device_ptr_mut(stream))
    }
    /// The view as a writable device slice of the typed runtime, borrowed for no longer than
    /// the view.
    pub fn as_mut_slice(&mut self) -> DeviceSliceMut<'_, T> {
        // SAFETY: cudarc's slice holds `len` elements of CUDA memory, lent exclusively while `self` lives.
        unsafe { DeviceSliceMut::from_raw_parts(Backend::Cuda, self.ptr(), self.lent.len) }
    }
}

// What both views share: holding the lent address, and reading it back.
macro_rules! lent_view {
    ($view:ident, $ptr:ty) => {
        impl<'a, T> $view<'a, T> {
            fn lend(len: usize, (ptr, _sync): (u64, SyncOnDrop<'a>)) -> Self {
                let lent = Lent { ptr, len, _sync };
                $view {
                    lent,
                    _elem: PhantomData,
                }
            }
            /// The device address, for a params field.
            pub fn ptr(&self) -> $ptr {
                self.lent.ptr as usize as $ptr
            }
            /// Elements the view covers: check it against the extent the params describe.
            pub fn len(&self) -> usize {
                self.lent.len
            }
            pub fn is_empty(&self) -> bool {
                self.lent.len == 0
            }
        }
    };
}
lent_view!(DeviceView, *const T);
lent_view!(DeviceViewMut, *mut T);

/// The typed runtime's [`Stream`] on a cudarc stream: its calls are enqueued there.
///
/// # Safety
/// `stream` outlives the returned [`Stream`], and its context is the device's primary context
/// (cudarc's `CudaContext::new`), the one the CUDA runtime launches on.
pub unsafe fn typed_stream(stream: &CudaStream) -> crate::Result<Stream> {
    Stream::from_raw_cuda(stream_ptr(stream))
}

/// The raw `CUstream` of a cudarc stream, as the C ABI's `stream` argument.
pub fn stream_ptr(stream: &CudaStream) -> *mut c_void {
    stream.cu_stream() as *mut c_void
}

/// A C ABI entry that did not return `REPLAYSSM_OK`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{status:?}: {message}")]
pub struct LaunchError {
    pub status: replayssm_status,
    pub message: String,
    /// The cudaError_t for `REPLAYSSM_ERR_CUDA`, else 0.
    pub cuda_error: i32,
}

/// Binds the stream's context to this thread and runs `entry` with the stream's handle.
///
/// # Safety
/// Every pointer in the params `entry` passes must come from a [`DeviceView`] or
/// [`DeviceViewMut`] alive across this call and cover the extent the params describe.
pub unsafe fn launch(
    stream: &CudaStream,
    entry: impl FnOnce(*mut c_void) -> replayssm_status,
) -> Result<(), LaunchError> {
    stream.context().bind_to_thread().map_err(|e| LaunchError {
        status: replayssm_status::REPLAYSSM_ERR_CUDA,
        message: format!("binding the stream's context: {e:?}"),
        cuda_error: 0,
    })?;
    match entry(stream_ptr(stream)) {
        replayssm_status::REPLAYSSM_OK => Ok(()),
        status => Err(LaunchError {
            status,
            message: std::ffi::CStr::from_ptr(replayssm_last_error_message())
                .to_string_lossy()
                .into_owned(),
            cuda_error: replayssm_last_cuda_error(),
        }),
    }
}
