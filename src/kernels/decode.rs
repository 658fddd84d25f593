//! Kernel D, buffered decode (design §4 D, `--enable-linear-replayssm`), and its cursor protocol.
//!
//! A [`DecodeRing`] attaches to a [`CheckpointPool`] resolved with buffered decode on a local
//! pool (design §5 P1: attaching to a disaggregated pool is an error, so no code path can produce
//! that combination). Per forward: [`DecodeRing::begin_step`] snapshots each row's cursor,
//! [`decode`] runs once per layer, [`DecodeRing::finish_step`] advances the cursors (outside any
//! captured graph). [`materialize`] folds a slot's pending records into its checkpoint.
//!
//! An f32 ring keeps the corrected delta `u` and the normalised key exactly, and the kernel rebuilds
//! `S_{t-1}` with the same float operations as kernel R, so outputs and flushed checkpoints are
//! bit-identical to R on the same backend for every cache length. A ring of f16/bf16 records
//! ([`DecodeRing::attach_with_records`], the activations' dtype) holds `u` and `k^` rounded, and
//! the kernel updates with the rounded values: its outputs and flushes are bit-identical to R run
//! with `record_dtype` set to the same dtype.
//!
//! Device code: `csrc/include/replayssm/device/decode.cuh`; launcher `csrc/kernels/decode.cu`;
//! tests `tests/decode.rs`.

use crate::backend::Backend;
use crate::checks::{check_count, check_kernel_head_dim, check_slots};
use crate::dtype::ActViewMut;
use crate::error::{Error, Result};
use crate::ffi;
use crate::kernels::params::Base;
use crate::memory::{
    ActLayout, Device, DeviceActViewMut, DeviceSeqlens, DeviceSlice, DeviceSliceMut, Host, Memory, SliceRef, Stream,
};
use crate::reference;
use crate::runtime::launch::{check_status, launch, on_host, Exec};
use crate::state::decode_ring::{DecodeRing, DecodeStep};
use crate::state::pool::CheckpointPool;
use crate::tokens::{token_inputs, token_params, validate_tokens, RecurrentInputs};

token_inputs! {
    /// Inputs of one decode step of one layer: row `b` is the token of request `b` (the token
    /// fields' `N` is `B`).
    pub struct DecodeInputs {}
}

// D's inputs as kernel R's token inputs (one token per row), for the checks and the params
// the two kernels share. The fields are projections of `M` (invariant in their lifetime), so the
// shortening to the step's lifetime is written per memory.
macro_rules! decode_as_recurrent {
    ($m:ty) => {
        impl<'a> DecodeInputs<'a, $m> {
            fn as_recurrent<'s>(
                &self,
                cu_seqlens: <$m as Memory>::Seqlens<'s>,
                slots: <$m as Memory>::Slice<'s, i32>,
            ) -> RecurrentInputs<'s, $m>
            where
                'a: 's,
            {
                let DecodeInputs {
                    variant,
                    dims,
                    q,
                    k,
                    v,
                    gate,
                    scale,
                    qk_l2norm,
                } = *self;
                let gate = gate.shorten();
                RecurrentInputs {
                    variant,
                    dims,
                    q,
                    k,
                    v,
                    gate,
                    cu_seqlens,
                    slots,
                    scale,
                    qk_l2norm,
                }
            }
        }
    };
}
decode_as_recurrent!(Host);
decode_as_recurrent!(Device);

/// The rows of one decode step in device memory, as the stream's cursor calls produce them:
/// `slots [B]` (-1 = null row), `positions [B]` (each row's cursor, written by
/// [`Stream::decode_snapshot`]) and optional `force_flush [B]` flags. Pass the same rows to every
/// layer's [`Stream::decode`] and to the step's [`Stream::decode_advance`]: an advance with
/// other flags than D saw would move a cursor past a record that was never written.
#[derive(Clone, Copy, Debug)]
pub struct DecodeRows<'a, M: Memory = Device> {
    pub slots: M::Slice<'a, i32>,
    pub positions: M::Slice<'a, i32>,
    pub force_flush: Option<M::Slice<'a, i32>>,
}

