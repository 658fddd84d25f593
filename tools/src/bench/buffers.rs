//! The buffers of one benchmark case: declared first (so the footprint is known before anything
//! is allocated), then allocated on the host (emulator) or the device, filled with random values
//! and replicated per input set so that consecutive launches touch different memory.

use std::ffi::c_void;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use replayssm::backend::Backend;
use replayssm::dtype::DType;

/// Element type of a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Elem {
    F32,
    Act(DType),
    I32,
    U32,
}

impl Elem {
    pub fn size(self) -> usize {
        match self {
            Elem::F32 | Elem::I32 | Elem::U32 => 4,
            Elem::Act(d) => d.size(),
        }
    }
}

/// What a buffer starts as. Never zeros for data: zeros hide unwritten outputs and wrong indexing,
/// and can run faster than real data (METHOD.md).
#[derive(Clone, Debug)]
pub(crate) enum Fill {
    /// Uniform in `lo..hi` (floats), for inputs and outputs alike.
    Uniform(f32, f32),
    /// These integers, the same in every set (index arrays).
    Ints(Vec<i32>),
    /// Zero (the device error word only).
    Zero,
    /// NaN: an output every launch must overwrite entirely; checked after the first launches.
    Poison,
}

/// One declared buffer: `len` elements, replicated once per input set unless `shared`.
#[derive(Clone, Debug)]
struct Spec {
    name: &'static str,
    elem: Elem,
    len: usize,
    fill: Fill,
    shared: bool,
}

/// A handle to a declared buffer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Buf(usize);

/// Set strides are rounded up to this many bytes: every set's base keeps the 16-byte alignment
/// of the 128-bit state loads (and a cache line of its own).
const SET_ALIGN: usize = 256;

fn round_up(x: usize, to: usize) -> usize {
    x.div_ceil(to) * to
}

/// The buffers a case needs, before allocation.
#[derive(Clone, Debug, Default)]
pub(crate) struct Plan {
    specs: Vec<Spec>,
}

impl Plan {
    /// A buffer replicated per input set.
    pub fn per_set(&mut self, name: &'static str, elem: Elem, len: usize, fill: Fill) -> Buf {
        self.specs.push(Spec {
            name,
            elem,
            len,
            fill,
            shared: false,
        });
        Buf(self.specs.len() - 1)
    }

    /// An output every launch writes entirely: starts as NaN, checked by
    /// [`Buffers::check_written`].
    pub fn output(&mut self, name: &'static str, elem: Elem, len: usize) -> Buf {
        self.per_set(name, elem, len, Fill::Poison)
    }

    /// An index array shared by every set.
    pub fn ints(&mut self, name: &'static str, values: Vec<i32>) -> Buf {
        self.specs.push(Spec {
            name,
            elem: Elem::I32,
            len: values.len(),
            fill: Fill::Ints(values),
            shared: true,
        });
        Buf(self.specs.len() - 1)
    }

    /// The device error word (shared, zeroed).
    pub fn error_word(&mut self) -> Buf {
        self.specs.push(Spec {
            name: "error_word",
            elem: Elem::U32,
            len: 1,
            fill: Fill::Zero,
            shared: true,
        });
        Buf(self.specs.len() - 1)
    }

    fn set_stride(s: &Spec) -> usize {
        round_up(s.len * s.elem.size(), SET_ALIGN)
    }

    /// Bytes of one input set (every replicated buffer once).
    pub fn set_bytes(&self) -> usize {
        self.specs.iter().filter(|s| !s.shared).map(Self::set_stride).sum()
    }

    /// Bytes shared by every set.
    pub fn shared_bytes(&self) -> usize {
        self.specs
            .iter()
            .filter(|s| s.shared)
            .map(|s| round_up(s.len * s.elem.size(), SET_ALIGN))
            .sum()
    }

    pub fn footprint(&self, sets: usize) -> usize {
        self.shared_bytes() + sets * self.set_bytes()
    }

