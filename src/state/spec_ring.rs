//! The spec ring (design §2): per layer and slot, the raw inputs of the last verify window.

use crate::config::{GateError, Mode, SpecCommit};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::memory::{ActStorage, Device, DeviceAct, DeviceVec, Host, Location, Memory, Storage, Stream};
use crate::problem::{HeadDims, Variant};
use crate::state::pool::{CheckpointPool, PoolShape};

/// Geometry of a checkpoint pool and its spec ring: `layers` x `slots` x window `W`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingShape {
    pub variant: Variant,
    pub dims: HeadDims,
    pub dtype: DType,
    pub layers: usize,
    pub slots: usize,
    pub window: usize,
}

impl RingShape {
    pub fn validate(&self) -> Result<()> {
        self.dims.validate()?;
        if self.layers == 0 || self.slots == 0 || self.window == 0 {
            return Err(Error::InvalidValue {
                what: "ring shape",
                why: format!(
                    "layers ({}), slots ({}) and window ({}) must be positive",
                    self.layers, self.slots, self.window
                ),
            });
        }
        self.pool().validate()?;
        if self.window > 1 << 16 {
            return Err(Error::InvalidValue {
                what: "ring shape",
                why: format!("window = {} exceeds the index limit 65536", self.window),
            });
        }
        Ok(())
    }

    /// The ring of a pool of shape `pool`, with window `W` and act dtype `dtype`.
    pub fn of_pool(pool: PoolShape, window: usize, dtype: DType) -> RingShape {
        RingShape {
            variant: pool.variant,
            dims: pool.dims,
            dtype,
            layers: pool.layers,
            slots: pool.slots,
            window,
        }
    }

    /// The shape of the checkpoint pool `[NL, NS, HV, V, K]` the ring belongs to.
    pub fn pool(&self) -> PoolShape {
        PoolShape {
            variant: self.variant,
            dims: self.dims,
            layers: self.layers,
            slots: self.slots,
        }
    }

    /// Elements of the checkpoint pool.
    pub fn pool_elems(&self) -> usize {
        self.pool().elems()
    }

    /// Offset of (layer, slot) in the pool.
    pub fn pool_offset(&self, layer: usize, slot: usize) -> usize {
        self.pool().offset(layer, slot)
    }

    fn ls(&self, layer: usize, slot: usize) -> usize {
        layer * self.slots + slot
    }

    /// Index of `rawv[layer, slot, hv, t, 0]`.
    pub fn v_index(&self, layer: usize, slot: usize, hv: usize, t: usize) -> usize {
        ((self.ls(layer, slot) * self.dims.hv + hv) * self.window + t) * self.dims.v
    }
    /// Index of `rawk[layer, slot, h, t, 0]`.
    pub fn k_index(&self, layer: usize, slot: usize, h: usize, t: usize) -> usize {
        ((self.ls(layer, slot) * self.dims.h + h) * self.window + t) * self.dims.k
    }
    /// Index of `g[layer, slot, hv, t, 0]` (one element for GDN, K for KDA).
    pub fn g_index(&self, layer: usize, slot: usize, hv: usize, t: usize) -> usize {
        self.beta_index(layer, slot, hv, t) * self.dims.gate_width(self.variant)
    }
    /// Index of `beta[layer, slot, hv, t]`.
    pub fn beta_index(&self, layer: usize, slot: usize, hv: usize, t: usize) -> usize {
        (self.ls(layer, slot) * self.dims.hv + hv) * self.window + t
    }
}

/// A spec ring in host memory (the default) or device memory (attached to a device pool),
/// poisoned with NaN at creation so that a record that was never written cannot pass for data.
#[derive(Debug)]
pub struct SpecRing<M: Memory = Host> {
    pub shape: RingShape,
    /// `[NL, NS, HV, W, V]` raw values.
    pub v: M::Act,
    /// `[NL, NS, H, W, K]` raw keys (before L2 norm).
    pub k: M::Act,
    /// `[NL, NS, HV, W]` (KDA: `[.., K]`) log decays.
    pub g: M::Vec<f32>,
    /// `[NL, NS, HV, W]`.
    pub beta: M::Vec<f32>,
    /// Whether the layer normalises keys (design §3 step 3): a replay must do as the verify did.
    pub l2norm: bool,
}

