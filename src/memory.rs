//! Where a kernel's data lives, and the stream it runs on.
//!
//! [`Host`] memory (`Vec`, [`ActBuffer`], slices) is what the Reference backend computes on and
//! what the emulator reads in place. [`Device`] memory is where a kernel backend computes:
//! `cudaMalloc`'d on Cuda, the emulator's heap on Emulated (so CI runs the device path too). It is
//! owned by the library ([`DeviceVec`], [`DeviceAct`]) or borrowed from the engine
//! ([`DeviceSlice`], [`DeviceActView`], unsafe constructors from a pointer and its length, or
//! `interop::cudarc`). The state types ([`crate::CheckpointPool`], [`crate::SpecRing`]) and the
//! token inputs are generic over the two. A kernel call on device memory goes through a
//! [`Stream`] (the engine's own CUDA stream) and never allocates, copies or synchronises: the only
//! transfers are the explicit `from_host` / `upload` / `download` helpers below, and each one is
//! counted ([`counters`]), so a serving step can prove it made none (`tests/zero_copy.rs`).

use std::cell::UnsafeCell;
use std::ffi::c_void;
use std::fmt::Debug;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};

use half::{bf16, f16};

use crate::backend::Backend;
use crate::dtype::{ActBuffer, ActView, ActViewMut, DType, Pod};
use crate::error::{Error, Result};

/// What the library has allocated and transferred since the process started: device allocations
/// ([`DeviceVec`], on every backend) and host<->device copies (the explicit helpers, the C ABI's
/// error-word read). A serving step must change none of them (`tests/zero_copy.rs`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TransferCounters {
    pub device_allocations: u64,
    pub host_to_device: u64,
    pub device_to_host: u64,
}

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static HOST_TO_DEVICE: AtomicU64 = AtomicU64::new(0);
static DEVICE_TO_HOST: AtomicU64 = AtomicU64::new(0);

/// The counters now.
pub fn counters() -> TransferCounters {
    TransferCounters {
        device_allocations: ALLOCATIONS.load(Ordering::Relaxed),
        host_to_device: HOST_TO_DEVICE.load(Ordering::Relaxed),
        device_to_host: DEVICE_TO_HOST.load(Ordering::Relaxed),
    }
}

/// Counts a device-to-host copy made outside this module (the C ABI's error-word read).
#[cfg_attr(not(replayssm_cuda), allow(dead_code))]
pub(crate) fn count_device_to_host() {
    DEVICE_TO_HOST.fetch_add(1, Ordering::Relaxed);
}

/// Where one buffer is: host memory, or device memory of a kernel backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Location {
    Host,
    Device(Backend),
}

impl Location {
    /// `Ok` when a launch on `backend` may read this memory, else an error naming `tensor`.
    pub fn check_reachable(self, tensor: &'static str, backend: Backend) -> Result<()> {
        match self {
            Location::Host if backend != Backend::Cuda => Ok(()),
            Location::Host => Err(Error::Memory {
                tensor,
                why: "it is host memory and the cuda backend computes on device memory: upload it \
                      (DeviceVec::from_host, CheckpointPool::to_device, ...) and call through a Stream"
                    .into(),
            }),
            Location::Device(b) if b == backend => Ok(()),
            Location::Device(b) => Err(Error::Memory {
                tensor,
                why: format!("it is device memory of the {b} backend; the launch runs on {backend}"),
            }),
        }
    }
}

/// The stream a device-memory call runs on, with the device error word its kernels report into.
///
/// On Cuda: the engine's `cudaStream_t` (or the legacy default stream); calls enqueue and return.
/// On Emulated: the emulator, which runs each call to completion. Kernels OR what they could not
/// trust into the stream's error word (design §9); [`Stream::check_errors`] reads
/// and clears it, the one call here that synchronises. The kernels' calls on a stream live with
/// their kernels (`Stream::verify` in `kernels/verify.rs`, `Stream::fold` in `kernels/fold.rs`).
pub struct Stream {
    backend: Backend,
    raw: *mut c_void,
    /// One u32 of device memory; kernels write it while no Rust reference to it exists.
    word: UnsafeCell<DeviceVec<u32>>,
}

// SAFETY: a CUDA stream handle and a device address may be used from any thread; the error word is
// only touched through `&mut self`-free paths that the CUDA runtime orders on the stream.
unsafe impl Send for Stream {}

impl Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream")
            .field("backend", &self.backend)
            .field("raw", &self.raw)
            .finish()
    }
}

impl Stream {
    /// A stream of `backend`: the emulator, or the legacy default CUDA stream. Allocates the
    /// error word (once, here).
    pub fn new(backend: Backend) -> Result<Stream> {
        Ok(Stream {
            backend,
            raw: std::ptr::null_mut(),
            word: UnsafeCell::new(DeviceVec::zeros(backend, 1)?),
        })
    }