    /// Allocates and fills every buffer, `sets` copies of the replicated ones.
    pub fn allocate(&self, backend: Backend, sets: usize, seed: u64) -> Result<Buffers, String> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut mems = Vec::with_capacity(self.specs.len());
        for s in &self.specs {
            let copies = if s.shared { 1 } else { sets };
            let stride = Self::set_stride(s);
            let bytes = stride * copies;
            let mem = Memory::new(backend, bytes).map_err(|e| format!("{}: {e}", s.name))?;
            fill(&mem, s, stride, copies, &mut rng).map_err(|e| format!("filling {}: {e}", s.name))?;
            mems.push((mem, if s.shared { 0 } else { stride }));
        }
        Ok(Buffers {
            mems,
            specs: self.specs.clone(),
            sets,
        })
    }
}

/// Host bytes of `count` elements of `s`, uniform in its range (or its integers).
fn host_values(s: &Spec, count: usize, rng: &mut ChaCha8Rng) -> Vec<u8> {
    let mut out = Vec::with_capacity(count * s.elem.size());
    match &s.fill {
        Fill::Zero => out.resize(count * s.elem.size(), 0),
        Fill::Poison => {
            let nan: &[u8] = match s.elem {
                Elem::F32 | Elem::Act(DType::F32) => &[0x00, 0x00, 0xc0, 0x7f],
                Elem::Act(DType::F16) => &[0x00, 0x7e],
                Elem::Act(DType::BF16) => &[0xc0, 0x7f],
                Elem::I32 | Elem::U32 => &[0xff, 0xff, 0xff, 0xff],
            };
            for _ in 0..count {
                out.extend_from_slice(nan);
            }
        }
        Fill::Ints(v) => {
            for i in 0..count {
                out.extend_from_slice(&v[i % v.len()].to_le_bytes());
            }
        }
        Fill::Uniform(lo, hi) => {
            for _ in 0..count {
                let x: f32 = rng.gen_range(*lo..*hi);
                match s.elem {
                    Elem::F32 => out.extend_from_slice(&x.to_le_bytes()),
                    Elem::Act(DType::F32) => out.extend_from_slice(&x.to_le_bytes()),
                    Elem::Act(DType::F16) => out.extend_from_slice(&half::f16::from_f32(x).to_le_bytes()),
                    Elem::Act(DType::BF16) => out.extend_from_slice(&half::bf16::from_f32(x).to_le_bytes()),
                    Elem::I32 => out.extend_from_slice(&(x as i32).to_le_bytes()),
                    Elem::U32 => out.extend_from_slice(&(x as u32).to_le_bytes()),
                }
            }
        }
    }
    out
}

/// Random bytes generated on the host at most this many per buffer; larger device buffers repeat
/// them, tiled by device-to-device copies (gigabytes of state would take minutes to generate and
/// upload). A repeating pattern changes no timing: caches key on addresses, not values.
#[cfg_attr(not(replayssm_cuda), allow(dead_code))]
const HOST_TILE_BYTES: usize = 8 << 20;

fn fill(mem: &Memory, s: &Spec, stride: usize, copies: usize, rng: &mut ChaCha8Rng) -> Result<(), String> {
    let total = stride * copies;
    match mem {
        Memory::Host(v) => {
            let bytes = host_values(s, total / s.elem.size(), rng);
            // SAFETY: the allocation holds `total` bytes (u128 words rounded up).
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), v.as_ptr() as *mut u8, total) };
            Ok(())
        }
        #[cfg(replayssm_cuda)]
        Memory::Device(d) => {
            let tile = total.min(HOST_TILE_BYTES);
            let bytes = host_values(s, tile / s.elem.size(), rng);
            // SAFETY: `tile <= total` bytes of the allocation.
            replayssm::cuda::check("cudaMemcpy", unsafe {
                replayssm::ffi::rssm_cuda_memcpy_htod(d.ptr(), bytes.as_ptr().cast(), tile as u64)
            })
            .map_err(|e| e.to_string())?;
            let mut done = tile;
            while done < total {
                let n = done.min(total - done);
                // SAFETY: [0, n) and [done, done + n) lie inside the allocation and do not overlap.
                replayssm::cuda::check("cudaMemcpyAsync", unsafe {
                    replayssm::ffi::rssm_cuda_memcpy_dtod_async(
                        (d.ptr() as *mut u8).add(done).cast(),
                        d.ptr(),
                        n as u64,
                        std::ptr::null_mut(),
                    )
                })
                .map_err(|e| e.to_string())?;
                done += n;
            }
            replayssm::cuda::synchronize().map_err(|e| e.to_string())
        }
    }
}

