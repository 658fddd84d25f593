//! The buffered-decode ring of a pool (design §4 D, `--enable-linear-replayssm`) and its cursor
//! protocol: [`DecodeRing::begin_step`] snapshots each row's cursor, kernel D
//! ([`crate::kernels::decode`]) runs once per layer, [`DecodeRing::finish_step`] advances the
//! cursors (outside any captured graph). A ring attaches only to a pool resolved with buffered
//! decode on a local pool (design §5 P1), so no code path can produce a ring on a disaggregated
//! pool.

use std::ffi::c_void;

use crate::checks::check_slots;
use crate::config::{GateError, Mode, PoolRole};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::memory::{ActStorage, Device, DeviceAct, DeviceVec, Host, Location, Memory, Storage, Stream};
use crate::state::pool::{CheckpointPool, PoolShape};

/// When a step must flush a row's checkpoint besides the periodic flush at `m == L - 1`.
#[derive(Clone, Copy, Debug)]
pub enum ForceFlush<'a> {
    None,
    /// One flag per row.
    Rows(&'a [bool]),
    /// Radix prefix caching: flush when the sequence length after this step's token is a
    /// multiple of the track interval, so a snapshot of the checkpoint is never stale.
    TrackInterval {
        seq_lens_after: &'a [u64],
        interval: u64,
    },
}

/// The cursor snapshot of one forward: every layer's [`decode`](crate::decode) reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodeStep {
    pub(crate) slots: Vec<i32>,
    pub(crate) positions: Vec<i32>,
    pub(crate) force_flush: Vec<i32>,
    /// `0..=B`: one token per row, as kernel D's token checks read it.
    pub(crate) cu_seqlens: Vec<i32>,
    pub(crate) generation: u64,
    pub(crate) ring: u64,
}

impl Default for DecodeStep {
    /// An empty step that belongs to no ring (for [`DecodeRing::begin_step_into`]).
    fn default() -> Self {
        DecodeStep {
            slots: Vec::new(),
            positions: Vec::new(),
            force_flush: Vec::new(),
            cu_seqlens: Vec::new(),
            generation: 0,
            ring: u64::MAX,
        }
    }
}

impl DecodeStep {
    pub fn slots(&self) -> &[i32] {
        &self.slots
    }
    /// Each row's cursor `m` (pending records before this token); 0 for null rows.
    pub fn positions(&self) -> &[i32] {
        &self.positions
    }
    pub fn batch(&self) -> usize {
        self.slots.len()
    }
    /// Each row's force-flush flag (0 or 1).
    pub fn force_flush(&self) -> &[i32] {
        &self.force_flush
    }
}

/// The buffered-decode ring of a pool: `d [NL, NS, HV, L, V]` and `k [NL, NS, H, L, K]` of the
/// ring's record dtype ([`DecodeRing::record_dtype`]: f32, or f16/bf16 rounded to nearest even as
/// SGLang's bf16 rings are), `g [NL, NS, HV, L]` (KDA `[.., K]`) f32, and one cursor per slot,
/// in the pool's memory. An f32 ring's flush is kernel R's state bit for bit; an f16/bf16 ring's
/// is the state of R run with the same record dtype ([`crate::recurrent_with_records`]).
/// On the host the cursor protocol is [`DecodeRing::begin_step`] / [`DecodeRing::finish_step`];
/// on the device the cursors stay there and the stream's `decode_snapshot` / `decode_advance`
/// move them (a captured graph replays the whole step with no host round trip).
#[derive(Debug)]
pub struct DecodeRing<M: Memory = Host> {
    pub(crate) shape: PoolShape,
    pub(crate) cache_len: usize,
    /// Of the record dtype.
    pub(crate) d: M::Act,
    /// Of the record dtype.
    pub(crate) k: M::Act,
    pub(crate) g: M::Vec<f32>,
    /// One cursor per slot: pending records `m`.
    pub(crate) write_pos: M::Vec<i32>,
    /// Bumped on every cursor change, so a step taken before it cannot be used after.
    pub(crate) generation: u64,
    pub(crate) pool: u64,
    pub(crate) id: u64,
}