    /// The engine's CUDA stream.
    ///
    /// # Safety
    /// `raw` is a live `cudaStream_t` of the current device (or null, the legacy default stream)
    /// that outlives the returned value.
    pub unsafe fn from_raw_cuda(raw: *mut c_void) -> Result<Stream> {
        let mut s = Stream::new(Backend::Cuda)?;
        s.raw = raw;
        Ok(s)
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The `cudaStream_t` (null: the legacy default stream, and always on Emulated).
    pub fn as_raw(&self) -> *mut c_void {
        self.raw
    }

    /// The error word's address, for a launch's params.
    pub(crate) fn error_word(&self) -> *mut u32 {
        // SAFETY: no reference into the word's storage outlives this call.
        unsafe { (*self.word.get()).ptr_mut() }
    }

    /// Waits for everything enqueued on the stream (nothing to wait for on Emulated).
    pub fn synchronize(&self) -> Result<()> {
        match self.backend {
            #[cfg(replayssm_cuda)]
            Backend::Cuda => crate::runtime::cuda::check("cudaStreamSynchronize", unsafe {
                // SAFETY: `raw` is live (from_raw_cuda's contract) or null.
                crate::ffi::rssm_cuda_stream_synchronize(self.raw)
            }),
            _ => Ok(()),
        }
    }

    /// Waits for the stream, reads the device error word and clears it: `Err(DeviceReported)`
    /// when a kernel since the last check skipped rows it could not trust (bad device-side
    /// indices). One synchronisation and one small copy each way, at a time the engine chooses.
    pub fn check_errors(&self) -> Result<()> {
        let mut bits = [0u32];
        // SAFETY: the kernels that write the word are finished once `download` synchronised.
        let word = unsafe { &mut *self.word.get() };
        word.download(self, &mut bits)?;
        if bits[0] == 0 {
            return Ok(());
        }
        // Cleared on the stream, after the kernels that set it and before the next ones.
        word.as_mut_slice().fill_bytes(self, 0)?;
        self.synchronize()?;
        Err(Error::DeviceReported {
            kernel: "a kernel on this stream",
            bits: bits[0],
        })
    }
}

/// The storage of a [`DeviceVec`].
enum Store<T> {
    /// The emulator's "device": host memory the kernels read through pointers.
    Emulated(Vec<T>),
    #[cfg(replayssm_cuda)]
    Cuda(crate::runtime::cuda::DeviceBuffer),
    /// The engine's memory ([`DeviceVec::from_raw_parts`]): never freed here.
    Borrowed(*mut T),
}

/// A buffer of `len` elements in device memory of one backend: owned by the library, or the
/// engine's own allocation lent for the buffer's life ([`DeviceVec::from_raw_parts`]).
pub struct DeviceVec<T: Pod> {
    backend: Backend,
    len: usize,
    store: Store<T>,
}

impl<T: Pod> Debug for DeviceVec<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "DeviceVec<{}>[{}] on {}",
            std::any::type_name::<T>(),
            self.len,
            self.backend
        )
    }
}

impl<T: Pod> DeviceVec<T> {
    /// `len` elements with every byte `byte` (0: zeros; 0xFF: NaN for every float type, -1 for
    /// integers, the poison of a buffer a kernel must overwrite). On Cuda this synchronises the
    /// device (an allocation is set-up work: make pools, rings and scratch before serving and
    /// outside any graph capture).
    fn filled(backend: Backend, len: usize, byte: u8) -> Result<Self> {
        let elem = std::mem::size_of::<T>();
        let bytes = len.checked_mul(elem).ok_or(Error::Alloc {
            buffer: "device buffer",
            bytes: u64::MAX,
        })?;
        let store = match backend {
            Backend::Reference => {
                return Err(Error::Memory {
                    tensor: "device buffer",
                    why: "the reference backend computes on host memory; it has no device memory".into(),
                })
            }
            Backend::Emulated => {
                let mut v: Vec<T> = Vec::new();
                v.try_reserve_exact(len).map_err(|_| Error::Alloc {
                    buffer: "device buffer",
                    bytes: bytes as u64,
                })?;
                v.resize(len, T::zeroed());
                bytemuck::cast_slice_mut::<T, u8>(&mut v).fill(byte);
                Store::Emulated(v)
            }
            #[cfg(replayssm_cuda)]
            Backend::Cuda => {
                crate::runtime::cuda::device().map_err(|reason| Error::BackendUnavailable {
                    backend: Backend::Cuda,
                    reason,
                })?;
                let b = crate::runtime::cuda::DeviceBuffer::new(bytes)?;
                // SAFETY: the allocation holds `bytes` bytes.
                crate::runtime::cuda::check("cudaMemset", unsafe {
                    crate::ffi::rssm_cuda_memset(b.ptr(), byte as i32, bytes as u64)
                })?;
                crate::runtime::cuda::synchronize()?;
                Store::Cuda(b)
            }
            #[cfg(not(replayssm_cuda))]
            Backend::Cuda => {
                return Err(Error::BackendUnavailable {
                    backend: Backend::Cuda,
                    reason: crate::runtime::cuda::device().err().unwrap_or_default(),
                })
            }
        };
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        Ok(DeviceVec { backend, len, store })
    }