enum Memory {
    /// 16-byte aligned host words.
    Host(Vec<u128>),
    #[cfg(replayssm_cuda)]
    Device(replayssm::cuda::DeviceBuffer),
}

impl Memory {
    fn new(backend: Backend, bytes: usize) -> Result<Memory, String> {
        match backend {
            Backend::Emulated => Ok(Memory::Host(vec![0u128; bytes.div_ceil(16)])),
            #[cfg(replayssm_cuda)]
            Backend::Cuda => replayssm::cuda::DeviceBuffer::new(bytes)
                .map(Memory::Device)
                .map_err(|e| e.to_string()),
            other => Err(format!("the {other} backend launches no kernel")),
        }
    }

    fn ptr(&self) -> *mut u8 {
        match self {
            Memory::Host(v) => v.as_ptr() as *mut u8,
            #[cfg(replayssm_cuda)]
            Memory::Device(d) => d.ptr().cast(),
        }
    }
}

/// Allocated buffers: a pointer per (buffer, set).
pub(crate) struct Buffers {
    mems: Vec<(Memory, usize)>,
    specs: Vec<Spec>,
    sets: usize,
}

/// Bytes of each set of an output that `check_written` reads back from a device (all of it on
/// the host): enough to catch a wrong pointer or extent without copying gigabytes.
#[cfg_attr(not(replayssm_cuda), allow(dead_code))]
const CHECK_BYTES: usize = 16 << 20;

impl Buffers {
    /// Set `set`'s copy of `b` (the one copy of a shared buffer).
    pub fn ptr<T>(&self, b: Buf, set: usize) -> *mut T {
        let (m, stride) = &self.mems[b.0];
        m.ptr().wrapping_add(stride * set).cast()
    }

    pub fn void(&self, b: Buf, set: usize) -> *mut c_void {
        self.ptr(b, set)
    }