/// `records x per_record` elements, allocated fallibly where `location` says by `alloc`: the
/// ring is sized by slots x cache length, which callers (case files) control, so a failed
/// allocation must be an error naming the buffer, not an abort.
fn ring_alloc<S>(
    buffer: &'static str,
    records: usize,
    per_record: usize,
    alloc: impl FnOnce(usize) -> Result<S>,
) -> Result<S> {
    let len = records.checked_mul(per_record).ok_or(Error::Alloc {
        buffer,
        bytes: u64::MAX,
    })?;
    alloc(len).map_err(|e| match e {
        Error::Alloc { bytes, .. } => Error::Alloc { buffer, bytes },
        e => e,
    })
}

fn ring_buffer<T: crate::dtype::Pod + std::fmt::Debug + Send + Sync, S: Storage<T>>(
    location: Location,
    buffer: &'static str,
    records: usize,
    per_record: usize,
    poison: bool,
) -> Result<S> {
    ring_alloc(buffer, records, per_record, |len| S::alloc(location, len, poison))
}

/// Record values of `dtype` (the ring's `u` and `k^`), poisoned.
fn record_buffer<S: ActStorage>(
    location: Location,
    buffer: &'static str,
    dtype: DType,
    records: usize,
    per_record: usize,
) -> Result<S> {
    ring_alloc(buffer, records, per_record, |len| {
        S::alloc_poisoned(location, dtype, len)
    })
}

/// The gates of a decode ring (design §5 P1); returns the cache length `L`.
fn attach_gates<M: Memory>(pool: &CheckpointPool<M>) -> Result<usize> {
    if pool.role() != PoolRole::Local {
        return Err(GateError::RingOnDisaggregatedPool {
            role: match pool.role() {
                PoolRole::PdDecode => "disaggregated decode",
                _ => "disaggregated prefill",
            },
            role_flag: pool.role().flag_value(),
        }
        .into());
    }
    let Mode::Buffered { cache_len } = pool.mode() else {
        return Err(GateError::RingWithoutBufferedDecode.into());
    };
    let got = i64::try_from(cache_len).unwrap_or(i64::MAX);
    if let Some(why) = crate::limits::cache_len_outside(got) {
        return Err(GateError::CacheLen { got, why }.into());
    }
    Ok(cache_len)
}

static NEXT_RING_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl<M: Memory> DecodeRing<M> {
    /// Attaches a buffered-decode ring of f32 records to `pool`, in the pool's memory. Refused
    /// (design §5 P1) when the pool is a disaggregated prefill or decode pool, or was not
    /// resolved with buffered decode.
    pub fn attach(pool: &CheckpointPool<M>) -> Result<Self> {
        Self::attach_with_records(pool, DType::F32)
    }

    /// [`DecodeRing::attach`] with `u` and `k^` records of `records`: f32, or the activations'
    /// f16/bf16 (half the records' bytes; the decode must then run with activations of that
    /// dtype, and its flushes equal R's with `record_dtype = records`, not the f32 R's).
    pub fn attach_with_records(pool: &CheckpointPool<M>, records: DType) -> Result<Self> {
        let cache_len = attach_gates(pool)?;
        let s = pool.shape();
        let d = s.dims;
        let at = pool.location();
        let recs = s.layers.saturating_mul(s.slots).saturating_mul(cache_len);
        Ok(DecodeRing {
            shape: s,
            cache_len,
            d: record_buffer(at, "decode ring d", records, recs, d.hv * d.v)?,
            k: record_buffer(at, "decode ring k", records, recs, d.h * d.k)?,
            g: ring_buffer::<f32, _>(at, "decode ring g", recs, d.hv * d.gate_width(s.variant), true)?,
            write_pos: ring_buffer::<i32, _>(at, "decode ring cursors", s.slots, 1, false)?,
            generation: 0,
            pool: pool.id(),
            id: NEXT_RING_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        })
    }

    pub(crate) fn check_pool(&self, pool: &CheckpointPool<M>) -> Result<()> {
        if pool.id() != self.pool {
            return Err(Error::ForeignPool {
                what: "the decode ring",
            });
        }
        Ok(())
    }

    pub fn cache_len(&self) -> usize {
        self.cache_len
    }
    /// The element type of the `u` and `k^` records.
    pub fn record_dtype(&self) -> DType {
        self.d.dtype()
    }
    /// The corrected deltas `u`, `[NL, NS, HV, L, V]` (records `0..m` of a slot are pending).
    pub fn d(&self) -> &M::Act {
        &self.d
    }
    /// The normalised keys `k^`, `[NL, NS, H, L, K]`.
    pub fn k(&self) -> &M::Act {
        &self.k
    }
    /// The log decays `g`, `[NL, NS, HV, L]` (KDA `[.., K]`).
    pub fn g(&self) -> &M::Vec<f32> {
        &self.g
    }
    pub fn shape(&self) -> PoolShape {
        self.shape
    }
}

