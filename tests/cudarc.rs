//! The `cudarc` feature on a GPU: a fold whose buffers are cudarc `CudaSlice`s, launched through
//! the C ABI on a cudarc stream, gives the emulated fold's bits. Skips (visibly) without a GPU.
#![cfg(feature = "cudarc")]

mod common;

use std::ptr;

use cudarc::driver::CudaContext;
use replayssm::capi::*;
use replayssm::interop::cudarc::{launch, DeviceView, DeviceViewMut};

#[test]
fn fold_on_cudarc_buffers_matches_the_emulated_fold() {
    if !common::gpu_available("fold_on_cudarc_buffers_matches_the_emulated_fold") {
        return;
    }
    let (h, hv, k, v, slots, w) = (2usize, 4usize, 64usize, 64usize, 3usize, 4usize);
    let mut seed = 0x1234_5678u32;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        (seed >> 8) as f32 / 16_777_216.0
    };
    let state: Vec<f32> = (0..slots * hv * v * k).map(|_| next() - 0.5).collect();
    let ring_v: Vec<f32> = (0..slots * hv * w * v).map(|_| next() - 0.5).collect();
    let ring_k: Vec<f32> = (0..slots * h * w * k).map(|_| next() - 0.5).collect();
    let ring_g: Vec<f32> = (0..slots * hv * w).map(|_| -0.5 * next()).collect();
    let ring_beta: Vec<f32> = (0..slots * hv * w).map(|_| next()).collect();
    let slot_ids = vec![2i32, -1, 0];
    let lens = vec![3i32, 0, 4];
    // The ring is read-only to F; the ABI's ring part is shared with V, which writes it.
    let params =
        |state: *mut f32, rv: *const f32, rk: *const f32, rg: *const f32, rb: *const f32, s, l| replayssm_fold_params {
            base: replayssm_base_params {
                state,
                slots: s,
                batch: 3,
                num_slots: slots as i32,
                num_layers: 1,
                H: h as i32,
                HV: hv as i32,
                K: k as i32,
                V: v as i32,
                dtype: 0,
                variant: 0,
                qk_l2norm: 1,
                ..Default::default()
            },
            ring: replayssm_ring_params {
                v: rv.cast_mut().cast(),
                k: rk.cast_mut().cast(),
                g: rg.cast_mut(),
                beta: rb.cast_mut(),
                window: w as i32,
                ..Default::default()
            },
            accept_lens: l,
            ..Default::default()
        };

    let mut emu = state.clone();
    let p = params(
        emu.as_mut_ptr(),
        ring_v.as_ptr(),
        ring_k.as_ptr(),
        ring_g.as_ptr(),
        ring_beta.as_ptr(),
        slot_ids.as_ptr(),
        lens.as_ptr(),
    );
    // SAFETY: host buffers sized for the params.
    let st = unsafe {
        replayssm_fold(
            replayssm_backend::REPLAYSSM_BACKEND_EMULATED as i32,
            &p,
            ptr::null_mut(),
        )
    };
    assert_eq!(st, replayssm_status::REPLAYSSM_OK);

    let ctx = CudaContext::new(0).expect("cudarc context");
    let stream = ctx.new_stream().expect("stream");
    let mut d_state = stream.clone_htod(&state).expect("upload");
    let (d_rv, d_rk) = (stream.clone_htod(&ring_v).unwrap(), stream.clone_htod(&ring_k).unwrap());
    let (d_rg, d_rb) = (
        stream.clone_htod(&ring_g).unwrap(),
        stream.clone_htod(&ring_beta).unwrap(),
    );
    let (d_slots, d_lens) = (stream.clone_htod(&slot_ids).unwrap(), stream.clone_htod(&lens).unwrap());
    {
        let s = DeviceViewMut::write(&mut d_state, &stream);
        let (rv, rk) = (DeviceView::read(&d_rv, &stream), DeviceView::read(&d_rk, &stream));
        let (rg, rb) = (DeviceView::read(&d_rg, &stream), DeviceView::read(&d_rb, &stream));
        let (sl, ln) = (DeviceView::read(&d_slots, &stream), DeviceView::read(&d_lens, &stream));
        assert_eq!(s.len(), state.len());
        let p = params(s.ptr(), rv.ptr(), rk.ptr(), rg.ptr(), rb.ptr(), sl.ptr(), ln.ptr());
        // SAFETY: every pointer comes from a live view covering the extent of the params.
        unsafe {
            launch(&stream, |raw| {
                replayssm_fold(replayssm_backend::REPLAYSSM_BACKEND_CUDA as i32, &p, raw)
            })
        }
        .expect("cuda fold");
    }
    let gpu = stream.clone_dtoh(&d_state).expect("download");
    common::bits_equal(&gpu, &emu).expect("cudarc fold differs from the emulated fold");
}