    /// The engine's allocation as a buffer the library does not free: a pool, ring or cursor
    /// array the engine already owns (SGLang's state tensor, a `cudaMalloc`, a cudarc slice).
    ///
    /// # Safety
    /// `ptr` addresses `len` elements of device memory of `backend` (on Emulated: host memory),
    /// aligned for `T` (16 bytes for a checkpoint pool on Cuda), that stay allocated and are used
    /// by nobody else while the returned buffer (and anything built on it) is in use.
    pub unsafe fn from_raw_parts(backend: Backend, ptr: *mut T, len: usize) -> Self {
        DeviceVec {
            backend,
            len,
            store: Store::Borrowed(ptr),
        }
    }

    /// `len` zeros in device memory of `backend`.
    pub fn zeros(backend: Backend, len: usize) -> Result<Self> {
        Self::filled(backend, len, 0)
    }

    /// `len` elements with every bit set (NaN for floats, -1 for integers): an output that a
    /// launch does not write stays visibly wrong.
    pub fn poisoned(backend: Backend, len: usize) -> Result<Self> {
        Self::filled(backend, len, 0xFF)
    }

    /// A copy of `src` in device memory of the stream's backend (an explicit transfer).
    pub fn from_host(stream: &Stream, src: &[T]) -> Result<Self> {
        let mut v = Self::zeros(stream.backend(), src.len())?;
        v.upload(stream, src)?;
        Ok(v)
    }

    fn check_len(&self, what: &'static str, n: usize) -> Result<()> {
        if n != self.len {
            return Err(Error::Shape {
                tensor: what,
                expected: format!("{} elements (the device buffer's length)", self.len),
                got: format!("{n} elements"),
            });
        }
        Ok(())
    }

    fn check_stream(&self, stream: &Stream) -> Result<()> {
        Location::Device(self.backend).check_reachable("device buffer", stream.backend())
    }

    /// Copies `src` into this buffer after the stream's pending work (an explicit transfer).
    pub fn upload(&mut self, stream: &Stream, src: &[T]) -> Result<()> {
        self.check_len("upload source", src.len())?;
        self.check_stream(stream)?;
        HOST_TO_DEVICE.fetch_add(1, Ordering::Relaxed);
        match &mut self.store {
            Store::Emulated(v) => v.copy_from_slice(src),
            // On the stream itself (after its work, before what follows, non-blocking streams
            // included), then waited for: `src` may be freed when this returns.
            #[cfg(replayssm_cuda)]
            Store::Cuda(b) => b.copy_from_on(bytemuck::cast_slice(src), stream.as_raw())?,
            Store::Borrowed(p) => match self.backend {
                #[cfg(replayssm_cuda)]
                Backend::Cuda => {
                    crate::runtime::cuda::copy_htod_on((*p).cast(), bytemuck::cast_slice(src), stream.as_raw())?
                }
                // SAFETY: `len` elements of host memory lent exclusively (from_raw_parts).
                _ => unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), *p, src.len()) },
            },
        }
        Ok(())
    }

    /// Copies this buffer into `dst` once the stream's pending work is done (an explicit
    /// transfer; it synchronises the stream).
    pub fn download(&self, stream: &Stream, dst: &mut [T]) -> Result<()> {
        self.check_len("download destination", dst.len())?;
        self.check_stream(stream)?;
        DEVICE_TO_HOST.fetch_add(1, Ordering::Relaxed);
        match &self.store {
            Store::Emulated(v) => dst.copy_from_slice(v),
            #[cfg(replayssm_cuda)]
            Store::Cuda(b) => b.copy_to_on(bytemuck::cast_slice_mut(dst), stream.as_raw())?,
            Store::Borrowed(p) => match self.backend {
                #[cfg(replayssm_cuda)]
                Backend::Cuda => crate::runtime::cuda::copy_dtoh_on(
                    bytemuck::cast_slice_mut(dst),
                    (*p).cast_const().cast(),
                    stream.as_raw(),
                )?,
                // SAFETY: `len` elements of host memory lent (from_raw_parts).
                _ => unsafe { std::ptr::copy_nonoverlapping(*p, dst.as_mut_ptr(), dst.len()) },
            },
        }
        Ok(())
    }

    /// The buffer's contents on the host (an explicit transfer).
    pub fn to_vec(&self, stream: &Stream) -> Result<Vec<T>> {
        let mut v = vec![T::zeroed(); self.len];
        self.download(stream, &mut v)?;
        Ok(v)
    }

    pub(crate) fn ptr(&self) -> *const T {
        match &self.store {
            Store::Emulated(v) => v.as_ptr(),
            #[cfg(replayssm_cuda)]
            Store::Cuda(b) => b.ptr() as *const T,
            Store::Borrowed(p) => *p,
        }
    }
    pub(crate) fn ptr_mut(&mut self) -> *mut T {
        match &mut self.store {
            Store::Emulated(v) => v.as_mut_ptr(),
            #[cfg(replayssm_cuda)]
            Store::Cuda(b) => b.ptr() as *mut T,
            Store::Borrowed(p) => *p,
        }
    }

    /// A read-only view of the whole buffer.
    pub fn as_slice(&self) -> DeviceSlice<'_, T> {
        DeviceSlice {
            ptr: self.ptr(),
            len: self.len,
            backend: self.backend,
            _life: PhantomData,
        }
    }
    /// A writable view of the whole buffer.
    pub fn as_mut_slice(&mut self) -> DeviceSliceMut<'_, T> {
        DeviceSliceMut {
            ptr: self.ptr_mut(),
            len: self.len,
            backend: self.backend,
            _life: PhantomData,
        }
    }
}

