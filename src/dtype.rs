//! Activation dtypes and typed host buffers of activations.

use half::{bf16, f16};

use crate::ffi;

/// Element type of activations (`q, k, v, a, b` and outputs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    F16,
    BF16,
}

impl DType {
    pub const ALL: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

    pub fn size(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F16 | DType::BF16 => 2,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
        }
    }

    /// The value of this type in the C ABI (`replayssm_dtype` / `replayssm_variant`).
    pub fn to_ffi(self) -> i32 {
        (match self {
            DType::F32 => ffi::rssm_dtype_RSSM_DTYPE_F32,
            DType::F16 => ffi::rssm_dtype_RSSM_DTYPE_F16,
            DType::BF16 => ffi::rssm_dtype_RSSM_DTYPE_BF16,
        }) as i32
    }

    /// Rounds an f32 to this dtype and back (what storing an output does).
    pub fn round(self, x: f32) -> f32 {
        match self {
            DType::F32 => x,
            DType::F16 => f16::from_f32(x).to_f32(),
            DType::BF16 => bf16::from_f32(x).to_f32(),
        }
    }
}

text_enum!(DType, "dtype", "f32, f16 or bf16", {
    "f32" | "float32" => F32,
    "f16" | "float16" => F16,
    "bf16" | "bfloat16" => BF16,
});

/// An owned host buffer of activations in one dtype.
#[derive(Clone, Debug, PartialEq)]
pub enum ActBuffer {
    F32(Vec<f32>),
    F16(Vec<f16>),
    BF16(Vec<bf16>),
}

impl ActBuffer {
    /// Rounds `values` into a buffer of `dtype`.
    pub fn from_f32(dtype: DType, values: &[f32]) -> Self {
        match dtype {
            DType::F32 => ActBuffer::F32(values.to_vec()),
            DType::F16 => ActBuffer::F16(values.iter().map(|&x| f16::from_f32(x)).collect()),
            DType::BF16 => ActBuffer::BF16(values.iter().map(|&x| bf16::from_f32(x)).collect()),
        }
    }

    /// A buffer of `len` NaNs: outputs are poisoned with it so that an unwritten element fails.
    pub fn nan(dtype: DType, len: usize) -> Self {
        Self::from_f32(dtype, &vec![f32::NAN; len])
    }

    pub fn dtype(&self) -> DType {
        match self {
            ActBuffer::F32(_) => DType::F32,
            ActBuffer::F16(_) => DType::F16,
            ActBuffer::BF16(_) => DType::BF16,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            ActBuffer::F32(v) => v.len(),
            ActBuffer::F16(v) => v.len(),
            ActBuffer::BF16(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn get(&self, i: usize) -> f32 {
        match self {
            ActBuffer::F32(v) => v[i],
            ActBuffer::F16(v) => v[i].to_f32(),
            ActBuffer::BF16(v) => v[i].to_f32(),
        }
    }

    pub fn to_f32(&self) -> Vec<f32> {
        (0..self.len()).map(|i| self.get(i)).collect()
    }

    pub fn as_bytes(&self) -> &[u8] {
        match self {
            ActBuffer::F32(v) => bytes_of(v),
            ActBuffer::F16(v) => bytes_of(v),
            ActBuffer::BF16(v) => bytes_of(v),
        }
    }

    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        match self {
            ActBuffer::F32(v) => bytes_of_mut(v),
            ActBuffer::F16(v) => bytes_of_mut(v),
            ActBuffer::BF16(v) => bytes_of_mut(v),
        }
    }

    /// A view of `tokens` rows of `row` elements, `stride` elements apart, from element `offset`.
    pub fn view(&self, offset: usize, tokens: usize, row: usize, stride: usize) -> ActView<'_> {
        ActView {
            buf: self,
            offset,
            tokens,
            row,
            stride,
        }
    }

    /// A dense view: `tokens` rows of `row` elements.
    pub fn dense(&self, tokens: usize, row: usize) -> ActView<'_> {
        self.view(0, tokens, row, row)
    }

    pub fn view_mut(&mut self, offset: usize, tokens: usize, row: usize, stride: usize) -> ActViewMut<'_> {
        ActViewMut {
            buf: self,
            offset,
            tokens,
            row,
            stride,
        }
    }

    pub fn dense_mut(&mut self, tokens: usize, row: usize) -> ActViewMut<'_> {
        self.view_mut(0, tokens, row, row)
    }

    /// Element `i`, rounded to the buffer's dtype.
    pub fn set(&mut self, i: usize, x: f32) {
        match self {
            ActBuffer::F32(v) => v[i] = x,
            ActBuffer::F16(v) => v[i] = f16::from_f32(x),
            ActBuffer::BF16(v) => v[i] = bf16::from_f32(x),
        }
    }
}

/// Plain-old-data element types that may be viewed as bytes (bytemuck's, with half's f16/bf16).
pub use bytemuck::Pod;

/// The bytes of a slice of plain old data.
pub fn bytes_of<T: Pod>(v: &[T]) -> &[u8] {
    bytemuck::cast_slice(v)
}

/// The bytes of a mutable slice of plain old data (every bit pattern is a valid `T`).
pub fn bytes_of_mut<T: Pod>(v: &mut [T]) -> &mut [u8] {
    bytemuck::cast_slice_mut(v)
}

/// A strided read-only view of activations: `tokens` rows of `row` elements, row `t` starting
/// at element `offset + t * stride` of the buffer.
#[derive(Clone, Copy, Debug)]
pub struct ActView<'a> {
    pub buf: &'a ActBuffer,
    pub offset: usize,
    pub tokens: usize,
    pub row: usize,
    pub stride: usize,
}

impl ActView<'_> {
    pub fn dtype(&self) -> DType {
        self.buf.dtype()
    }
    pub fn at(&self, token: usize, i: usize) -> f32 {
        self.buf.get(self.offset + token * self.stride + i)
    }
}

/// The mutable counterpart of [`ActView`].
#[derive(Debug)]
pub struct ActViewMut<'a> {
    pub buf: &'a mut ActBuffer,
    pub offset: usize,
    pub tokens: usize,
    pub row: usize,
    pub stride: usize,
}

impl ActViewMut<'_> {
    pub fn dtype(&self) -> DType {
        self.buf.dtype()
    }
    pub fn at(&self, token: usize, i: usize) -> f32 {
        self.buf.get(self.offset + token * self.stride + i)
    }
    pub(crate) fn set(&mut self, token: usize, i: usize, x: f32) {
        let idx = self.offset + token * self.stride + i;
        self.buf.set(idx, x);
    }
}