/// One D launch as its checks, its kernel and its reference read it: the step's inputs as kernel
/// R's token inputs (one token per row), the step's rows and the layer.
struct DecodeLaunch<'s, 'r, M: Memory> {
    inp: RecurrentInputs<'s, M>,
    rows: DecodeRows<'r, M>,
    layer: usize,
}

/// Kernel D for layer `layer` on host memory: each live row's output from its checkpoint and
/// pending records; on flush rows the checkpoint is written, on the others record `m` is
/// appended. On device memory: [`Stream::decode`].
pub fn decode(
    backend: Backend,
    inp: &DecodeInputs<'_>,
    pool: &mut CheckpointPool,
    ring: &mut DecodeRing,
    step: &DecodeStep,
    layer: usize,
    o: &mut ActViewMut<'_>,
) -> Result<()> {
    validate_decode(backend, inp, pool, ring, step, layer, o)?;
    let l = host_launch(inp, step, layer);
    match backend {
        Backend::Reference => {
            decode_reference(&l, step, pool, ring, o);
            Ok(())
        }
        Backend::Emulated | Backend::Cuda => on_host(backend, "decode", |exec| decode_kernel(exec, &l, pool, ring, o)),
    }
}

/// The checks [`decode`] runs before anything is written (host memory, contents included): the
/// ring's pool and step first (as before the device path existed), then the launch's.
pub fn validate_decode(
    backend: Backend,
    inp: &DecodeInputs<'_>,
    pool: &CheckpointPool,
    ring: &DecodeRing,
    step: &DecodeStep,
    layer: usize,
    o: &ActViewMut<'_>,
) -> Result<()> {
    ring.check_pool(pool)?;
    ring.check_step(step)?;
    check_decode(backend, &host_launch(inp, step, layer), pool, ring, o)
}

/// A host step's launch: its rows, and its inputs as kernel R's token inputs.
fn host_launch<'a: 's, 's>(inp: &DecodeInputs<'a>, step: &'s DecodeStep, layer: usize) -> DecodeLaunch<'s, 's, Host> {
    DecodeLaunch {
        inp: inp.as_recurrent(&step.cu_seqlens, &step.slots),
        rows: DecodeRows::<Host> {
            slots: &step.slots,
            positions: &step.positions,
            force_flush: Some(&step.force_flush),
        },
        layer,
    }
}

/// The checks of a D launch.
fn check_decode<M: Memory>(
    backend: Backend,
    l: &DecodeLaunch<'_, '_, M>,
    pool: &CheckpointPool<M>,
    ring: &DecodeRing<M>,
    o: &impl ActLayout,
) -> Result<()> {
    let (rinp, rows) = (&l.inp, &l.rows);
    ring.check_pool(pool)?;
    pool.check_inputs(rinp.variant, &rinp.dims, l.layer)?;
    check_kernel_head_dim(backend, rinp.dims.k)?;
    check_rows(rows.slots.len(), rows)?;
    // The params' rule, here too so that the Reference backend (no params) refuses alike.
    crate::checks::params::record_dtype(
        "ring_dtype",
        ring.record_dtype().to_ffi(),
        Some(rinp.q.dtype().to_ffi()),
    )?;
    // Kernel D reads and writes row b of every view for each of the B rows: the views must
    // hold exactly B tokens (the device path has no cu_seqlens to tie them).
    let n = rinp.q.layout().1;
    if n != rows.slots.len() {
        return Err(Error::Shape {
            tensor: "q",
            expected: format!("[B = {}] tokens (one per row)", rows.slots.len()),
            got: format!("[{n}] tokens"),
        });
    }
    // One token per row: cu_seqlens = 0..=B checks that the views hold exactly B rows.
    validate_tokens(backend, rinp, o)?;
    Ok(())
}

/// The per-row arrays of a decode step hold one entry per row.
fn check_rows<M: Memory>(batch: usize, rows: &DecodeRows<'_, M>) -> Result<()> {
    check_row_lengths(batch, rows.positions.len(), rows.force_flush.as_ref().map(|f| f.len()))
}