/// A borrowed read-only range of device memory: the library's ([`DeviceVec::as_slice`]) or the
/// engine's ([`DeviceSlice::from_raw_parts`], `interop::cudarc`).
#[derive(Debug)]
pub struct DeviceSlice<'a, T> {
    ptr: *const T,
    len: usize,
    backend: Backend,
    _life: PhantomData<&'a T>,
}

impl<T> Clone for DeviceSlice<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for DeviceSlice<'_, T> {}

/// The accessors the owned buffer and both borrowed slice types share.
macro_rules! slice_accessors {
    ([$($generics:tt)*] $t:ty) => {
        impl<$($generics)*> $t {
            pub fn len(&self) -> usize {
                self.len
            }
            pub fn is_empty(&self) -> bool {
                self.len == 0
            }
            pub fn backend(&self) -> Backend {
                self.backend
            }
        }
    };
}
slice_accessors!([T: Pod] DeviceVec<T>);
slice_accessors!([T] DeviceSlice<'_, T>);
slice_accessors!([T] DeviceSliceMut<'_, T>);

impl<'a, T> DeviceSlice<'a, T> {
    /// Engine memory as a slice.
    ///
    /// # Safety
    /// `ptr` addresses `len` elements of device memory of `backend` (on Emulated: host memory)
    /// that stay allocated, and are not written by anyone else, for `'a`.
    pub unsafe fn from_raw_parts(backend: Backend, ptr: *const T, len: usize) -> Self {
        DeviceSlice {
            ptr,
            len,
            backend,
            _life: PhantomData,
        }
    }
    pub fn as_ptr(&self) -> *const T {
        self.ptr
    }
}

/// A borrowed writable range of device memory.
#[derive(Debug)]
pub struct DeviceSliceMut<'a, T> {
    ptr: *mut T,
    len: usize,
    backend: Backend,
    _life: PhantomData<&'a mut T>,
}

impl<'a, T> DeviceSliceMut<'a, T> {
    /// Engine memory as a writable slice.
    ///
    /// # Safety
    /// As [`DeviceSlice::from_raw_parts`], and nobody else reads or writes it for `'a`.
    pub unsafe fn from_raw_parts(backend: Backend, ptr: *mut T, len: usize) -> Self {
        DeviceSliceMut {
            ptr,
            len,
            backend,
            _life: PhantomData,
        }
    }
    pub fn as_slice(&self) -> DeviceSlice<'_, T> {
        DeviceSlice {
            ptr: self.ptr,
            len: self.len,
            backend: self.backend,
            _life: PhantomData,
        }
    }
    pub fn reborrow(&mut self) -> DeviceSliceMut<'_, T> {
        DeviceSliceMut {
            ptr: self.ptr,
            len: self.len,
            backend: self.backend,
            _life: PhantomData,
        }
    }
    pub fn as_mut_ptr(&mut self) -> *mut T {
        self.ptr
    }

    /// The first `mid` elements and the rest, as two writable slices.
    pub fn split_at_mut(&mut self, mid: usize) -> (DeviceSliceMut<'_, T>, DeviceSliceMut<'_, T>) {
        let mid = mid.min(self.len);
        let tail = self.ptr.wrapping_add(mid);
        (
            DeviceSliceMut {
                ptr: self.ptr,
                len: mid,
                backend: self.backend,
                _life: PhantomData,
            },
            DeviceSliceMut {
                ptr: tail,
                len: self.len - mid,
                backend: self.backend,
                _life: PhantomData,
            },
        )
    }

    /// Sets every byte to `byte`, enqueued on `stream` (no transfer, no synchronisation).
    pub(crate) fn fill_bytes(&mut self, stream: &Stream, byte: u8) -> Result<()> {
        Location::Device(self.backend).check_reachable("scratch", stream.backend())?;
        let bytes = self.len * std::mem::size_of::<T>();
        match self.backend {
            #[cfg(replayssm_cuda)]
            Backend::Cuda => crate::runtime::cuda::check("cudaMemsetAsync", unsafe {
                // SAFETY: the slice covers `bytes` bytes of device memory; the stream is live.
                crate::ffi::rssm_cuda_memset_async(self.ptr.cast(), byte as i32, bytes as u64, stream.as_raw())
            }),
            _ => {
                // SAFETY: on Emulated the slice is `len` elements of host memory lent exclusively.
                unsafe { std::ptr::write_bytes(self.ptr.cast::<u8>(), byte, bytes) };
                Ok(())
            }
        }
    }
}

/// Owned activations (`f32`, `f16` or `bf16`) in device memory: the spec ring's raw keys and
/// values, or an engine-side tensor the tests upload.
#[derive(Debug)]
pub enum DeviceAct {
    F32(DeviceVec<f32>),
    F16(DeviceVec<f16>),
    BF16(DeviceVec<bf16>),
}

