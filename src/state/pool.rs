//! The checkpoint pool (design §2): `[NL, NS, HV, V, K]` f32, K contiguous. A pool is built only
//! from a [`ResolvedConfig`], so it knows the mode and the role (local, PD prefill, PD decode)
//! it serves; rings attach to a pool and refuse what the configuration cannot serve (design §5 P1).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::backend::Backend;
use crate::config::{Mode, PoolRole, ResolvedConfig};
use crate::error::{Error, Result};
use crate::memory::{Device, DeviceSlice, DeviceSliceMut, DeviceVec, Host, Location, Memory, Storage, Stream};
use crate::problem::{HeadDims, Variant};

static NEXT_POOL_ID: AtomicU64 = AtomicU64::new(1);

/// Geometry of a checkpoint pool: `layers` x `slots` states of `[HV, V, K]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolShape {
    pub variant: Variant,
    pub dims: HeadDims,
    pub layers: usize,
    pub slots: usize,
}

impl PoolShape {
    pub fn validate(&self) -> Result<()> {
        self.dims.validate()?;
        if self.layers == 0 || self.slots == 0 {
            return Err(Error::InvalidValue {
                what: "pool shape",
                why: format!("layers ({}) and slots ({}) must be positive", self.layers, self.slots),
            });
        }
        if self.slots > i32::MAX as usize || self.layers > 65535 {
            return Err(Error::InvalidValue {
                what: "pool shape",
                why: format!("{self:?} exceeds the index limits (slots < 2^31, layers <= 65535)"),
            });
        }
        Ok(())
    }

    /// Elements of the whole pool.
    pub fn elems(&self) -> usize {
        self.layers * self.slots * self.dims.state_elems()
    }

    /// Offset of `(layer, slot)`'s `[HV, V, K]` state.
    pub fn offset(&self, layer: usize, slot: usize) -> usize {
        (layer * self.slots + slot) * self.dims.state_elems()
    }
}

/// The shape of a pool for `config` and its element count, checked.
fn checked_shape(config: &ResolvedConfig, dims: HeadDims, layers: usize, slots: usize) -> Result<(PoolShape, usize)> {
    let shape = PoolShape {
        variant: config.kind,
        dims,
        layers,
        slots,
    };
    shape.validate()?;
    let elems = shape
        .layers
        .checked_mul(shape.slots)
        .and_then(|x| x.checked_mul(dims.state_elems()))
        .ok_or_else(|| Error::InvalidValue {
            what: "pool shape",
            why: format!("{shape:?} overflows"),
        })?;
    Ok((shape, elems))
}

/// An f32 checkpoint pool in host memory (the default) or device memory
/// ([`CheckpointPool::new_device`], [`CheckpointPool::to_device`]); zeros at creation.
#[derive(Debug)]
pub struct CheckpointPool<M: Memory = Host> {
    config: ResolvedConfig,
    shape: PoolShape,
    state: M::Vec<f32>,
    id: u64,
}

impl<M: Memory> CheckpointPool<M> {
    fn zeros_in(
        location: Location,
        config: &ResolvedConfig,
        dims: HeadDims,
        layers: usize,
        slots: usize,
    ) -> Result<Self> {
        let (shape, elems) = checked_shape(config, dims, layers, slots)?;
        Self::with_state(config, shape, Storage::alloc(location, elems, false)?)
    }

    fn with_state(config: &ResolvedConfig, shape: PoolShape, state: M::Vec<f32>) -> Result<Self> {
        Ok(CheckpointPool {
            config: config.clone(),
            shape,
            state,
            id: NEXT_POOL_ID.fetch_add(1, Ordering::Relaxed),
        })
    }

    pub fn shape(&self) -> PoolShape {
        self.shape
    }
    pub fn config(&self) -> &ResolvedConfig {
        &self.config
    }
    pub fn role(&self) -> PoolRole {
        self.config.pool_role
    }
    pub fn mode(&self) -> Mode {
        self.config.mode
    }
    /// Where the checkpoints are.
    pub fn location(&self) -> Location {
        self.state.location()
    }
    /// Identity of this pool (rings remember the pool they were attached to).
    pub(crate) fn id(&self) -> u64 {
        self.id
    }
    /// The checkpoints `[NL, NS, HV, V, K]` as stored.
    pub(crate) fn storage(&self) -> &M::Vec<f32> {
        &self.state
    }
    pub(crate) fn storage_mut(&mut self) -> &mut M::Vec<f32> {
        &mut self.state
    }

    /// Checks that a launch's inputs have this pool's layer kind and head dims and that `layer`
    /// exists (shared by every kernel wrapper that reads the pool).
    pub(crate) fn check_inputs(&self, variant: Variant, dims: &HeadDims, layer: usize) -> Result<()> {
        let s = self.shape;
        if variant != s.variant || *dims != s.dims {
            return Err(Error::InvalidValue {
                what: "pool shape",
                why: format!("pool is {} {:?}, inputs are {variant} {dims:?}", s.variant, s.dims),
            });
        }
        crate::checks::params::layer(i64::try_from(layer).unwrap_or(i64::MAX), s.layers as i64)
    }