impl Clone for SpecRing<Host> {
    fn clone(&self) -> Self {
        SpecRing {
            shape: self.shape,
            v: self.v.clone(),
            k: self.k.clone(),
            g: self.g.clone(),
            beta: self.beta.clone(),
            l2norm: self.l2norm,
        }
    }
}

impl<M: Memory> SpecRing<M> {
    /// The spec ring of `pool`, in the pool's memory, with window `W` and act dtype `dtype`:
    /// refused (design §5 P1) unless the pool was resolved with `--enable-linear-replayssm-spec`.
    pub fn for_pool(pool: &CheckpointPool<M>, window: usize, dtype: DType, l2norm: bool) -> Result<Self> {
        check_spec_pool(pool)?;
        Self::poisoned_in(pool.location(), RingShape::of_pool(pool.shape(), window, dtype), l2norm)
    }

    fn poisoned_in(location: Location, shape: RingShape, l2norm: bool) -> Result<Self> {
        shape.validate()?;
        let d = shape.dims;
        let ls = shape.layers * shape.slots * shape.window;
        Ok(SpecRing {
            shape,
            v: ActStorage::alloc_poisoned(location, shape.dtype, ls * d.hv * d.v)?,
            k: ActStorage::alloc_poisoned(location, shape.dtype, ls * d.h * d.k)?,
            g: Storage::alloc(location, ls * d.hv * d.gate_width(shape.variant), true)?,
            beta: Storage::alloc(location, ls * d.hv, true)?,
            l2norm,
        })
    }

    /// Checks that the buffers still have the sizes of the shape (they are public fields).
    pub(crate) fn check(&self) -> Result<()> {
        let s = self.shape;
        s.validate()?;
        let d = s.dims;
        let ls = s.layers * s.slots * s.window;
        for (tensor, got, want) in [
            ("ring.v", self.v.len(), ls * d.hv * d.v),
            ("ring.k", self.k.len(), ls * d.h * d.k),
            ("ring.g", self.g.len(), ls * d.hv * d.gate_width(s.variant)),
            ("ring.beta", self.beta.len(), ls * d.hv),
        ] {
            if got != want {
                return Err(Error::Shape {
                    tensor,
                    expected: format!("{want} elements for {s:?}"),
                    got: format!("{got} elements"),
                });
            }
        }
        if self.v.dtype() != s.dtype || self.k.dtype() != s.dtype {
            return Err(Error::DType {
                tensor: "ring.v/ring.k",
                expected: s.dtype,
                got: if self.v.dtype() != s.dtype {
                    self.v.dtype()
                } else {
                    self.k.dtype()
                },
            });
        }
        Ok(())
    }
}

impl SpecRing<Host> {
    /// A host ring of `shape` (for a host pool of the same geometry).
    pub fn new(shape: RingShape, l2norm: bool) -> Result<Self> {
        Self::poisoned_in(Location::Host, shape, l2norm)
    }

    /// A copy in device memory of the stream's backend (an explicit upload).
    pub fn to_device(&self, stream: &Stream) -> Result<SpecRing<Device>> {
        Ok(SpecRing {
            shape: self.shape,
            v: DeviceAct::from_host(stream, &self.v)?,
            k: DeviceAct::from_host(stream, &self.k)?,
            g: DeviceVec::from_host(stream, &self.g)?,
            beta: DeviceVec::from_host(stream, &self.beta)?,
            l2norm: self.l2norm,
        })
    }
}

