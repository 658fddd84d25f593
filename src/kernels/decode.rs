//! Kernel D, buffered decode (SPEC §4 D, `--enable-linear-replayssm`), and its cursor protocol.
//!
//! A [`DecodeRing`] attaches to a [`CheckpointPool`] resolved with buffered decode on a local
//! pool (SPEC §5 P1: attaching to a disaggregated pool is an error, so no code path can produce
//! that combination). Per forward: [`DecodeRing::begin_step`] snapshots each row's cursor,
//! [`decode`] runs once per layer, [`DecodeRing::finish_step`] advances the cursors (outside any
//! captured graph). [`materialize`] folds a slot's pending records into its checkpoint.
//!
//! The ring keeps the corrected delta `u` and the normalised key in f32, and the kernel rebuilds
//! `S_{t-1}` with the same float operations as kernel R, so outputs and flushed checkpoints are
//! bit-identical to R on the same backend for every cache length.
//!
//! Device code: `csrc/include/replayssm/device/decode.cuh`; launcher `csrc/kernels/decode.cu`;
//! tests `tests/decode.rs`.

use crate::backend::Backend;
use crate::checks::{check_kernel_head_dim, check_slots};
use crate::dtype::{ActView, ActViewMut};
use crate::error::{Error, Result};
use crate::ffi;
use crate::problem::{Gate, HeadDims, Variant};
use crate::reference;
use crate::runtime::launch::{check_error_word, check_status, launch, Memory};
use crate::state::decode_ring::{DecodeRing, DecodeStep};
use crate::state::pool::CheckpointPool;
use crate::tokens::{stage_output_view, stage_tokens, validate_tokens, RecurrentInputs};

/// Inputs of one decode step of one layer: row `b` is the token of request `b`.
#[derive(Clone, Copy, Debug)]
pub struct DecodeInputs<'a> {
    pub variant: Variant,
    pub dims: HeadDims,
    /// `[B, H, K]`
    pub q: ActView<'a>,
    /// `[B, H, K]`
    pub k: ActView<'a>,
    /// `[B, HV, V]`
    pub v: ActView<'a>,
    pub gate: Gate<'a>,
    pub scale: f32,
    pub qk_l2norm: bool,
}

/// Kernel D for layer `layer`: each live row's output from its checkpoint and pending records;
/// on flush rows the checkpoint is written, on the others record `m` is appended.
pub fn decode(
    backend: Backend,
    inp: &DecodeInputs<'_>,
    pool: &mut CheckpointPool,
    ring: &mut DecodeRing,
    step: &DecodeStep,
    layer: usize,
    o: &mut ActViewMut<'_>,
) -> Result<()> {
    ring.check_pool(pool)?;
    ring.check_step(step)?;
    pool.check_inputs(inp.variant, &inp.dims, layer)?;
    check_kernel_head_dim(backend, inp.dims.k)?;
    let batch = step.batch();
    let rinp = RecurrentInputs {
        variant: inp.variant,
        dims: inp.dims,
        q: inp.q,
        k: inp.k,
        v: inp.v,
        gate: inp.gate,
        cu_seqlens: &step.cu_seqlens,
        slots: &step.slots,
        scale: inp.scale,
        qk_l2norm: inp.qk_l2norm,
    };
    // One token per row: cu_seqlens = 0..=B checks that the views hold exactly B rows.
    validate_tokens(backend, &rinp, o)?;
    match backend {
        Backend::Reference => {
            decode_reference(&rinp, pool, ring, step, layer, o);
            Ok(())
        }
        Backend::Emulated | Backend::Cuda => {
            let s = pool.shape();
            let d = s.dims;
            let mut mem = Memory::for_backend(backend)?;
            let mut word = [0u32];
            let t = stage_tokens(&mut mem, &rinp)?;
            let params = ffi::rssm_decode_params {
                q: t.q.cast(),
                k: t.k.cast(),
                v: t.v.cast(),
                a: t.a.cast(),
                b: t.b.cast(),
                A_log: t.a_log,
                dt_bias: t.dt_bias,
                g: t.g,
                beta: t.beta,
                slots: t.slots,
                positions: mem.input(&step.positions)?,
                force_flush: mem.input(&step.force_flush)?,
                state: mem.output(pool.state_mut())?,
                ring_d: mem.output(&mut ring.d)?,
                ring_k: mem.output(&mut ring.k)?,
                ring_g: mem.output(&mut ring.g)?,
                o: stage_output_view(&mut mem, o)?.cast(),
                error_word: mem.output(&mut word)?,
                q_stride: inp.q.stride as i64,
                k_stride: inp.k.stride as i64,
                v_stride: inp.v.stride as i64,
                a_stride: t.a_stride,
                b_stride: t.b_stride,
                o_stride: o.stride as i64,
                batch: batch as i32,
                num_slots: s.slots as i32,
                num_layers: s.layers as i32,
                layer: layer as i32,
                cache_len: ring.cache_len as i32,
                H: d.h as i32,
                HV: d.hv as i32,
                K: d.k as i32,
                V: d.v as i32,
                scale: inp.scale,
                dtype: inp.q.dtype().to_ffi(),
                variant: inp.variant.to_ffi(),
                qk_l2norm: inp.qk_l2norm as i32,
                reserved: 0,
            };
            // The checks the C ABI runs on the same params (one source: `checks::params`).
            crate::checks::params::decode(&params, backend)?;
            let st = launch!(backend, rssm_decode, rssm_emu_decode, &params);
            check_status("decode", backend, st)?;
            mem.finish()?;
            check_error_word("decode", word[0])
        }
    }
}