impl DecodeRing<Device> {
    /// The engine's own decode-ring buffers for `pool` (cache length `L` from its
    /// configuration): `d [NL, NS, HV, L, V]`, `k [NL, NS, H, L, K]`, `g [NL, NS, HV, L]` (KDA
    /// `[.., K]`) f32 and `cursors [NS]` i32 (their current values are kept). Refused as
    /// [`DecodeRing::attach`] is.
    ///
    /// # Safety
    /// As [`DeviceVec::from_raw_parts`] for each buffer at the extent above, on the pool's backend.
    pub unsafe fn from_raw_parts(
        pool: &CheckpointPool<Device>,
        d: *mut f32,
        k: *mut f32,
        g: *mut f32,
        cursors: *mut i32,
    ) -> Result<Self> {
        Self::from_raw_parts_with_records(pool, DType::F32, d.cast(), k.cast(), g, cursors)
    }

    /// [`DecodeRing::from_raw_parts`] with `d` and `k` of `records` (as
    /// [`DecodeRing::attach_with_records`]).
    ///
    /// # Safety
    /// As [`DeviceVec::from_raw_parts`] for each buffer at its extent, on the pool's backend.
    pub unsafe fn from_raw_parts_with_records(
        pool: &CheckpointPool<Device>,
        records: DType,
        d: *mut c_void,
        k: *mut c_void,
        g: *mut f32,
        cursors: *mut i32,
    ) -> Result<Self> {
        let cache_len = attach_gates(pool)?;
        let Location::Device(backend) = pool.location() else {
            unreachable!("a device pool is in device memory")
        };
        let s = pool.shape();
        let dims = s.dims;
        let recs = s
            .layers
            .checked_mul(s.slots)
            .and_then(|x| x.checked_mul(cache_len))
            .ok_or(Error::InvalidValue {
                what: "decode ring",
                why: format!("{s:?} x L = {cache_len} overflows"),
            })?;
        Ok(DecodeRing {
            shape: s,
            cache_len,
            d: DeviceAct::from_raw_parts(backend, records, d, recs * dims.hv * dims.v),
            k: DeviceAct::from_raw_parts(backend, records, k, recs * dims.h * dims.k),
            g: DeviceVec::from_raw_parts(backend, g, recs * dims.hv * dims.gate_width(s.variant)),
            write_pos: DeviceVec::from_raw_parts(backend, cursors, s.slots),
            generation: 0,
            pool: pool.id(),
            id: NEXT_RING_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        })
    }

    /// Copies records and cursors into `host`, a ring of the same shape (explicit downloads;
    /// `host`'s earlier steps become stale when a cursor changed).
    pub fn download_into(&self, stream: &Stream, host: &mut DecodeRing<Host>) -> Result<()> {
        if host.shape != self.shape || host.cache_len != self.cache_len || host.record_dtype() != self.record_dtype() {
            return Err(Error::InvalidValue {
                what: "decode ring",
                why: format!(
                    "the host ring ({:?}, L = {}, {} records) does not have the device ring's shape ({:?}, L = {}, {} records)",
                    host.shape,
                    host.cache_len,
                    host.record_dtype().name(),
                    self.shape,
                    self.cache_len,
                    self.record_dtype().name()
                ),
            });
        }
        self.d.download(stream, &mut host.d)?;
        self.k.download(stream, &mut host.k)?;
        self.g.download(stream, &mut host.g)?;
        let before = host.write_pos.clone();
        self.write_pos.download(stream, &mut host.write_pos)?;
        if before != host.write_pos {
            host.generation += 1;
        }
        Ok(())
    }
}