impl SpecRing<Device> {
    /// The engine's own ring buffers for `pool` (window `W`, act dtype `dtype`): raw values
    /// `v [NL, NS, HV, W, V]` and keys `k [NL, NS, H, W, K]` of `dtype`, `g [NL, NS, HV, W]`
    /// (KDA `[.., K]`) and `beta [NL, NS, HV, W]` f32. Refused as [`SpecRing::for_pool`] is.
    ///
    /// # Safety
    /// As [`DeviceVec::from_raw_parts`] for each buffer at the extent above, on the pool's backend.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn from_raw_parts(
        pool: &CheckpointPool<Device>,
        window: usize,
        dtype: DType,
        l2norm: bool,
        v: *mut std::ffi::c_void,
        k: *mut std::ffi::c_void,
        g: *mut f32,
        beta: *mut f32,
    ) -> Result<Self> {
        check_spec_pool(pool)?;
        let Location::Device(backend) = pool.location() else {
            unreachable!("a device pool is in device memory")
        };
        let shape = RingShape::of_pool(pool.shape(), window, dtype);
        shape.validate()?;
        let d = shape.dims;
        let ls = shape.layers * shape.slots * shape.window;
        Ok(SpecRing {
            shape,
            v: DeviceAct::from_raw_parts(backend, dtype, v, ls * d.hv * d.v),
            k: DeviceAct::from_raw_parts(backend, dtype, k, ls * d.h * d.k),
            g: DeviceVec::from_raw_parts(backend, g, ls * d.hv * d.gate_width(shape.variant)),
            beta: DeviceVec::from_raw_parts(backend, beta, ls * d.hv),
            l2norm,
        })
    }

    /// A host copy (an explicit download; synchronises the stream).
    pub fn to_host(&self, stream: &Stream) -> Result<SpecRing<Host>> {
        Ok(SpecRing {
            shape: self.shape,
            v: self.v.to_host(stream)?,
            k: self.k.to_host(stream)?,
            g: self.g.to_vec(stream)?,
            beta: self.beta.to_vec(stream)?,
            l2norm: self.l2norm,
        })
    }
}

/// What a ring kept between steps (the deferred fold's, the buffered mode's) needs from its pool's
/// commit form (design §5 P1): `pick` takes it from the form the pool was resolved for, or says
/// the pool lacks the ring's flag; `refuse` is the ring's P1 refusal.
pub(crate) fn pool_spec_commit<M: Memory, T>(
    pool: &CheckpointPool<M>,
    pick: impl Fn(SpecCommit) -> Option<T>,
    without_flag: &'static str,
    refuse: fn(&'static str) -> GateError,
) -> Result<T> {
    match pool.mode() {
        Mode::Spec { commit } => pick(commit).ok_or_else(|| refuse(without_flag).into()),
        _ => Err(refuse("without --enable-linear-replayssm-spec").into()),
    }
}

/// The pool must serve the spec ring (design §5 P1).
pub(crate) fn check_spec_pool<M: Memory>(pool: &CheckpointPool<M>) -> Result<()> {
    match pool.mode() {
        Mode::Spec { .. } => Ok(()),
        Mode::Off => Err(GateError::SpecRingWithoutSpec { mode: "off" }.into()),
        Mode::Buffered { .. } => Err(GateError::SpecRingWithoutSpec {
            mode: "buffered decode",
        }
        .into()),
    }
}

/// The ring must have been built for this pool's geometry (variant, head dims, layers, slots).
pub(crate) fn check_ring_matches<M: Memory>(ring: &SpecRing<M>, pool: &CheckpointPool<M>) -> Result<()> {
    ring.check()?;
    let (r, p) = (ring.shape, pool.shape());
    if r.variant != p.variant || r.dims != p.dims || r.layers != p.layers || r.slots != p.slots {
        return Err(Error::InvalidValue {
            what: "spec ring",
            why: format!("ring shape {r:?} does not match the pool's {p:?}"),
        });
    }
    Ok(())
}