/// `B` rows within the launch limit, and `positions` / `force_flush` with one entry per row.
fn check_row_lengths(batch: usize, positions: usize, force_flush: Option<usize>) -> Result<()> {
    if batch == 0 || batch > 65535 {
        return Err(Error::Shape {
            tensor: "slots",
            expected: "[B] with 1 <= B <= 65535".into(),
            got: format!("[{batch}]"),
        });
    }
    check_count("positions", positions, batch, "one per row")?;
    check_count("force_flush", force_flush.unwrap_or(batch), batch, "one per row")
}

fn decode_kernel<M: Memory>(
    exec: &Exec,
    l: &DecodeLaunch<'_, '_, M>,
    pool: &mut CheckpointPool<M>,
    ring: &mut DecodeRing<M>,
    o: &mut M::ViewMut<'_>,
) -> Result<()> {
    let (inp, rows, layer) = (&l.inp, &l.rows, l.layer);
    let s = pool.shape();
    let tokens = token_params(exec, inp, o)?;
    let base = Base {
        slots: exec.slice("slots", &inp.slots)?,
        state: exec.store_mut("pool", pool.storage_mut())?,
        batch: rows.slots.len(),
        num_slots: s.slots,
        num_layers: s.layers,
        layer,
        dims: s.dims,
        dtype: inp.q.dtype(),
        variant: inp.variant,
        qk_l2norm: inp.qk_l2norm,
    };
    let mut params = ffi::rssm_decode_params {
        base: base.to_ffi(exec),
        tokens,
        positions: exec.slice("positions", &rows.positions)?,
        force_flush: match &rows.force_flush {
            Some(f) => exec.slice("force_flush", f)?,
            None => std::ptr::null(),
        },
        ring_d: exec.act_mut("decode ring d", &mut ring.d)?,
        ring_k: exec.act_mut("decode ring k", &mut ring.k)?,
        ring_g: exec.store_mut("decode ring g", &mut ring.g)?,
        cache_len: ring.cache_len as i32,
        ring_dtype: ring.record_dtype().to_ffi(),
    };
    // The checks the C ABI runs on the same params (one source: `checks::params`).
    crate::tuning::apply(crate::tuning::Kernel::D, &mut params.base, params.cache_len);
    crate::checks::params::decode(&params, exec.backend)?;
    let st = launch!(exec, rssm_decode, rssm_emu_decode, &params);
    check_status("decode", exec.backend, st)
}

/// The checks [`materialize`] runs before anything is written.
pub fn validate_materialize(backend: Backend, pool: &CheckpointPool, ring: &DecodeRing, slots: &[i32]) -> Result<()> {
    ring.check_pool(pool)?;
    let s = pool.shape();
    check_kernel_head_dim(backend, s.dims.k)?;
    crate::checks::check_bookkeeping_rows(slots.len())?;
    check_slots(slots, slots.len(), s.slots)
}

/// Folds the pending records of `slots` (every layer) into their checkpoints and resets their
/// cursors (prefix caching, preemption, export). Null (`-1`) entries are skipped. On device
/// memory: [`Stream::materialize`].
pub fn materialize(backend: Backend, pool: &mut CheckpointPool, ring: &mut DecodeRing, slots: &[i32]) -> Result<()> {
    validate_materialize(backend, pool, ring, slots)?;
    let positions: Vec<i32> = slots
        .iter()
        .map(|&x| if x < 0 { 0 } else { ring.write_pos[x as usize] })
        .collect();
    if positions.iter().all(|&m| m == 0) {
        return Ok(());
    }
    match backend {
        Backend::Reference => materialize_reference(pool, ring, slots, &positions),
        Backend::Emulated | Backend::Cuda => on_host(backend, "decode_materialize", |exec| {
            materialize_kernel(exec, pool, ring, &slots, &positions.as_slice())
        })?,
    }
    for &slot in slots.iter().filter(|&&x| x >= 0) {
        ring.set_cursor(slot as usize, 0);
    }
    Ok(())
}

