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
    let params = |state: *mut f32, rv, rk, rg, rb, s, l| replayssm_fold_params {
        state,
        ring_v: rv,
        ring_k: rk,
        ring_g: rg,
        ring_beta: rb,
        slots: s,
        accept_lens: l,
        batch: 3,
        num_slots: slots as i32,
        num_layers: 1,
        window: w as i32,
        H: h as i32,
        HV: hv as i32,
        K: k as i32,
        V: v as i32,
        dtype: 0,
        variant: 0,
        qk_l2norm: 1,
        ..Default::default()
    };

    let mut emu = state.clone();
    let p = params(
        emu.as_mut_ptr(),
        ring_v.as_ptr().cast(),
        ring_k.as_ptr().cast(),
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
        let p = params(
            s.ptr(),
            rv.ptr().cast(),
            rk.ptr().cast(),
            rg.ptr(),
            rb.ptr(),
            sl.ptr(),
            ln.ptr(),
        );
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
