//! The deferred fold's state: a spec ring of two windows per slot and the pending table
//! (`rssm_verify_fold_params` in the C header). Step t's accepted records stay in one half of
//! the ring, unfolded, until step t+1's kernel VF replays them into the checkpoint and verifies
//! the new window (written to the other half) from the state in registers.
//!
//! The pending table is `[NS, 2 + W]` i32, shared by all layers: per slot `n` (records not yet
//! folded), `h` (the half holding them), then their ring positions. Between steps, a slot's
//! checkpoint misses its `n` pending records, so everything that reads or hands out a checkpoint
//! outside the step goes through this type, which refuses while records are pending
//! ([`Error::PendingFold`]): `DeferredRing::flush` (kernel F's path mode,
//! [`crate::kernels::verify_fold`]) makes it current.
//!
//! Protocol per step: every layer's VF ([`crate::kernels::verify_fold`]), then
//! [`DeferredRing::commit`] with the step's accept lengths (on device memory:
//! `Stream::verify_fold`, then `Stream::defer_commit`; the table never leaves the device).

use crate::config::{GateError, SpecCommit};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::limits::MAX_VERIFY_WINDOW;
use crate::memory::{Device, DeviceVec, Host, Memory, Storage, Stream};
use crate::state::pool::CheckpointPool;
use crate::state::spec_ring::{pool_spec_commit, RingShape, SpecRing};

/// A deferred-fold ring: the spec ring (`2 W` positions per slot) and the pending table.
#[derive(Debug)]
pub struct DeferredRing<M: Memory = Host> {
    pub(crate) ring: SpecRing<M>,
    pub(crate) pending: M::Vec<i32>,
    window: usize,
    pool: u64,
}

/// The pool must have been resolved with the deferred fold (design §5 P1, D1).
fn check_deferred_pool<M: Memory>(pool: &CheckpointPool<M>) -> Result<()> {
    pool_spec_commit(
        pool,
        |commit| (commit == SpecCommit::Deferred).then_some(()),
        "with --enable-linear-replayssm-spec but without --linear-replayssm-spec-deferred-fold",
        |got| GateError::DeferredRingWithoutFlag { got },
    )
}

impl<M: Memory> DeferredRing<M> {
    /// The deferred-fold ring of `pool` for draft windows of up to `window` tokens (W), in the
    /// pool's memory; every slot starts with nothing pending. Refused unless the pool was resolved
    /// with `--enable-linear-replayssm-spec --linear-replayssm-spec-deferred-fold`.
    pub fn for_pool(pool: &CheckpointPool<M>, window: usize, dtype: DType, l2norm: bool) -> Result<Self> {
        check_deferred_pool(pool)?;
        if window == 0 || window > MAX_VERIFY_WINDOW {
            return Err(Error::InvalidValue {
                what: "deferred-fold window",
                why: format!("W = {window}, must be in 1..={MAX_VERIFY_WINDOW} (the verify window)"),
            });
        }
        let ring = SpecRing::for_pool(pool, 2 * window, dtype, l2norm)?;
        let slots = pool.shape().slots;
        let len = slots.checked_mul(2 + window).ok_or(Error::Alloc {
            buffer: "pending table",
            bytes: u64::MAX,
        })?;
        Ok(DeferredRing {
            ring,
            pending: Storage::alloc(pool.location(), len, false)?,
            window,
            pool: pool.id(),
        })
    }

    /// The draft window W (one half of the ring).
    pub fn window(&self) -> usize {
        self.window
    }
    /// The spec ring (its `window` is 2 W).
    pub fn ring(&self) -> &SpecRing<M> {
        &self.ring
    }
    pub fn shape(&self) -> RingShape {
        self.ring.shape
    }
    /// i32 words per slot of the pending table (`2 + W`).
    pub fn entry_len(&self) -> usize {
        2 + self.window
    }

    pub(crate) fn check_pool(&self, pool: &CheckpointPool<M>) -> Result<()> {
        if pool.id() != self.pool {
            return Err(Error::ForeignPool {
                what: "the deferred-fold ring",
            });
        }
        Ok(())
    }

    pub(crate) fn check_slot(&self, slot: usize) -> Result<()> {
        let n = self.ring.shape.slots;
        if slot >= n {
            return Err(Error::InvalidValue {
                what: "slot",
                why: format!("slot {slot} is outside the pool's {n} slots"),
            });
        }
        Ok(())
    }
}

impl DeferredRing<Host> {
    fn entry(&self, slot: usize) -> &[i32] {
        let e = self.entry_len();
        &self.pending[slot * e..(slot + 1) * e]
    }

    /// Records of `slot` not yet folded into its checkpoint.
    pub fn pending(&self, slot: usize) -> Result<usize> {
        self.check_slot(slot)?;
        Ok(self.entry(slot)[0].max(0) as usize)
    }

    /// The ring positions of `slot`'s pending records, in replay order.
    pub fn pending_positions(&self, slot: usize) -> Result<&[i32]> {
        let n = self.pending(slot)?.min(self.window);
        Ok(&self.entry(slot)[2..2 + n])
    }

    fn refuse_pending(&self, slot: usize, action: &'static str) -> Result<()> {
        let pending = self.pending(slot)?;
        if pending != 0 {
            return Err(Error::PendingFold { slot, pending, action });
        }
        Ok(())
    }