impl DeviceAct {
    /// `len` NaNs of `dtype`.
    pub fn poisoned(backend: Backend, dtype: DType, len: usize) -> Result<Self> {
        Ok(match dtype {
            DType::F32 => DeviceAct::F32(DeviceVec::poisoned(backend, len)?),
            DType::F16 => DeviceAct::F16(DeviceVec::poisoned(backend, len)?),
            DType::BF16 => DeviceAct::BF16(DeviceVec::poisoned(backend, len)?),
        })
    }

    /// The engine's activation buffer (`len` elements of `dtype` at `ptr`), not freed here.
    ///
    /// # Safety
    /// As [`DeviceVec::from_raw_parts`].
    pub unsafe fn from_raw_parts(backend: Backend, dtype: DType, ptr: *mut c_void, len: usize) -> Self {
        match dtype {
            DType::F32 => DeviceAct::F32(DeviceVec::from_raw_parts(backend, ptr.cast(), len)),
            DType::F16 => DeviceAct::F16(DeviceVec::from_raw_parts(backend, ptr.cast(), len)),
            DType::BF16 => DeviceAct::BF16(DeviceVec::from_raw_parts(backend, ptr.cast(), len)),
        }
    }

    /// A copy of `src` on the stream's backend (an explicit transfer).
    pub fn from_host(stream: &Stream, src: &ActBuffer) -> Result<Self> {
        Ok(match src {
            ActBuffer::F32(v) => DeviceAct::F32(DeviceVec::from_host(stream, v)?),
            ActBuffer::F16(v) => DeviceAct::F16(DeviceVec::from_host(stream, v)?),
            ActBuffer::BF16(v) => DeviceAct::BF16(DeviceVec::from_host(stream, v)?),
        })
    }

    /// The contents on the host (an explicit transfer).
    pub fn to_host(&self, stream: &Stream) -> Result<ActBuffer> {
        Ok(match self {
            DeviceAct::F32(v) => ActBuffer::F32(v.to_vec(stream)?),
            DeviceAct::F16(v) => ActBuffer::F16(v.to_vec(stream)?),
            DeviceAct::BF16(v) => ActBuffer::BF16(v.to_vec(stream)?),
        })
    }

    /// Copies the contents into `dst` (same dtype and length; an explicit transfer, no allocation).
    pub fn download(&self, stream: &Stream, dst: &mut ActBuffer) -> Result<()> {
        match (self, dst) {
            (DeviceAct::F32(s), ActBuffer::F32(d)) => s.download(stream, d),
            (DeviceAct::F16(s), ActBuffer::F16(d)) => s.download(stream, d),
            (DeviceAct::BF16(s), ActBuffer::BF16(d)) => s.download(stream, d),
            (s, d) => Err(Error::DType {
                tensor: "download destination",
                expected: s.dtype(),
                got: d.dtype(),
            }),
        }
    }

    /// Overwrites the contents with `src` (same dtype and length; an explicit transfer).
    pub fn upload(&mut self, stream: &Stream, src: &ActBuffer) -> Result<()> {
        match (self, src) {
            (DeviceAct::F32(d), ActBuffer::F32(s)) => d.upload(stream, s),
            (DeviceAct::F16(d), ActBuffer::F16(s)) => d.upload(stream, s),
            (DeviceAct::BF16(d), ActBuffer::BF16(s)) => d.upload(stream, s),
            (d, s) => Err(Error::DType {
                tensor: "upload source",
                expected: d.dtype(),
                got: s.dtype(),
            }),
        }
    }

    pub fn dtype(&self) -> DType {
        match self {
            DeviceAct::F32(_) => DType::F32,
            DeviceAct::F16(_) => DType::F16,
            DeviceAct::BF16(_) => DType::BF16,
        }
    }
    pub fn len(&self) -> usize {
        match self {
            DeviceAct::F32(v) => v.len(),
            DeviceAct::F16(v) => v.len(),
            DeviceAct::BF16(v) => v.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn backend(&self) -> Backend {
        match self {
            DeviceAct::F32(v) => v.backend(),
            DeviceAct::F16(v) => v.backend(),
            DeviceAct::BF16(v) => v.backend(),
        }
    }
    pub(crate) fn ptr(&self) -> *const u8 {
        match self {
            DeviceAct::F32(v) => v.ptr().cast(),
            DeviceAct::F16(v) => v.ptr().cast(),
            DeviceAct::BF16(v) => v.ptr().cast(),
        }
    }
    pub(crate) fn ptr_mut(&mut self) -> *mut u8 {
        match self {
            DeviceAct::F32(v) => v.ptr_mut().cast(),
            DeviceAct::F16(v) => v.ptr_mut().cast(),
            DeviceAct::BF16(v) => v.ptr_mut().cast(),
        }
    }

    /// A view of `tokens` rows of `row` elements, `stride` apart, from element `offset`.
    pub fn view(&self, offset: usize, tokens: usize, row: usize, stride: usize) -> DeviceActView<'_> {
        // SAFETY: the buffer outlives the view's borrow of it.
        unsafe {
            DeviceActView::from_raw_parts(
                self.backend(),
                self.dtype(),
                self.ptr().cast(),
                self.len(),
                offset,
                tokens,
                row,
                stride,
            )
        }
    }
    pub fn dense(&self, tokens: usize, row: usize) -> DeviceActView<'_> {
        self.view(0, tokens, row, row)
    }
    pub fn view_mut(&mut self, offset: usize, tokens: usize, row: usize, stride: usize) -> DeviceActViewMut<'_> {
        let (backend, dtype, len) = (self.backend(), self.dtype(), self.len());
        // SAFETY: the buffer outlives the view's exclusive borrow of it.
        unsafe {
            DeviceActViewMut::from_raw_parts(backend, dtype, self.ptr_mut().cast(), len, offset, tokens, row, stride)
        }
    }
    pub fn dense_mut(&mut self, tokens: usize, row: usize) -> DeviceActViewMut<'_> {
        self.view_mut(0, tokens, row, row)
    }
}