/// Folds the pending records of `slots` (every layer) into their checkpoints and resets their
/// cursors (prefix caching, preemption, export). Null (`-1`) entries are skipped.
pub fn materialize(backend: Backend, pool: &mut CheckpointPool, ring: &mut DecodeRing, slots: &[i32]) -> Result<()> {
    ring.check_pool(pool)?;
    let s = pool.shape();
    check_kernel_head_dim(backend, s.dims.k)?;
    if slots.is_empty() || slots.len() * s.layers > 65535 {
        return Err(Error::Shape {
            tensor: "slots",
            expected: format!("[B] with 1 <= B and B x NL <= 65535 (NL = {})", s.layers),
            got: format!("[{}]", slots.len()),
        });
    }
    check_slots(slots, slots.len(), s.slots)?;
    let positions: Vec<i32> = slots
        .iter()
        .map(|&x| if x < 0 { 0 } else { ring.write_pos[x as usize] })
        .collect();
    if positions.iter().all(|&m| m == 0) {
        return Ok(());
    }
    match backend {
        Backend::Reference => materialize_reference(pool, ring, slots, &positions),
        Backend::Emulated | Backend::Cuda => {
            let d = s.dims;
            let mut mem = Memory::for_backend(backend)?;
            let mut word = [0u32];
            let null = std::ptr::null();
            let params = ffi::rssm_decode_params {
                q: null,
                k: null,
                v: null,
                a: null,
                b: null,
                A_log: std::ptr::null(),
                dt_bias: std::ptr::null(),
                g: std::ptr::null(),
                beta: std::ptr::null(),
                slots: mem.input(slots)?,
                positions: mem.input(&positions)?,
                force_flush: std::ptr::null(),
                state: mem.output(pool.state_mut())?,
                ring_d: mem.input(&ring.d)?.cast_mut(),
                ring_k: mem.input(&ring.k)?.cast_mut(),
                ring_g: mem.input(&ring.g)?.cast_mut(),
                o: std::ptr::null_mut(),
                error_word: mem.output(&mut word)?,
                q_stride: 0,
                k_stride: 0,
                v_stride: 0,
                a_stride: 0,
                b_stride: 0,
                o_stride: 0,
                batch: slots.len() as i32,
                num_slots: s.slots as i32,
                num_layers: s.layers as i32,
                layer: 0,
                cache_len: ring.cache_len as i32,
                H: d.h as i32,
                HV: d.hv as i32,
                K: d.k as i32,
                V: d.v as i32,
                scale: 1.0,
                dtype: crate::DType::F32.to_ffi(),
                variant: s.variant.to_ffi(),
                qk_l2norm: 0,
                reserved: 0,
            };
            // The checks the C ABI runs on the same params (one source: `checks::params`).
            crate::checks::params::materialize(&params, backend)?;
            let st = launch!(backend, rssm_decode_materialize, rssm_emu_decode_materialize, &params);
            check_status("decode_materialize", backend, st)?;
            mem.finish()?;
            check_error_word("decode_materialize", word[0])?;
        }
    }
    for &slot in slots.iter().filter(|&&x| x >= 0) {
        ring.set_cursor(slot as usize, 0);
    }
    Ok(())
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
        reference::delta_rule_apply(s, &d, &decay, &ring.k[ki..ki + d.k], &ring.d[di..di + d.v]);
    }
}

fn decode_reference(
    inp: &RecurrentInputs<'_>,
    pool: &mut CheckpointPool,
    ring: &mut DecodeRing,
    step: &DecodeStep,
    layer: usize,
    o: &mut ActViewMut<'_>,
) {
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
            reference::delta_rule_update_u(&mut s, &d, &decay, &k, &v, beta, &mut u);
            let mut out = vec![0.0f32; d.v];
            reference::readout(&s, &d, &q, &mut out);
            for (j, &x) in out.iter().enumerate() {
                o.set(b, hv * d.v + j, x);
            }
            if flush {
                pool.state_mut()[base + hv * head..base + (hv + 1) * head].copy_from_slice(&s);
            } else {
                let di = ring.d_index(layer, slot, hv, m);
                ring.d[di..di + d.v].copy_from_slice(&u);
                let ki = ring.k_index(layer, slot, h, m);
                ring.k[ki..ki + d.k].copy_from_slice(&k);
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
