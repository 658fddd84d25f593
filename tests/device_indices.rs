//! Device-side indices the host never validated (CUDA-graph replay): the kernel must bounds-check
//! them, skip the row without touching memory outside the pool, and flag the error word. Here
//! the emulated launcher is called through the raw C ABI, bypassing the safe wrapper's checks.
mod common;

use common::spec;
use replayssm::checks::can_implement::rssm_recurrent_can_implement;
use replayssm::ffi;
use replayssm::{ActBuffer, DType, HeadDims, Variant};
use replayssm_tools::workload::{GateData, RecurrentData};

struct Launch {
    data: RecurrentData,
    o: ActBuffer,
    state: Vec<f32>,
    error_word: u32,
}

fn launch(slots: &[i32], cu: &[i32]) -> (Launch, ffi::rssm_status) {
    let dims = HeadDims {
        h: 1,
        hv: 2,
        k: 32,
        v: 32,
    };
    let data = RecurrentData::random(&spec(Variant::Gdn, dims, DType::F32, &[3, 2, 4]), 8);
    let n = data.num_tokens();
    let mut l = Launch {
        o: ActBuffer::nan(DType::F32, n * dims.hv * dims.v),
        state: data.state.clone(),
        error_word: 0,
        data,
    };
    let GateData::Raw {
        a, b, a_log, dt_bias, ..
    } = &l.data.gate
    else {
        unreachable!()
    };
    let p = ffi::rssm_recurrent_params {
        base: ffi::rssm_base_params {
            slots: slots.as_ptr(),
            state: l.state.as_mut_ptr(),
            error_word: &mut l.error_word,
            batch: 3,
            num_slots: (l.state.len() / dims.state_elems()) as i32,
            H: 1,
            HV: 2,
            K: 32,
            V: 32,
            dtype: ffi::rssm_dtype_RSSM_DTYPE_F32 as i32,
            variant: ffi::rssm_variant_RSSM_VARIANT_GDN as i32,
            qk_l2norm: 1,
            num_layers: 1,
            ..Default::default()
        },
        tokens: ffi::rssm_token_params {
            q: l.data.q.as_bytes().as_ptr().cast(),
            k: l.data.k.as_bytes().as_ptr().cast(),
            v: l.data.v.as_bytes().as_ptr().cast(),
            a: a.as_bytes().as_ptr().cast(),
            b: b.as_bytes().as_ptr().cast(),
            A_log: a_log.as_ptr(),
            dt_bias: dt_bias.as_ptr(),
            o: l.o.as_bytes().as_ptr() as *mut _,
            q_stride: 32,
            k_stride: 32,
            v_stride: 64,
            a_stride: 2,
            b_stride: 2,
            o_stride: 64,
            scale: 0.17,
            ..Default::default()
        },
        cu_seqlens: cu.as_ptr(),
        num_tokens: n as i32,
        max_seqlen: 4,
        write_state: 1,
        ..Default::default()
    };
    // SAFETY: host buffers sized for these params; only the device-side indices are garbage.
    let st = unsafe { ffi::rssm_emu_recurrent(&p, std::ptr::null_mut()) };
    (l, st)
}

#[test]
fn out_of_range_slot_is_skipped_and_flagged() {
    let cu = [0, 3, 5, 9];
    let (good, st) = launch(&[0, 1, 2], &cu);
    assert_eq!(st, ffi::rssm_status_RSSM_OK);
    assert_eq!(good.error_word, 0);
    for garbage in [1_000_000, -7, i32::MAX, i32::MIN] {
        let (bad, st) = launch(&[0, garbage, 2], &cu);
        assert_eq!(st, ffi::rssm_status_RSSM_OK, "the launch itself is fine");
        assert_eq!(
            bad.error_word,
            ffi::RSSM_DEVERR_SLOT_OUT_OF_RANGE,
            "slot {garbage} not flagged"
        );
        // Request 1 (tokens 3..5): zero outputs; other requests as in the good launch.
        let row = 64;
        for t in 0..9 {
            for i in 0..row {
                let (x, y) = (bad.o.get(t * row + i), good.o.get(t * row + i));
                if (3..5).contains(&t) {
                    assert_eq!(x.to_bits(), 0, "slot {garbage}: output of the skipped request not zero");
                } else {
                    assert_eq!(x.to_bits(), y.to_bits(), "slot {garbage}: another request changed");
                }
            }
        }
        // Slot 1, which the good launch wrote, keeps its input bits: nothing was stored for request 1.
        let per = 2 * 32 * 32;
        assert_eq!(&bad.state[per..2 * per], &bad.data.state[per..2 * per]);
    }
}

#[test]
fn garbage_seqlens_are_skipped_and_flagged() {
    for cu in [[0, 3, 2, 9], [0, 3, 5, 1000], [-4, 3, 5, 9], [0, 3, 5, 9 + 64]] {
        let (l, st) = launch(&[0, 1, 2], &cu);
        assert_eq!(st, ffi::rssm_status_RSSM_OK);
        assert_ne!(l.error_word & ffi::RSSM_DEVERR_BAD_SEQLENS, 0, "{cu:?} not flagged");
    }
}

#[test]
fn can_implement_rejects_what_the_host_can_see() {
    let mut p = ffi::rssm_recurrent_params::default();
    // SAFETY: validation only reads the struct.
    assert_eq!(
        unsafe { rssm_recurrent_can_implement(&p, 1) },
        ffi::rssm_status_RSSM_ERR_INVALID_ARGUMENT
    );
    assert_eq!(
        unsafe { rssm_recurrent_can_implement(std::ptr::null(), 1) },
        ffi::rssm_status_RSSM_ERR_INVALID_ARGUMENT
    );
    assert_eq!(
        unsafe { ffi::rssm_emu_recurrent(&p, std::ptr::null_mut()) },
        ffi::rssm_status_RSSM_ERR_INVALID_ARGUMENT
    );
    p.base.K = 48;
    assert_eq!(
        unsafe { rssm_recurrent_can_implement(&p, 1) },
        ffi::rssm_status_RSSM_ERR_INVALID_ARGUMENT
    );
}