// The read-only and the writable device view differ only in the pointer and the borrow they
// stand for: one definition of both.
macro_rules! device_act_view {
    ($(#[$doc:meta])* $name:ident, $derive:meta, $ptr:ty, $raw:ty, $borrow:ty, $safety:literal) => {
        $(#[$doc])*
        #[$derive]
        pub struct $name<'a> {
            base: $ptr,
            len: usize,
            dtype: DType,
            backend: Backend,
            pub offset: usize,
            pub tokens: usize,
            pub row: usize,
            pub stride: usize,
            _life: PhantomData<$borrow>,
        }

        impl $name<'_> {
            /// An engine tensor of `len` elements of `dtype` at `base`, viewed with the given layout.
            ///
            /// # Safety
            #[doc = $safety]
            #[allow(clippy::too_many_arguments)]
            pub unsafe fn from_raw_parts(
                backend: Backend,
                dtype: DType,
                base: $raw,
                len: usize,
                offset: usize,
                tokens: usize,
                row: usize,
                stride: usize,
            ) -> Self {
                $name { base: base.cast(), len, dtype, backend, offset, tokens, row, stride, _life: PhantomData }
            }
        }
    };
}
device_act_view!(
    /// A strided read-only view of device activations: `tokens` rows of `row` elements, row `t` at
    /// element `offset + t * stride` of a buffer of `len` elements (the launch checks the extent).
    DeviceActView,
    derive(Clone, Copy, Debug),
    *const u8,
    *const c_void,
    &'a (),
    "As [`DeviceSlice::from_raw_parts`] for `len` elements of `dtype` at `base`."
);
device_act_view!(
    /// The writable counterpart of [`DeviceActView`] (kernel outputs).
    DeviceActViewMut,
    derive(Debug),
    *mut u8,
    *mut c_void,
    &'a mut (),
    "As [`DeviceSliceMut::from_raw_parts`] for `len` elements of `dtype` at `base`."
);

/// What the launch plumbing reads of an activation view, host or device.
pub trait ActLayout {
    fn dtype(&self) -> DType;
    /// Elements of the underlying buffer.
    fn buf_len(&self) -> usize;
    /// `(offset, tokens, row, stride)`.
    fn layout(&self) -> (usize, usize, usize, usize);
    fn location(&self) -> Location;
    /// The address of element 0 of the underlying buffer.
    fn base(&self) -> *const u8;
}

/// The writable side of an output view.
pub trait ActLayoutMut: ActLayout {
    /// The address of element 0 of the underlying buffer, for writing.
    fn base_mut(&mut self) -> *mut u8;
}

impl ActLayoutMut for ActViewMut<'_> {
    fn base_mut(&mut self) -> *mut u8 {
        self.buf.as_bytes_mut().as_mut_ptr()
    }
}

impl ActLayoutMut for DeviceActViewMut<'_> {
    fn base_mut(&mut self) -> *mut u8 {
        self.base
    }
}

macro_rules! host_layout {
    ($t:ident) => {
        impl ActLayout for $t<'_> {
            fn dtype(&self) -> DType {
                self.buf.dtype()
            }
            fn buf_len(&self) -> usize {
                self.buf.len()
            }
            fn layout(&self) -> (usize, usize, usize, usize) {
                (self.offset, self.tokens, self.row, self.stride)
            }
            fn location(&self) -> Location {
                Location::Host
            }
            fn base(&self) -> *const u8 {
                self.buf.as_bytes().as_ptr()
            }
        }
    };
}
host_layout!(ActView);
host_layout!(ActViewMut);

macro_rules! device_layout {
    ($t:ident) => {
        impl ActLayout for $t<'_> {
            fn dtype(&self) -> DType {
                self.dtype
            }
            fn buf_len(&self) -> usize {
                self.len
            }
            fn layout(&self) -> (usize, usize, usize, usize) {
                (self.offset, self.tokens, self.row, self.stride)
            }
            fn location(&self) -> Location {
                Location::Device(self.backend)
            }
            fn base(&self) -> *const u8 {
                self.base as *const u8
            }
        }
    };
}
device_layout!(DeviceActView);
device_layout!(DeviceActViewMut);

/// A borrowed index or gate array, host or device.
pub trait SliceRef<T>: Copy + Debug {
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    fn location(&self) -> Location;
    fn ptr(&self) -> *const T;
    /// The elements, where the host can read them (host memory only: device memory is never
    /// read behind the caller's back).
    fn host(&self) -> Option<&[T]>;
}