    fn check_index(&self, layer: usize, slot: usize) -> Result<()> {
        if layer >= self.shape.layers || slot >= self.shape.slots {
            return Err(Error::InvalidValue {
                what: "pool index",
                why: format!(
                    "(layer {layer}, slot {slot}) outside a pool of {} layers x {} slots",
                    self.shape.layers, self.shape.slots
                ),
            });
        }
        Ok(())
    }
}

impl CheckpointPool<Host> {
    /// A pool of `layers` x `slots` checkpoints for `config` (its layer kind sets the variant).
    /// The kernels keep f32 checkpoints; a bf16/f16 `--mamba-ssm-dtype` is served in f32, which
    /// is at least as exact (resolve() says so in its warnings).
    pub fn new(config: &ResolvedConfig, dims: HeadDims, layers: usize, slots: usize) -> Result<Self> {
        Self::zeros_in(Location::Host, config, dims, layers, slots)
    }

    /// The whole pool `[NL, NS, HV, V, K]`.
    pub fn state(&self) -> &[f32] {
        &self.state
    }
    pub fn state_mut(&mut self) -> &mut [f32] {
        &mut self.state
    }

    /// The `[HV, V, K]` checkpoint of `(layer, slot)`.
    pub fn slot_state(&self, layer: usize, slot: usize) -> Result<&[f32]> {
        self.check_index(layer, slot)?;
        let o = self.shape.offset(layer, slot);
        Ok(&self.state[o..o + self.shape.dims.state_elems()])
    }
    pub fn slot_state_mut(&mut self, layer: usize, slot: usize) -> Result<&mut [f32]> {
        self.check_index(layer, slot)?;
        let o = self.shape.offset(layer, slot);
        let n = self.shape.dims.state_elems();
        Ok(&mut self.state[o..o + n])
    }

    /// A copy of this pool in device memory of the stream's backend (an explicit upload; rings
    /// attach to the copy anew).
    pub fn to_device(&self, stream: &Stream) -> Result<CheckpointPool<Device>> {
        let mut pool = CheckpointPool::<Device>::zeros_in(
            Location::Device(stream.backend()),
            &self.config,
            self.shape.dims,
            self.shape.layers,
            self.shape.slots,
        )?;
        pool.state.upload(stream, &self.state)?;
        Ok(pool)
    }
}

impl CheckpointPool<Device> {
    /// A pool of zeros in device memory of `backend` (Cuda, or the emulator's heap).
    pub fn new_device(
        backend: Backend,
        config: &ResolvedConfig,
        dims: HeadDims,
        layers: usize,
        slots: usize,
    ) -> Result<Self> {
        Self::zeros_in(Location::Device(backend), config, dims, layers, slots)
    }

    /// The engine's own checkpoint tensor `[NL, NS, HV, V, K]` f32 at `state` as a pool (its
    /// contents are kept; the library never frees it). The gates hold as for an owned pool.
    ///
    /// # Safety
    /// As [`DeviceVec::from_raw_parts`] for `layers * slots * HV * V * K` f32 at `state`
    /// (16-byte aligned on Cuda).
    pub unsafe fn from_raw_parts(
        backend: Backend,
        config: &ResolvedConfig,
        dims: HeadDims,
        layers: usize,
        slots: usize,
        state: *mut f32,
    ) -> Result<Self> {
        let (shape, elems) = checked_shape(config, dims, layers, slots)?;
        Self::with_state(config, shape, DeviceVec::from_raw_parts(backend, state, elems))
    }

    /// The checkpoints `[NL, NS, HV, V, K]`, for an engine's own kernels.
    pub fn state(&self) -> DeviceSlice<'_, f32> {
        self.state.as_slice()
    }
    pub fn state_mut(&mut self) -> DeviceSliceMut<'_, f32> {
        self.state.as_mut_slice()
    }

    /// Overwrites the checkpoints with `src` (an explicit upload, after the stream's work).
    pub fn upload(&mut self, stream: &Stream, src: &[f32]) -> Result<()> {
        self.state.upload(stream, src)
    }
    /// Copies the checkpoints into `dst` (an explicit download; synchronises the stream).
    pub fn download(&self, stream: &Stream, dst: &mut [f32]) -> Result<()> {
        self.state.download(stream, dst)
    }
    /// A host copy of this pool, same configuration and shape (an explicit download).
    pub fn to_host(&self, stream: &Stream) -> Result<CheckpointPool<Host>> {
        let mut pool = CheckpointPool::new(&self.config, self.shape.dims, self.shape.layers, self.shape.slots)?;
        self.state.download(stream, &mut pool.state)?;
        Ok(pool)
    }
}