fn materialize_kernel<M: Memory>(
    exec: &Exec,
    pool: &mut CheckpointPool<M>,
    ring: &DecodeRing<M>,
    slots: &M::Slice<'_, i32>,
    positions: &M::Slice<'_, i32>,
) -> Result<()> {
    let s = pool.shape();
    let base = Base {
        slots: exec.slice("slots", slots)?,
        state: std::ptr::null_mut(),
        batch: slots.len(),
        num_slots: s.slots,
        num_layers: s.layers,
        layer: 0,
        dims: s.dims,
        dtype: crate::DType::F32,
        variant: s.variant,
        qk_l2norm: false,
    };
    let positions = exec.slice("positions", positions)?;
    let mut base = base.to_ffi(exec);
    base.state = exec.store_mut("pool", pool.storage_mut())?;
    // No token inputs: materialise reads only the base, the ring and the positions.
    let params = ffi::rssm_decode_params {
        base,
        tokens: ffi::rssm_token_params {
            scale: 1.0,
            ..Default::default()
        },
        positions,
        force_flush: std::ptr::null(),
        // Read only by the materialise kernel.
        ring_d: exec.act("decode ring d", &ring.d)?.cast_mut(),
        ring_k: exec.act("decode ring k", &ring.k)?.cast_mut(),
        ring_g: exec.store("decode ring g", &ring.g)?.cast_mut(),
        cache_len: ring.cache_len as i32,
        ring_dtype: ring.record_dtype().to_ffi(),
    };
    // The checks the C ABI runs on the same params (one source: `checks::params`).
    crate::checks::params::materialize(&params, exec.backend)?;
    let st = launch!(exec, rssm_decode_materialize, rssm_emu_decode_materialize, &params);
    check_status("decode_materialize", exec.backend, st)
}