impl<T: Debug> SliceRef<T> for &[T] {
    fn len(&self) -> usize {
        <[T]>::len(self)
    }
    fn location(&self) -> Location {
        Location::Host
    }
    fn ptr(&self) -> *const T {
        self.as_ptr()
    }
    fn host(&self) -> Option<&[T]> {
        Some(self)
    }
}

impl<T: Debug> SliceRef<T> for DeviceSlice<'_, T> {
    fn len(&self) -> usize {
        self.len
    }
    fn location(&self) -> Location {
        Location::Device(self.backend)
    }
    fn ptr(&self) -> *const T {
        self.ptr
    }
    fn host(&self) -> Option<&[T]> {
        None
    }
}

/// A borrowed writable array, host or device.
pub trait SliceMutRef<T>: Debug {
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    fn location(&self) -> Location;
    fn ptr_mut(&mut self) -> *mut T;
}

impl<T: Debug> SliceMutRef<T> for &mut [T] {
    fn len(&self) -> usize {
        <[T]>::len(self)
    }
    fn location(&self) -> Location {
        Location::Host
    }
    fn ptr_mut(&mut self) -> *mut T {
        self.as_mut_ptr()
    }
}

impl<T: Debug> SliceMutRef<T> for DeviceSliceMut<'_, T> {
    fn len(&self) -> usize {
        self.len
    }
    fn location(&self) -> Location {
        Location::Device(self.backend)
    }
    fn ptr_mut(&mut self) -> *mut T {
        self.ptr
    }
}

/// `cu_seqlens [B + 1]` with what the launch needs to know of it without reading it.
pub trait SeqlensRef: SliceRef<i32> {
    /// The longest request's token count, as the caller vouches for it (device memory: the
    /// kernel flags a longer one in the error word); `None` on the host, where it is computed.
    fn max_seqlen(&self) -> Option<usize>;
}

impl SeqlensRef for &[i32] {
    fn max_seqlen(&self) -> Option<usize> {
        None
    }
}

/// `cu_seqlens` in device memory with its bound: the host never reads the array (a captured
/// graph replays with new contents), so the caller states the longest request (a request longer
/// than `max_seqlen` is skipped and flagged in the stream's error word).
#[derive(Clone, Copy, Debug)]
pub struct DeviceSeqlens<'a> {
    pub cu: DeviceSlice<'a, i32>,
    pub max_seqlen: usize,
}

impl SliceRef<i32> for DeviceSeqlens<'_> {
    fn len(&self) -> usize {
        self.cu.len
    }
    fn location(&self) -> Location {
        Location::Device(self.cu.backend)
    }
    fn ptr(&self) -> *const i32 {
        self.cu.ptr
    }
    fn host(&self) -> Option<&[i32]> {
        None
    }
}

impl SeqlensRef for DeviceSeqlens<'_> {
    fn max_seqlen(&self) -> Option<usize> {
        Some(self.max_seqlen)
    }
}

/// An owned buffer of the state (pool, ring), host or device.
pub trait Storage<T: Pod>: Debug + Send + Sized {
    /// `len` poisoned (NaN / all-ones) elements, or zeros, where `location` says.
    fn alloc(location: Location, len: usize, poison: bool) -> Result<Self>;
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    fn location(&self) -> Location;
    fn ptr(&self) -> *const T;
    fn ptr_mut(&mut self) -> *mut T;
}

fn host_vec<T: Pod>(len: usize, poison: bool, buffer: &'static str) -> Result<Vec<T>> {
    let mut v: Vec<T> = Vec::new();
    v.try_reserve_exact(len).map_err(|_| Error::Alloc {
        buffer,
        bytes: (len as u64).saturating_mul(std::mem::size_of::<T>() as u64),
    })?;
    v.resize(len, T::zeroed());
    if poison {
        bytemuck::cast_slice_mut::<T, u8>(&mut v).fill(0xFF);
    }
    Ok(v)
}

impl<T: Pod + Debug + Send> Storage<T> for Vec<T> {
    fn alloc(_: Location, len: usize, poison: bool) -> Result<Self> {
        host_vec(len, poison, "host buffer")
    }
    fn len(&self) -> usize {
        Vec::len(self)
    }
    fn location(&self) -> Location {
        Location::Host
    }
    fn ptr(&self) -> *const T {
        self.as_ptr()
    }
    fn ptr_mut(&mut self) -> *mut T {
        self.as_mut_ptr()
    }
}

// SAFETY: a DeviceVec owns its memory like a Vec; device addresses may move between threads.
unsafe impl<T: Pod + Send> Send for DeviceVec<T> {}
// SAFETY: shared references only read (or hand out read-only views).
unsafe impl<T: Pod + Sync> Sync for DeviceVec<T> {}