impl DecodeRing<Host> {
    /// A copy in device memory, attached to `pool` (the device copy of this ring's pool): records
    /// and cursors (explicit uploads).
    pub fn to_device(&self, stream: &Stream, pool: &CheckpointPool<Device>) -> Result<DecodeRing<Device>> {
        if pool.shape() != self.shape
            || pool.mode()
                != (Mode::Buffered {
                    cache_len: self.cache_len,
                })
        {
            return Err(Error::InvalidValue {
                what: "decode ring",
                why: format!(
                    "the ring ({:?}, L = {}) does not fit the device pool ({:?}, {:?})",
                    self.shape,
                    self.cache_len,
                    pool.shape(),
                    pool.mode()
                ),
            });
        }
        Ok(DecodeRing {
            shape: self.shape,
            cache_len: self.cache_len,
            d: DeviceAct::from_host(stream, &self.d)?,
            k: DeviceAct::from_host(stream, &self.k)?,
            g: DeviceVec::from_host(stream, &self.g)?,
            write_pos: DeviceVec::from_host(stream, &self.write_pos)?,
            generation: 0,
            pool: pool.id(),
            id: NEXT_RING_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        })
    }

    fn check_slot(&self, slot: usize) -> Result<()> {
        if slot >= self.shape.slots {
            return Err(Error::SlotOutOfRange {
                index: 0,
                slot: slot.min(i32::MAX as usize) as i32,
                num_slots: self.shape.slots,
            });
        }
        Ok(())
    }

    pub(crate) fn set_cursor(&mut self, slot: usize, pos: i32) {
        self.write_pos[slot] = pos;
        self.generation += 1;
    }

    /// Pending (not yet flushed) records of `slot`.
    pub fn pending(&self, slot: usize) -> Result<usize> {
        self.check_slot(slot)?;
        Ok(self.write_pos[slot] as usize)
    }

    /// A slot was (re)allocated to a request: its cursor starts at 0.
    pub fn allocate(&mut self, slot: usize) -> Result<()> {
        self.check_slot(slot)?;
        self.set_cursor(slot, 0);
        Ok(())
    }

    /// A slot was freed: pending records are dropped.
    pub fn clear(&mut self, slot: usize) -> Result<()> {
        self.allocate(slot)
    }

    /// Copy-on-write of a cached prefix: copies `src`'s checkpoint (every layer) into `dst` and
    /// resets `dst`'s cursor. `src` must be fully flushed ([`materialize`](crate::materialize) it first).
    pub fn copy_slot(&mut self, pool: &mut CheckpointPool, src: usize, dst: usize) -> Result<()> {
        self.check_pool(pool)?;
        self.check_slot(src)?;
        self.check_slot(dst)?;
        let pending = self.write_pos[src] as usize;
        if pending != 0 {
            return Err(Error::PendingRing { slot: src, pending });
        }
        if src != dst {
            let s = self.shape;
            let n = s.dims.state_elems();
            for layer in 0..s.layers {
                let (a, b) = (s.offset(layer, src), s.offset(layer, dst));
                pool.state_mut().copy_within(a..a + n, b);
            }
        }
        self.set_cursor(dst, 0);
        Ok(())
    }

    /// Snapshots the cursors of this forward's rows (`-1` = null row) and decides which rows
    /// flush. Live slots must be distinct.
    pub fn begin_step(&self, slots: &[i32], force: ForceFlush<'_>) -> Result<DecodeStep> {
        let mut step = DecodeStep::default();
        self.begin_step_into(&mut step, slots, force)?;
        Ok(step)
    }

