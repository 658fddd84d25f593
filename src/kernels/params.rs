//! The params base (`rssm_base_params`) and the spec ring part (`rssm_ring_params`) of every
//! kernel's params, filled here once; the token part is [`crate::tokens::token_params`].

use crate::dtype::DType;
use crate::error::Result;
use crate::ffi;
use crate::memory::Memory;
use crate::problem::{HeadDims, Variant};
use crate::runtime::launch::Exec;
use crate::state::pool::CheckpointPool;
use crate::state::spec_ring::SpecRing;

/// What a launch's params base says, before it becomes `rssm_base_params`.
pub(crate) struct Base {
    /// The pool's first element (already checked reachable by the launch).
    pub state: *mut f32,
    /// `[batch]` slots (already checked reachable).
    pub slots: *const i32,
    pub batch: usize,
    pub num_slots: usize,
    pub num_layers: usize,
    pub layer: usize,
    pub dims: HeadDims,
    pub dtype: DType,
    pub variant: Variant,
    pub qk_l2norm: bool,
}

impl Base {
    /// The base with the launch's error word, packed pool pitches (the safe API's pools are) and
    /// the default implementation (`tuning` picks another afterwards).
    pub fn to_ffi(&self, exec: &Exec) -> ffi::rssm_base_params {
        ffi::rssm_base_params {
            state: self.state,
            slots: self.slots,
            error_word: exec.word,
            batch: self.batch as i32,
            num_slots: self.num_slots as i32,
            num_layers: self.num_layers as i32,
            layer: self.layer as i32,
            H: self.dims.h as i32,
            HV: self.dims.hv as i32,
            K: self.dims.k as i32,
            V: self.dims.v as i32,
            dtype: self.dtype.to_ffi(),
            variant: self.variant.to_ffi(),
            qk_l2norm: self.qk_l2norm as i32,
            ..Default::default()
        }
    }
}

/// A spec ring read by F and P (the params carry mutable pointers; these kernels only read).
pub(crate) fn ring_read<M: Memory>(exec: &Exec, ring: &SpecRing<M>) -> Result<ffi::rssm_ring_params> {
    Ok(ffi::rssm_ring_params {
        v: exec.act("ring.v", &ring.v)?.cast_mut(),
        k: exec.act("ring.k", &ring.k)?.cast_mut(),
        g: exec.store("ring.g", &ring.g)?.cast_mut(),
        beta: exec.store("ring.beta", &ring.beta)?.cast_mut(),
        window: ring.shape.window as i32,
        reserved: 0,
    })
}

/// A spec ring written by V and VF; no ring: null pointers and a window of 1.
pub(crate) fn ring_write<M: Memory>(exec: &Exec, ring: Option<&mut SpecRing<M>>) -> Result<ffi::rssm_ring_params> {
    Ok(match ring {
        Some(r) => ffi::rssm_ring_params {
            v: exec.act_mut("ring.v", &mut r.v)?.cast(),
            k: exec.act_mut("ring.k", &mut r.k)?.cast(),
            g: exec.store_mut("ring.g", &mut r.g)?,
            beta: exec.store_mut("ring.beta", &mut r.beta)?,
            window: r.shape.window as i32,
            reserved: 0,
        },
        None => ffi::rssm_ring_params {
            window: 1,
            ..Default::default()
        },
    })
}

/// The base and ring parts of a replay from the spec ring (F over every layer: `layer` 0; P: its
/// layer): the pool, the batch's slots and the ring's shape.
pub(crate) fn ring_replay<M: Memory>(
    exec: &Exec,
    pool: &mut CheckpointPool<M>,
    ring: &SpecRing<M>,
    slots: &M::Slice<'_, i32>,
    layer: usize,
) -> Result<(ffi::rssm_base_params, ffi::rssm_ring_params)> {
    let s = ring.shape;
    let base = Base {
        state: exec.store_mut("pool", pool.storage_mut())?,
        slots: exec.slice("slots", slots)?,
        batch: crate::memory::SliceRef::len(slots),
        num_slots: s.slots,
        num_layers: s.layers,
        layer,
        dims: s.dims,
        dtype: s.dtype,
        variant: s.variant,
        qk_l2norm: ring.l2norm,
    };
    Ok((base.to_ffi(exec), ring_read(exec, ring)?))
}