/// What the cursor kernel does with `positions [B]`.
enum Positions<'a> {
    /// SNAPSHOT writes them.
    Write(DeviceSliceMut<'a, i32>),
    /// ADVANCE reads them.
    Read(DeviceSlice<'a, i32>),
    /// RESET takes none.
    None,
}

/// Launches the cursor kernel (`op`: snapshot, advance or reset) on device memory.
fn cursors_kernel(
    stream: &Stream,
    ring: &mut DecodeRing<Device>,
    op: ffi::rssm_cursor_op,
    slots: &DeviceSlice<'_, i32>,
    mut positions: Positions<'_>,
    force_flush: Option<&DeviceSlice<'_, i32>>,
) -> Result<()> {
    let exec = Exec::on(stream);
    let b = slots.len();
    let (pos_len, pos_ptr) = match &mut positions {
        Positions::Write(p) => (p.len(), exec.slice_mut("positions", p)?),
        // Only read by ADVANCE: the kernel takes one non-const field for both ops.
        Positions::Read(p) => (p.len(), exec.slice("positions", p)?.cast_mut()),
        Positions::None => (b, std::ptr::null_mut()),
    };
    check_row_lengths(b, pos_len, force_flush.map(|f| f.len()))?;
    let params = ffi::rssm_cursor_params {
        cursors: exec.store_mut("decode ring cursors", &mut ring.write_pos)?,
        slots: exec.slice("slots", slots)?,
        positions: pos_ptr,
        force_flush: match force_flush {
            Some(f) => exec.slice("force_flush", f)?,
            None => std::ptr::null(),
        },
        error_word: exec.word,
        batch: b as i32,
        num_slots: ring.shape.slots as i32,
        cache_len: ring.cache_len as i32,
        op: op as i32,
    };
    crate::checks::params::cursors(&params, exec.backend)?;
    let st = launch!(&exec, rssm_decode_cursors, rssm_emu_decode_cursors, &params);
    check_status("decode_cursors", exec.backend, st)
}

impl Stream {
    /// The first call of a device decode step: each row's cursor into `positions [B]` (0 for a
    /// null row). Every layer's [`Stream::decode`] then reads the same rows, and
    /// [`Stream::decode_advance`] ends the step. The cursors never leave the device, so a
    /// captured graph replays the whole step.
    pub fn decode_snapshot(
        &self,
        ring: &mut DecodeRing<Device>,
        slots: DeviceSlice<'_, i32>,
        positions: DeviceSliceMut<'_, i32>,
    ) -> Result<()> {
        cursors_kernel(
            self,
            ring,
            ffi::rssm_cursor_op_RSSM_CURSOR_SNAPSHOT,
            &slots,
            Positions::Write(positions),
            None,
        )
    }

    /// Kernel D for layer `layer` on device memory, enqueued on this stream (no allocation,
    /// copy or synchronisation; bad device-side rows flag the stream's error word).
    pub fn decode(
        &self,
        inp: &DecodeInputs<'_, Device>,
        pool: &mut CheckpointPool<Device>,
        ring: &mut DecodeRing<Device>,
        rows: &DecodeRows<'_, Device>,
        layer: usize,
        o: &mut DeviceActViewMut<'_>,
    ) -> Result<()> {
        // D takes one token per row and reads no cu_seqlens: the token checks see `0..=B` as a
        // length only. SAFETY: never dereferenced (kernel D's params have no cu_seqlens).
        let cu_seqlens = unsafe {
            DeviceSlice::from_raw_parts(
                self.backend(),
                std::ptr::NonNull::<i32>::dangling().as_ptr(),
                rows.slots.len() + 1,
            )
        };
        let l = DecodeLaunch {
            inp: inp.as_recurrent(
                DeviceSeqlens {
                    cu: cu_seqlens,
                    max_seqlen: 1,
                },
                rows.slots,
            ),
            rows: *rows,
            layer,
        };
        check_decode(self.backend(), &l, pool, ring, o)?;
        decode_kernel(&Exec::on(self), &l, pool, ring, o)
    }

    /// The last call of a device decode step: flushed rows' cursors go back to 0, the others
    /// move one on.
    pub fn decode_advance(&self, ring: &mut DecodeRing<Device>, rows: &DecodeRows<'_, Device>) -> Result<()> {
        cursors_kernel(
            self,
            ring,
            ffi::rssm_cursor_op_RSSM_CURSOR_ADVANCE,
            &rows.slots,
            Positions::Read(rows.positions),
            rows.force_flush.as_ref(),
        )
    }

    /// Resets the cursors of `slots` to 0 (a slot (re)allocated to a request, or freed).
    pub fn decode_reset(&self, ring: &mut DecodeRing<Device>, slots: DeviceSlice<'_, i32>) -> Result<()> {
        cursors_kernel(
            self,
            ring,
            ffi::rssm_cursor_op_RSSM_CURSOR_RESET,
            &slots,
            Positions::None,
            None,
        )
    }

    /// Folds the pending records of `slots` (every layer) into their checkpoints and resets
    /// their cursors, on device memory. `scratch [2B]` holds the cursors and the flags of the
    /// reset: a row whose cursor the snapshot flagged (outside `0..L`) keeps it, so its pending
    /// records are not dropped behind the error word's back.
    pub fn materialize(
        &self,
        pool: &mut CheckpointPool<Device>,
        ring: &mut DecodeRing<Device>,
        slots: DeviceSlice<'_, i32>,
        mut scratch: DeviceSliceMut<'_, i32>,
    ) -> Result<()> {
        ring.check_pool(pool)?;
        let s = pool.shape();
        check_kernel_head_dim(self.backend(), s.dims.k)?;
        let b = slots.len();
        crate::checks::check_bookkeeping_rows(b)?;
        if scratch.len() != 2 * b {
            return Err(Error::Shape {
                tensor: "scratch",
                expected: format!("[2 B = {}] i32", 2 * b),
                got: format!("[{}]", scratch.len()),
            });
        }
        let (mut positions, mut flags) = scratch.split_at_mut(b);
        self.decode_snapshot(ring, slots, positions.reborrow())?;
        materialize_kernel(&Exec::on(self), pool, ring, &slots, &positions.as_slice())?;
        // ADVANCE with every row forced to flush: valid cursors go to 0, flagged ones stay.
        flags.fill_bytes(self, 1)?;
        let rows = DecodeRows {
            slots,
            positions: positions.as_slice(),
            force_flush: Some(flags.as_slice()),
        };
        self.decode_advance(ring, &rows)
    }
}

/// Replays pending records `0..m` of `(layer, slot, hv)` into one head's state (f32).
fn replay_pending_reference(ring: &DecodeRing, s: &mut [f32], layer: usize, slot: usize, hv: usize, m: usize) {
    let d = ring.shape.dims;
    let gw = d.gate_width(ring.shape.variant);
    let h = d.key_head(hv);
    for j in 0..m {
        let ki = ring.k_index(layer, slot, h, j);
        let di = ring.d_index(layer, slot, hv, j);
        let gi = ring.g_index(layer, slot, hv, j);
        let decay: Vec<f32> = ring.g[gi..gi + gw].iter().map(|x| x.exp()).collect();
        let k: Vec<f32> = (ki..ki + d.k).map(|i| ring.k.get(i)).collect();
        let u: Vec<f32> = (di..di + d.v).map(|i| ring.d.get(i)).collect();
        reference::delta_rule_apply(s, &d, &decay, &k, &u);
    }
}

fn decode_reference(
    l: &DecodeLaunch<'_, '_, Host>,
    step: &DecodeStep,
    pool: &mut CheckpointPool,
    ring: &mut DecodeRing,
    o: &mut ActViewMut<'_>,
) {
    let (inp, layer) = (&l.inp, l.layer);
    let d = inp.dims;
    let shape = pool.shape();
    let head = d.v * d.k;
    let gw = d.gate_width(inp.variant);
    for b in 0..step.batch() {
        let slot = step.slots[b];
        if slot < 0 {
            for i in 0..d.hv * d.v {
                o.set(b, i, 0.0);
            }
            continue;
        }
        let slot = slot as usize;
        let m = step.positions[b] as usize;
        let flush = ring.flushes(step, b);
        let base = shape.offset(layer, slot);
        for hv in 0..d.hv {
            let h = d.key_head(hv);
            let mut s = pool.state()[base + hv * head..base + (hv + 1) * head].to_vec();
            replay_pending_reference(ring, &mut s, layer, slot, hv, m);
            let mut k: Vec<f32> = (0..d.k).map(|j| inp.k.at(b, h * d.k + j)).collect();
            let mut q: Vec<f32> = (0..d.k).map(|j| inp.q.at(b, h * d.k + j)).collect();
            if inp.qk_l2norm {
                reference::l2_normalize(&mut k);
                reference::l2_normalize(&mut q);
            }
            q.iter_mut().for_each(|x| *x *= inp.scale);
            let v: Vec<f32> = (0..d.v).map(|j| inp.v.at(b, hv * d.v + j)).collect();
            let (g, beta) = reference::gate_at::<f32>(&inp.gate, inp.variant, &d, b, hv);
            let decay: Vec<f32> = g.iter().map(|x| x.exp()).collect();
            let mut u = vec![0.0f32; d.v];
            reference::delta_rule_update_u(&mut s, &d, &decay, &k, &v, beta, ring.record_dtype(), &mut u);
            let mut out = vec![0.0f32; d.v];
            reference::readout(&s, &d, &q, &mut out);
            for (j, &x) in out.iter().enumerate() {
                o.set(b, hv * d.v + j, x);
            }
            if flush {
                pool.state_mut()[base + hv * head..base + (hv + 1) * head].copy_from_slice(&s);
            } else {
                let di = ring.d_index(layer, slot, hv, m);
                u.iter().enumerate().for_each(|(j, &x)| ring.d.set(di + j, x));
                let ki = ring.k_index(layer, slot, h, m);
                k.iter().enumerate().for_each(|(j, &x)| ring.k.set(ki + j, x));
                let gi = ring.g_index(layer, slot, hv, m);
                ring.g[gi..gi + gw].copy_from_slice(&g);
            }
        }
    }
}

fn materialize_reference(pool: &mut CheckpointPool, ring: &DecodeRing, slots: &[i32], positions: &[i32]) {
    let s = pool.shape();
    let head = s.dims.v * s.dims.k;
    for (b, &slot) in slots.iter().enumerate() {
        if slot < 0 || positions[b] == 0 {
            continue;
        }
        for layer in 0..s.layers {
            let base = s.offset(layer, slot as usize);
            for hv in 0..s.dims.hv {
                let st = &mut pool.state_mut()[base + hv * head..base + (hv + 1) * head];
                replay_pending_reference(ring, st, layer, slot as usize, hv, positions[b] as usize);
            }
        }
    }
}