    /// Every declared output (`Plan::output`) of every set no longer holds a NaN in its first
    /// `CHECK_BYTES` (all of it on the host): the launches wrote where the harness thinks.
    pub fn check_written(&self) -> Result<(), String> {
        for (i, s) in self.specs.iter().enumerate() {
            if !matches!(s.fill, Fill::Poison) {
                continue;
            }
            let (m, stride) = &self.mems[i];
            let bytes = s.len * s.elem.size();
            let n = match m {
                Memory::Host(_) => bytes,
                #[cfg(replayssm_cuda)]
                Memory::Device(_) => bytes.min(CHECK_BYTES),
            };
            for set in 0..self.sets {
                let mut host = vec![0u8; n];
                match m {
                    Memory::Host(_) => {
                        // SAFETY: set `set` of this buffer holds `bytes >= n` bytes.
                        unsafe { std::ptr::copy_nonoverlapping(m.ptr().add(stride * set), host.as_mut_ptr(), n) }
                    }
                    #[cfg(replayssm_cuda)]
                    Memory::Device(_) => {
                        // SAFETY: as above, from device memory.
                        replayssm::cuda::check("cudaMemcpy", unsafe {
                            replayssm::ffi::rssm_cuda_memcpy_dtoh(
                                host.as_mut_ptr().cast(),
                                m.ptr().add(stride * set).cast(),
                                n as u64,
                            )
                        })
                        .map_err(|e| e.to_string())?;
                    }
                }
                let nan_at = match s.elem {
                    Elem::F32 | Elem::Act(DType::F32) => host
                        .chunks_exact(4)
                        .position(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]).is_nan()),
                    Elem::Act(DType::F16) => host
                        .chunks_exact(2)
                        .position(|c| half::f16::from_le_bytes([c[0], c[1]]).is_nan()),
                    Elem::Act(DType::BF16) => host
                        .chunks_exact(2)
                        .position(|c| half::bf16::from_le_bytes([c[0], c[1]]).is_nan()),
                    Elem::I32 | Elem::U32 => None,
                };
                if let Some(at) = nan_at {
                    return Err(format!(
                        "output {} of input set {set} still holds NaN at element {at} after the first \
                         launches (unwritten, or the kernel produced NaN)",
                        s.name
                    ));
                }
            }
        }
        Ok(())
    }

    /// Reads one u32 (the error word) back.
    pub fn read_u32(&self, b: Buf) -> Result<u32, String> {
        match &self.mems[b.0].0 {
            Memory::Host(v) => Ok(v[0] as u32),
            #[cfg(replayssm_cuda)]
            Memory::Device(d) => {
                let mut x = [0u8; 4];
                d.copy_to(&mut x).map_err(|e| e.to_string())?;
                Ok(u32::from_le_bytes(x))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_are_aligned_and_footprints_add_up() {
        let mut p = Plan::default();
        let a = p.per_set("a", Elem::Act(DType::BF16), 3, Fill::Uniform(-1.0, 1.0));
        let s = p.per_set("state", Elem::F32, 64, Fill::Uniform(-1.0, 1.0));
        let i = p.ints("slots", vec![0, 1]);
        // 3 bf16 = 6 B -> 256; 64 f32 = 256 B -> 256; shared: 8 B -> 256.
        assert_eq!(p.set_bytes(), 512);
        assert_eq!(p.shared_bytes(), 256);
        assert_eq!(p.footprint(3), 256 + 3 * 512);
        let b = p.allocate(Backend::Emulated, 3, 1).unwrap();
        for set in 0..3 {
            assert_eq!(b.ptr::<u8>(a, set) as usize % 16, 0);
            assert_eq!(b.ptr::<u8>(s, set) as usize - b.ptr::<u8>(s, 0) as usize, 256 * set);
        }
        assert_eq!(b.ptr::<u8>(i, 2), b.ptr::<u8>(i, 0), "shared buffers have one copy");
        // SAFETY: two i32 were allocated and filled for `slots`.
        let slots = unsafe { std::slice::from_raw_parts(b.ptr::<i32>(i, 0), 2) };
        assert_eq!(slots, &[0, 1]);
        // SAFETY: 64 floats per set.
        let st = unsafe { std::slice::from_raw_parts(b.ptr::<f32>(s, 2), 64) };
        assert!(st.iter().all(|x| (-1.0..1.0).contains(x)), "{st:?}");
        assert!(st.iter().any(|&x| x != 0.0));
    }

    #[test]
    fn an_unwritten_output_is_caught() {
        let mut p = Plan::default();
        let o = p.output("o", Elem::Act(DType::BF16), 5);
        let b = p.allocate(Backend::Emulated, 2, 1).unwrap();
        let err = b.check_written().unwrap_err();
        assert!(err.contains("output o of input set 0"), "{err}");
        for set in 0..2 {
            // SAFETY: 5 bf16 per set.
            let xs = unsafe { std::slice::from_raw_parts_mut(b.ptr::<half::bf16>(o, set), 5) };
            xs.fill(half::bf16::ONE);
            if set == 0 {
                assert!(b.check_written().unwrap_err().contains("input set 1"));
            }
        }
        b.check_written().unwrap();
    }
}