    /// The checkpoint of `(layer, slot)`, refused while records are pending (it would miss them).
    pub fn checkpoint<'p>(&self, pool: &'p CheckpointPool, layer: usize, slot: usize) -> Result<&'p [f32]> {
        self.check_pool(pool)?;
        self.refuse_pending(slot, "reading its checkpoint")?;
        pool.slot_state(layer, slot)
    }

    /// A slot handed to a new request: refused while records of the previous one are pending
    /// ([`DeferredRing::release`] drops them, [`DeferredRing::flush`] folds them).
    pub fn allocate(&mut self, slot: usize) -> Result<()> {
        self.refuse_pending(slot, "handing the slot to a new request")
    }

    /// A finished request's slot: its pending records are dropped with its state.
    pub fn release(&mut self, slot: usize) -> Result<()> {
        self.check_slot(slot)?;
        let e = self.entry_len();
        self.pending[slot * e] = 0;
        Ok(())
    }

    /// Copy-on-write of a cached prefix: `src`'s checkpoint (every layer) into `dst`. Both must
    /// have nothing pending: `src` would be copied without its records, `dst`'s would be replayed
    /// onto a state they do not follow.
    pub fn copy_slot(&mut self, pool: &mut CheckpointPool, src: usize, dst: usize) -> Result<()> {
        self.check_pool(pool)?;
        self.refuse_pending(src, "copying from it")?;
        self.refuse_pending(dst, "copying into it")?;
        if src != dst {
            let s = pool.shape();
            let n = s.dims.state_elems();
            for layer in 0..s.layers {
                let (a, b) = (s.offset(layer, src), s.offset(layer, dst));
                pool.state_mut().copy_within(a..a + n, b);
            }
        }
        Ok(())
    }

    /// Live rows of a table operation: distinct slots in range (-1 = null row).
    pub(crate) fn check_rows(&self, slots: &[i32]) -> Result<()> {
        crate::checks::check_slots(slots, slots.len(), self.ring.shape.slots)
    }

    /// Once per step, after the step's last layer's VF (not after each layer): each live row's
    /// slot now holds, pending, the first `accept_lens[b]` records (0..=W, bonus token included)
    /// of the window VF just wrote.
    pub fn commit(&mut self, slots: &[i32], accept_lens: &[i32]) -> Result<()> {
        self.check_rows(slots)?;
        crate::checks::check_count("accept_lens", accept_lens.len(), slots.len(), "one per request")?;
        let w = self.window as i32;
        crate::checks::indices::lengths("accept_lens", accept_lens, slots, w)?;
        for (b, &slot) in slots.iter().enumerate().filter(|(_, &s)| s >= 0) {
            let n = accept_lens[b] as usize;
            self.commit_entry(slot as usize, (0..n).map(|i| i as i32));
        }
        Ok(())
    }

    pub(crate) fn commit_entry(&mut self, slot: usize, window_positions: impl Iterator<Item = i32>) {
        let (w, e) = (self.window, self.entry_len());
        let entry = &mut self.pending[slot * e..(slot + 1) * e];
        let next = 1 - entry[1].clamp(0, 1);
        entry[2..].fill(-1);
        let mut n = 0;
        for (i, p) in window_positions.enumerate() {
            entry[2 + i] = next * w as i32 + p;
            n += 1;
        }
        entry[0] = n;
        entry[1] = next;
    }

    /// A copy in device memory of the stream's backend (an explicit upload).
    pub fn to_device(&self, stream: &Stream, pool: &CheckpointPool<Device>) -> Result<DeferredRing<Device>> {
        let ring = self.ring.to_device(stream)?;
        Ok(DeferredRing {
            ring,
            pending: DeviceVec::from_host(stream, &self.pending)?,
            window: self.window,
            pool: pool.id(),
        })
    }
}

impl DeferredRing<Device> {
    /// A host copy (an explicit download; synchronises the stream), attached to `pool` (the host
    /// copy of this ring's pool).
    pub fn to_host(&self, stream: &Stream, pool: &CheckpointPool) -> Result<DeferredRing<Host>> {
        Ok(DeferredRing {
            ring: self.ring.to_host(stream)?,
            pending: self.pending.to_vec(stream)?,
            window: self.window,
            pool: pool.id(),
        })
    }

    /// Each slot's pending-record count (an explicit download; synchronises the stream).
    pub fn pending_counts(&self, stream: &Stream) -> Result<Vec<usize>> {
        let table = self.pending.to_vec(stream)?;
        Ok(table
            .chunks_exact(self.entry_len())
            .map(|e| e[0].max(0) as usize)
            .collect())
    }

    /// Refuses (as the host ring does) when any of `slots` has pending records: before reading,
    /// copying or handing out their checkpoints outside the step. Synchronises the stream.
    pub fn check_flushed(&self, stream: &Stream, slots: &[usize], action: &'static str) -> Result<()> {
        let counts = self.pending_counts(stream)?;
        for &slot in slots {
            self.check_slot(slot)?;
            if counts[slot] != 0 {
                return Err(Error::PendingFold {
                    slot,
                    pending: counts[slot],
                    action,
                });
            }
        }
        Ok(())
    }
}