    /// [`DecodeRing::begin_step`] into a step kept from an earlier forward: its buffers are
    /// reused, so a serving loop's cursor snapshot allocates nothing once they have grown.
    pub fn begin_step_into(&self, step: &mut DecodeStep, slots: &[i32], force: ForceFlush<'_>) -> Result<()> {
        if slots.is_empty() || slots.len() > 65535 {
            return Err(Error::Shape {
                tensor: "slots",
                expected: "[B] with 1 <= B <= 65535".into(),
                got: format!("[{}]", slots.len()),
            });
        }
        check_slots(slots, slots.len(), self.shape.slots)?;
        // Every check before the step changes: a refused call leaves `step` as it was.
        match force {
            ForceFlush::None => {}
            ForceFlush::Rows(f) => crate::checks::check_count("force_flush", f.len(), slots.len(), "one per row")?,
            ForceFlush::TrackInterval {
                seq_lens_after,
                interval,
            } => {
                crate::checks::check_count("seq_lens_after", seq_lens_after.len(), slots.len(), "one per row")?;
                if interval == 0 {
                    return Err(Error::InvalidValue {
                        what: "track interval",
                        why: "must be positive".into(),
                    });
                }
            }
        }
        step.force_flush.clear();
        match force {
            ForceFlush::None => step.force_flush.resize(slots.len(), 0),
            ForceFlush::Rows(f) => step.force_flush.extend(f.iter().map(|&x| x as i32)),
            ForceFlush::TrackInterval {
                seq_lens_after,
                interval,
            } => step
                .force_flush
                .extend(seq_lens_after.iter().map(|&n| (n % interval == 0) as i32)),
        }
        step.positions.clear();
        step.positions.extend(
            slots
                .iter()
                .map(|&s| if s < 0 { 0 } else { self.write_pos[s as usize] }),
        );
        step.slots.clear();
        step.slots.extend_from_slice(slots);
        step.cu_seqlens.clear();
        step.cu_seqlens.extend(0..=slots.len() as i32);
        step.generation = self.generation;
        step.ring = self.id;
        Ok(())
    }

    pub(crate) fn check_step(&self, step: &DecodeStep) -> Result<()> {
        if step.ring != self.id {
            return Err(Error::StaleStep {
                why: "the step belongs to another ring",
            });
        }
        if step.generation != self.generation {
            return Err(Error::StaleStep {
                why: "a cursor changed after begin_step",
            });
        }
        Ok(())
    }

    /// Whether row `b` of `step` flushes: `m == L - 1` or forced.
    pub fn flushes(&self, step: &DecodeStep, b: usize) -> bool {
        step.slots[b] >= 0 && (step.positions[b] as usize + 1 == self.cache_len || step.force_flush[b] != 0)
    }

    /// Advances the cursors after every layer ran the step: flushed rows go back to 0, the others
    /// move one on. Returns the number of rows that flushed.
    pub fn finish_step(&mut self, step: DecodeStep) -> Result<usize> {
        self.finish_step_ref(&step)
    }

    /// [`DecodeRing::finish_step`] of a step kept for [`DecodeRing::begin_step_into`]; the step is
    /// stale afterwards (a later call with it is refused).
    pub fn finish_step_ref(&mut self, step: &DecodeStep) -> Result<usize> {
        self.check_step(step)?;
        let mut flushed = 0;
        for b in 0..step.batch() {
            let slot = step.slots[b];
            if slot < 0 {
                continue;
            }
            if self.flushes(step, b) {
                self.write_pos[slot as usize] = 0;
                flushed += 1;
            } else {
                self.write_pos[slot as usize] = step.positions[b] + 1;
            }
        }
        self.generation += 1;
        Ok(flushed)
    }

    fn ls(&self, layer: usize, slot: usize) -> usize {
        layer * self.shape.slots + slot
    }
    pub(crate) fn d_index(&self, layer: usize, slot: usize, hv: usize, pos: usize) -> usize {
        ((self.ls(layer, slot) * self.shape.dims.hv + hv) * self.cache_len + pos) * self.shape.dims.v
    }
    pub(crate) fn k_index(&self, layer: usize, slot: usize, h: usize, pos: usize) -> usize {
        ((self.ls(layer, slot) * self.shape.dims.h + h) * self.cache_len + pos) * self.shape.dims.k
    }
    pub(crate) fn g_index(&self, layer: usize, slot: usize, hv: usize, pos: usize) -> usize {
        ((self.ls(layer, slot) * self.shape.dims.hv + hv) * self.cache_len + pos)
            * self.shape.dims.gate_width(self.shape.variant)
    }
}
