//! The spec ring (SPEC §2): per layer and slot, the raw inputs of the last verify window.

use crate::config::{GateError, Mode};
use crate::dtype::{ActBuffer, DType};
use crate::error::{Error, Result};
use crate::problem::{HeadDims, Variant};
use crate::state::pool::CheckpointPool;

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
        if self.slots > i32::MAX as usize || self.layers > 65535 || self.window > 1 << 16 {
            return Err(Error::InvalidValue {
                what: "ring shape",
                why: format!("{self:?} exceeds the index limits"),
            });
        }
        Ok(())
    }

    /// Elements of the checkpoint pool `[NL, NS, HV, V, K]`.
    pub fn pool_elems(&self) -> usize {
        self.layers * self.slots * self.dims.state_elems()
    }

    /// Offset of (layer, slot) in the pool.
    pub fn pool_offset(&self, layer: usize, slot: usize) -> usize {
        (layer * self.slots + slot) * self.dims.state_elems()
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

/// An owned spec ring on the host, poisoned with NaN at creation so that a record that was
/// never written cannot pass for data.
#[derive(Clone, Debug)]
pub struct SpecRing {
    pub shape: RingShape,
    /// `[NL, NS, HV, W, V]` raw values.
    pub v: ActBuffer,
    /// `[NL, NS, H, W, K]` raw keys (before L2 norm).
    pub k: ActBuffer,
    /// `[NL, NS, HV, W]` (KDA: `[.., K]`) log decays.
    pub g: Vec<f32>,
    /// `[NL, NS, HV, W]`.
    pub beta: Vec<f32>,
    /// Whether the layer normalises keys (SPEC §3 step 3): a replay must do as the verify did.
    pub l2norm: bool,
}

impl SpecRing {
    /// The spec ring of `pool` with window `W` and act dtype `dtype`: refused (SPEC §5 P1)
    /// unless the pool was resolved with `--enable-linear-replayssm-spec`.
    pub fn for_pool(pool: &CheckpointPool, window: usize, dtype: DType, l2norm: bool) -> Result<Self> {
        if pool.mode() != Mode::Spec {
            return Err(GateError::SpecRingWithoutSpec {
                mode: match pool.mode() {
                    Mode::Off => "off",
                    Mode::Buffered { .. } => "buffered decode",
                    Mode::Spec => "spec",
                },
            }
            .into());
        }
        let p = pool.shape();
        SpecRing::new(
            RingShape {
                variant: p.variant,
                dims: p.dims,
                dtype,
                layers: p.layers,
                slots: p.slots,
                window,
            },
            l2norm,
        )
    }

    pub fn new(shape: RingShape, l2norm: bool) -> Result<Self> {
        shape.validate()?;
        let d = shape.dims;
        let ls = shape.layers * shape.slots * shape.window;
        Ok(SpecRing {
            shape,
            v: ActBuffer::nan(shape.dtype, ls * d.hv * d.v),
            k: ActBuffer::nan(shape.dtype, ls * d.h * d.k),
            g: vec![f32::NAN; ls * d.hv * d.gate_width(shape.variant)],
            beta: vec![f32::NAN; ls * d.hv],
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

/// The pool must serve the spec ring (SPEC §5 P1).
pub(crate) fn check_spec_pool(pool: &CheckpointPool) -> Result<()> {
    match pool.mode() {
        Mode::Spec => Ok(()),
        Mode::Off => Err(GateError::SpecRingWithoutSpec { mode: "off" }.into()),
        Mode::Buffered { .. } => Err(GateError::SpecRingWithoutSpec {
            mode: "buffered decode",
        }
        .into()),
    }
}

/// The ring must have been built for this pool's geometry (variant, head dims, layers, slots).
pub(crate) fn check_ring_matches(ring: &SpecRing, pool: &CheckpointPool) -> Result<()> {
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