impl<T: Pod + Debug + Send> Storage<T> for DeviceVec<T> {
    fn alloc(location: Location, len: usize, poison: bool) -> Result<Self> {
        let Location::Device(backend) = location else {
            return Err(Error::Memory {
                tensor: "device buffer",
                why: "asked for device memory on the host".into(),
            });
        };
        if poison {
            DeviceVec::poisoned(backend, len)
        } else {
            DeviceVec::zeros(backend, len)
        }
    }
    fn len(&self) -> usize {
        self.len
    }
    fn location(&self) -> Location {
        Location::Device(self.backend)
    }
    fn ptr(&self) -> *const T {
        DeviceVec::ptr(self)
    }
    fn ptr_mut(&mut self) -> *mut T {
        DeviceVec::ptr_mut(self)
    }
}

/// Owned activations of the state (the spec ring's raw keys and values), host or device.
pub trait ActStorage: Debug + Send + Sized {
    fn alloc_poisoned(location: Location, dtype: DType, len: usize) -> Result<Self>;
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    fn dtype(&self) -> DType;
    fn location(&self) -> Location;
    fn ptr(&self) -> *const u8;
    fn ptr_mut(&mut self) -> *mut u8;
}

impl ActStorage for ActBuffer {
    fn alloc_poisoned(_: Location, dtype: DType, len: usize) -> Result<Self> {
        Ok(match dtype {
            DType::F32 => ActBuffer::F32(host_vec(len, true, "host activations")?),
            DType::F16 => ActBuffer::F16(host_vec(len, true, "host activations")?),
            DType::BF16 => ActBuffer::BF16(host_vec(len, true, "host activations")?),
        })
    }
    fn len(&self) -> usize {
        ActBuffer::len(self)
    }
    fn dtype(&self) -> DType {
        ActBuffer::dtype(self)
    }
    fn location(&self) -> Location {
        Location::Host
    }
    fn ptr(&self) -> *const u8 {
        self.as_bytes().as_ptr()
    }
    fn ptr_mut(&mut self) -> *mut u8 {
        self.as_bytes_mut().as_mut_ptr()
    }
}

impl ActStorage for DeviceAct {
    fn alloc_poisoned(location: Location, dtype: DType, len: usize) -> Result<Self> {
        let Location::Device(backend) = location else {
            return Err(Error::Memory {
                tensor: "device activations",
                why: "asked for device memory on the host".into(),
            });
        };
        DeviceAct::poisoned(backend, dtype, len)
    }
    fn len(&self) -> usize {
        DeviceAct::len(self)
    }
    fn dtype(&self) -> DType {
        DeviceAct::dtype(self)
    }
    fn location(&self) -> Location {
        Location::Device(DeviceAct::backend(self))
    }
    fn ptr(&self) -> *const u8 {
        DeviceAct::ptr(self)
    }
    fn ptr_mut(&mut self) -> *mut u8 {
        DeviceAct::ptr_mut(self)
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Host {}
    impl Sealed for super::Device {}
}

/// Host or device memory: the type parameter of the state types and the token inputs, so that
/// a call never mixes them and the device path is a different type, not a runtime flag.
pub trait Memory: sealed::Sealed + Copy + Debug + Send + Sync + 'static {
    /// An owned f32/i32 buffer: `Vec` or [`DeviceVec`].
    type Vec<T: Pod + Debug + Send + Sync>: Storage<T>;
    /// Owned activations: [`ActBuffer`] or [`DeviceAct`].
    type Act: ActStorage;
    /// A borrowed array: `&[T]` or [`DeviceSlice`].
    type Slice<'a, T: Pod + Debug + 'a>: SliceRef<T>;
    /// A borrowed writable array: `&mut [T]` or [`DeviceSliceMut`].
    type SliceMut<'a, T: Pod + Debug + 'a>: SliceMutRef<T>;
    /// `cu_seqlens`: `&[i32]` or [`DeviceSeqlens`] (which states its bound).
    type Seqlens<'a>: SeqlensRef;
    /// A read-only activation view: [`ActView`] or [`DeviceActView`].
    type View<'a>: ActLayout + Copy + Debug;
    /// A writable activation view: [`ActViewMut`] or [`DeviceActViewMut`].
    type ViewMut<'a>: ActLayoutMut + Debug;
}

/// Host memory: what the Reference backend computes on and the emulator reads in place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Host;

/// Device memory of a kernel backend (Cuda, or the emulator's heap on Emulated).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Device;

impl Memory for Host {
    type Vec<T: Pod + Debug + Send + Sync> = Vec<T>;
    type Act = ActBuffer;
    type Slice<'a, T: Pod + Debug + 'a> = &'a [T];
    type SliceMut<'a, T: Pod + Debug + 'a> = &'a mut [T];
    type Seqlens<'a> = &'a [i32];
    type View<'a> = ActView<'a>;
    type ViewMut<'a> = ActViewMut<'a>;
}

impl Memory for Device {
    type Vec<T: Pod + Debug + Send + Sync> = DeviceVec<T>;
    type Act = DeviceAct;
    type Slice<'a, T: Pod + Debug + 'a> = DeviceSlice<'a, T>;
    type SliceMut<'a, T: Pod + Debug + 'a> = DeviceSliceMut<'a, T>;
    type Seqlens<'a> = DeviceSeqlens<'a>;
    type View<'a> = DeviceActView<'a>;
    type ViewMut<'a> = DeviceActViewMut<'a>;
}
