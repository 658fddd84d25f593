//! The buffered speculative mode's state: a spec ring of L positions per slot (the cache length)
//! and the cursors (`rssm_verify_buffered_params` in the kernel header). A slot's accepted history
//! (records at ring positions `0..h`) stays in the ring, unfolded, until the step whose commit
//! leaves no room for the next window: that commit writes the history's length into the flush
//! lengths, and kernel F (prefix mode) folds it into the checkpoint.
//!
//! The cursors are `[NS]` i32, shared by all layers: per slot `h`, the records not yet in its
//! checkpoint. Between steps a slot's checkpoint misses its `h` records, so reading, copying or
//! handing out a checkpoint outside the step needs [`BufferedRing::check_flushed`] first
//! ([`crate::Error::PendingHistory`]); `Stream::buffered_fold` with `BufferedFold::Flush` makes it
//! current.
//!
//! Protocol per step (device memory, no host round trip: CUDA-graph capturable): every layer's
//! `Stream::verify_buffered`, then `Stream::buffered_fold` with `BufferedFold::Commit` and the
//! step's accept lengths (the cursor kernel, then kernel F on the flush lengths it wrote; rows
//! that do not flush fold nothing). A flush and `buffered_reset` run between steps only, never
//! between one layer's VB and the commit.

use crate::checks::params::{buffered_block_rows, buffered_cache_len, buffered_window};
use crate::config::{GateError, SpecCommit};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::memory::{Device, Memory, Storage, Stream};
use crate::state::pool::CheckpointPool;
use crate::state::spec_ring::{pool_spec_commit, RingShape, SpecRing};

/// A buffered spec ring: the spec ring (L positions per slot), each record's correction u (f32,
/// `[layers][slots][HV][L][V]`, written and read by VB only) and the cursors.
#[derive(Debug)]
pub struct BufferedRing<M: Memory = Device> {
    pub(crate) ring: SpecRing<M>,
    pub(crate) ring_u: M::Vec<f32>,
    pub(crate) cursors: M::Vec<i32>,
    window: usize,
    pool: u64,
}

/// The pool must have been resolved with the buffered speculative mode (design §5 P1, E1).
fn buffered_pool_cache_len<M: Memory>(pool: &CheckpointPool<M>) -> Result<usize> {
    pool_spec_commit(
        pool,
        |commit| match commit {
            SpecCommit::Buffered { cache_len } => Some(cache_len),
            _ => None,
        },
        "with --enable-linear-replayssm-spec but without --linear-replayssm-spec-buffered",
        |got| GateError::BufferedSpecRingWithoutFlag { got },
    )
}

impl<M: Memory> BufferedRing<M> {
    /// The buffered ring of `pool` for draft windows of up to `window` tokens (T), in the pool's
    /// memory, with the pool's cache length L (`--linear-replayssm-cache-len`); every slot starts
    /// with an empty history. Refused unless the pool was resolved with
    /// `--enable-linear-replayssm-spec --linear-replayssm-spec-buffered`, and unless L >= 2 T.
    pub fn for_pool(pool: &CheckpointPool<M>, window: usize, dtype: DType, l2norm: bool) -> Result<Self> {
        let cache_len = buffered_pool_cache_len(pool)?;
        buffered_window(window.try_into().unwrap_or(i64::MAX))?;
        buffered_cache_len(cache_len as i64, window as i64)?;
        let s = pool.shape();
        buffered_block_rows(
            window,
            cache_len,
            s.dims.k,
            s.dims.v,
            s.variant == crate::problem::Variant::Kda,
        )
        .map_err(Error::BadParam)?;
        let ring = SpecRing::for_pool(pool, cache_len, dtype, l2norm)?;
        let s = ring.shape;
        let u_len = s.layers * s.slots * s.dims.hv * s.window * s.dims.v;
        Ok(BufferedRing {
            ring,
            // Poisoned: VB reads only the corrections it wrote (a history's records).
            ring_u: Storage::alloc(pool.location(), u_len, true)?,
            cursors: Storage::alloc(pool.location(), pool.shape().slots, false)?,
            window,
            pool: pool.id(),
        })
    }

    /// The draft window T (the longest window of a step).
    pub fn window(&self) -> usize {
        self.window
    }
    /// The cache length L (ring positions per slot).
    pub fn cache_len(&self) -> usize {
        self.ring.shape.window
    }
    /// The spec ring (its `window` is L).
    pub fn ring(&self) -> &SpecRing<M> {
        &self.ring
    }
    pub fn shape(&self) -> RingShape {
        self.ring.shape
    }
    /// Each record's correction u (`[layers][slots][HV][L][V]` f32): what a caller of the C ABI
    /// (`replayssm_verify_buffered`'s `ring_u`) holds; read it to compare or to move a history.
    pub fn ring_u(&self) -> &M::Vec<f32> {
        &self.ring_u
    }
    /// The cursors (`[NS]` i32, each slot's history length h).
    pub fn cursors(&self) -> &M::Vec<i32> {
        &self.cursors
    }

    pub(crate) fn check_pool(&self, pool: &CheckpointPool<M>) -> Result<()> {
        if pool.id() != self.pool {
            return Err(Error::ForeignPool {
                what: "the buffered spec ring",
            });
        }
        Ok(())
    }
}

impl BufferedRing<Device> {
    /// Each slot's history length h (an explicit download; synchronises the stream).
    pub fn histories(&self, stream: &Stream) -> Result<Vec<usize>> {
        Ok(self
            .cursors
            .to_vec(stream)?
            .iter()
            .map(|&h| h.max(0) as usize)
            .collect())
    }

    /// Replaces every slot's cursor with `cursors` (`[NS]`; an explicit upload): a history restored
    /// from elsewhere. Nothing checks the values here: the kernels do, on the device (a cursor
    /// outside `0..=L - T` is flagged and its row skipped), and on the emulator before the launch.
    pub fn upload_cursors(&mut self, stream: &Stream, cursors: &[i32]) -> Result<()> {
        crate::checks::check_count("cursors", cursors.len(), self.ring.shape.slots, "one per slot")?;
        // In place: the buffer's address is what a captured graph holds.
        self.cursors.upload(stream, cursors)
    }

    /// Refuses when any of `slots` has a history not yet in its checkpoint: before reading,
    /// copying or handing out their checkpoints outside the step. Synchronises the stream.
    pub fn check_flushed(&self, stream: &Stream, slots: &[usize], action: &'static str) -> Result<()> {
        let h = self.histories(stream)?;
        for &slot in slots {
            let Some(&pending) = h.get(slot) else {
                return Err(Error::InvalidValue {
                    what: "slot",
                    why: format!("slot {slot} is outside the pool's {} slots", h.len()),
                });
            };
            if pending != 0 {
                return Err(Error::PendingHistory { slot, pending, action });
            }
        }
        Ok(())
    }
}
