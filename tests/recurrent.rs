//! Kernel R on the Reference and Emulated backends against the f64 reference (design §6), its
//! null/untouched-slot guarantees, strided views, and the typed errors of bad inputs.
mod common;

use common::*;
use replayssm::backend::Backend;
use replayssm::{ActBuffer, DType, Error, GateForm, HeadDims, RecurrentOutputs, Variant};
use replayssm_tools::workload::{GateData, RecurrentData};

const SHAPES: &[(HeadDims, &[usize])] = &[
    (
        HeadDims {
            h: 2,
            hv: 2,
            k: 64,
            v: 32,
        },
        &[3, 1, 5],
    ), // K != V
    (
        HeadDims {
            h: 1,
            hv: 2,
            k: 32,
            v: 48,
        },
        &[4, 2],
    ), // HV = 2H, V not a multiple of 16
    (
        HeadDims {
            h: 1,
            hv: 1,
            k: 128,
            v: 128,
        },
        &[16, 7],
    ), // K = V = 128, T = 16
    (
        HeadDims {
            h: 2,
            hv: 4,
            k: 256,
            v: 64,
        },
        &[2, 3],
    ), // widest K, HV = 2H
    (K96, &[3, 2]), // K = 96: three channels per lane, no vector width (SGLang's batched-fold tests)
];

/// The design §6 rule for one backend run: elementwise tolerance, no NaN (outputs were
/// poisoned), and no worse than twice the naive f32 reference's error.
fn assert_passes(data: &RecurrentData, what: &str) {
    let tol = output_tolerance(data.dtype);
    let emu = run(Backend::Emulated, data, true).unwrap();
    let naive = run(Backend::Reference, data, true).unwrap();
    let je = judge(data, &emu, tol);
    let jn = judge(data, &naive, tol);
    println!(
        "{what}: emulated o {} | state {} || naive o {:.2e} state {:.2e}",
        je.o, je.state, jn.o.max_abs_err, jn.state.max_abs_err
    );
    assert!(je.o.passed(), "{what}: outputs: {}", je.o);
    assert!(je.state.passed(), "{what}: state: {}", je.state);
    assert!(je.snapshots.passed(), "{what}: snapshots: {}", je.snapshots);
    assert!(
        jn.o.passed() && jn.state.passed() && jn.snapshots.passed(),
        "{what}: naive f32 reference: {} / {}",
        jn.o,
        jn.state
    );
    assert!(
        je.o.max_abs_err <= 2.0 * jn.o.max_abs_err,
        "{what}: output error {:.3e} > 2x naive {:.3e}",
        je.o.max_abs_err,
        jn.o.max_abs_err
    );
    assert!(
        je.state.max_abs_err <= 2.0 * jn.state.max_abs_err,
        "{what}: state error {:.3e} > 2x naive {:.3e}",
        je.state.max_abs_err,
        jn.state.max_abs_err
    );
}

#[test]
fn emulated_matches_f64_reference_at_all_shapes_variants_and_dtypes() {
    let mut seed = 1000 + std::process::id() as u64; // fresh inputs every run
    for &(dims, seqlens) in SHAPES {
        for variant in [Variant::Gdn, Variant::Kda] {
            for dtype in DType::ALL {
                seed += 1;
                let data = RecurrentData::random(&spec(variant, dims, dtype, seqlens), seed);
                assert_passes(&data, &format!("{variant} {dtype} {dims:?} {seqlens:?} seed {seed}"));
            }
        }
    }
}

#[test]
fn the_safe_gate_matches_f64_and_is_the_gate_the_kernel_forms() {
    let mut seed = 1500 + run_seed();
    let variant = Variant::Kda;
    for &(dims, seqlens) in &SHAPES[..3] {
        for dtype in DType::ALL {
            seed += 1;
            let mut s = spec(variant, dims, dtype, seqlens);
            s.gate_form = safe_gate();
            let data = RecurrentData::random(&s, seed);
            let what = format!("safe gate: {variant} {dtype} {dims:?} {seqlens:?} seed {seed}");
            assert_passes(&data, &what);
            // The same raw inputs under the softplus gate give other states: the form reached
            // the kernel (a kernel that ignored it would pass the f64 check only by accident).
            let mut softplus = data.clone();
            if let GateData::Raw { form, .. } = &mut softplus.gate {
                *form = GateForm::Softplus;
            }
            let (a, b) = (
                run(Backend::Emulated, &data, false).unwrap(),
                run(Backend::Emulated, &softplus, false).unwrap(),
            );
            assert!(
                bits_equal(&a.state, &b.state).is_err(),
                "{what}: the form changed nothing"
            );
        }
    }
    // GDN's kernels compile the softplus gate alone: the safe gate is refused, state untouched.
    let mut s = spec(Variant::Gdn, SHAPES[0].0, DType::F32, SHAPES[0].1);
    s.gate_form = safe_gate();
    let data = RecurrentData::random(&s, seed + 1);
    let mut state = data.state.clone();
    let n = data.num_tokens();
    let d = data.dims;
    let mut o = ActBuffer::nan(DType::F32, n * d.hv * d.v);
    for backend in [Backend::Emulated, Backend::Reference] {
        let err = replayssm::recurrent(
            backend,
            &data.inputs(),
            &mut RecurrentOutputs {
                o: o.dense_mut(n, d.hv * d.v),
                state: &mut state,
                write_state: true,
                snapshots: None,
            },
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("lower_bound = -5 with variant GDN: the safe gate is KDA's"),
            "{backend}: {err}"
        );
        assert!(bits_equal(&state, &data.state).is_ok(), "{backend}: state written");
    }
}

#[test]
fn precomputed_gate_and_unnormalised_keys() {
    let dims = HeadDims {
        h: 2,
        hv: 4,
        k: 64,
        v: 64,
    };
    for variant in [Variant::Gdn, Variant::Kda] {
        for (raw_gate, qk_l2norm) in [(false, true), (false, false), (true, false)] {
            let mut s = spec(variant, dims, DType::F32, &[5, 3]);
            s.raw_gate = raw_gate;
            s.qk_l2norm = qk_l2norm;
            let data = RecurrentData::random(&s, 77 + raw_gate as u64 * 2 + qk_l2norm as u64);
            assert_passes(&data, &format!("{variant} raw_gate={raw_gate} l2norm={qk_l2norm}"));
        }
    }
}

#[test]
fn null_slots_get_zero_outputs_and_touch_nothing() {
    let dims = HeadDims {
        h: 1,
        hv: 2,
        k: 64,
        v: 32,
    };
    let mut s = spec(Variant::Gdn, dims, DType::BF16, &[3, 4, 2, 5]);
    s.null_requests = vec![1, 3];
    s.spare_slots = 3;
    let data = RecurrentData::random(&s, 5);
    for backend in [Backend::Emulated, Backend::Reference] {
        let r = run(backend, &data, true).unwrap();
        let row = dims.hv * dims.v;
        let per_slot = dims.state_elems();
        let t = 5;
        for req in [1usize, 3] {
            let (bos, eos) = (data.cu_seqlens[req] as usize, data.cu_seqlens[req + 1] as usize);
            for tok in bos..eos {
                for i in 0..row {
                    assert_eq!(
                        r.o.get(tok * row + i).to_bits(),
                        0,
                        "{backend}: null request {req} output not zero"
                    );
                }
            }
            let snaps = &r.snapshots[req * t * per_slot..(req + 1) * t * per_slot];
            assert!(
                snaps.iter().all(|x| x.is_nan()),
                "{backend}: snapshots of a null request were written"
            );
        }
        // Slots no live request uses keep their exact bits.
        let live: Vec<usize> = data.slots.iter().filter(|&&x| x >= 0).map(|&x| x as usize).collect();
        for slot in 0..data.state.len() / per_slot {
            if !live.contains(&slot) {
                let range = slot * per_slot..(slot + 1) * per_slot;
                assert!(
                    r.state[range.clone()]
                        .iter()
                        .zip(&data.state[range])
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{backend}: untouched slot {slot} changed"
                );
            }
        }
        let j = judge(&data, &r, output_tolerance(DType::BF16));
        assert!(j.o.passed() && j.state.passed(), "{backend}: {} / {}", j.o, j.state);
    }
}

#[test]
fn without_write_back_the_pool_stays_bit_identical() {
    let dims = HeadDims {
        h: 2,
        hv: 2,
        k: 32,
        v: 32,
    };
    let data = RecurrentData::random(&spec(Variant::Kda, dims, DType::F16, &[4, 4]), 9);
    let n = data.num_tokens();
    let mut o = ActBuffer::nan(DType::F16, n * dims.hv * dims.v);
    let mut state = data.state.clone();
    replayssm::recurrent(
        Backend::Emulated,
        &data.inputs(),
        &mut RecurrentOutputs {
            o: o.dense_mut(n, dims.hv * dims.v),
            state: &mut state,
            write_state: false,
            snapshots: None,
        },
    )
    .unwrap();
    assert!(state.iter().zip(&data.state).all(|(a, b)| a.to_bits() == b.to_bits()));
    assert!(o.to_f32().iter().all(|x| x.is_finite()));
}

#[test]
fn strided_views_into_one_packed_mixed_qkv_row() {
    // mixed_qkv rows: q | k | v | padding, as engines lay them out; outputs strided too.
    let dims = HeadDims {
        h: 2,
        hv: 4,
        k: 64,
        v: 32,
    };
    let data = RecurrentData::random(&spec(Variant::Gdn, dims, DType::BF16, &[3, 6]), 21);
    let n = data.num_tokens();
    let (qk, vw) = (dims.h * dims.k, dims.hv * dims.v);
    let stride = 2 * qk + vw + 24;
    let mut mixed = vec![0f32; n * stride];
    let (q, k, v) = (data.q.to_f32(), data.k.to_f32(), data.v.to_f32());
    for t in 0..n {
        mixed[t * stride..t * stride + qk].copy_from_slice(&q[t * qk..(t + 1) * qk]);
        mixed[t * stride + qk..t * stride + 2 * qk].copy_from_slice(&k[t * qk..(t + 1) * qk]);
        mixed[t * stride + 2 * qk..t * stride + 2 * qk + vw].copy_from_slice(&v[t * vw..(t + 1) * vw]);
    }
    let mixed = ActBuffer::from_f32(DType::BF16, &mixed);
    let dense = run(Backend::Emulated, &data, false).unwrap();
    let mut inp = data.inputs();
    inp.q = mixed.view(0, n, qk, stride);
    inp.k = mixed.view(qk, n, qk, stride);
    inp.v = mixed.view(2 * qk, n, vw, stride);
    let o_stride = vw + 8;
    let mut o = ActBuffer::nan(DType::BF16, n * o_stride);
    let mut state = data.state.clone();
    replayssm::recurrent(
        Backend::Emulated,
        &inp,
        &mut RecurrentOutputs {
            o: o.view_mut(0, n, vw, o_stride),
            state: &mut state,
            write_state: true,
            snapshots: None,
        },
    )
    .unwrap();
    for t in 0..n {
        for i in 0..vw {
            assert_eq!(
                o.get(t * o_stride + i).to_bits(),
                dense.o.get(t * vw + i).to_bits(),
                "token {t} elem {i}"
            );
        }
        for i in vw..o_stride {
            assert!(
                o.get(t * o_stride + i).is_nan(),
                "padding between strided outputs was written"
            );
        }
    }
    assert!(state.iter().zip(&dense.state).all(|(a, b)| a.to_bits() == b.to_bits()));
}

/// Runs with one input broken by `mutate`, expecting a typed error and untouched outputs.
fn expect_error(backend: Backend, mutate: impl FnOnce(&mut RecurrentData), check: impl Fn(&Error) -> bool, what: &str) {
    let dims = HeadDims {
        h: 2,
        hv: 4,
        k: 64,
        v: 32,
    };
    let mut data = RecurrentData::random(&spec(Variant::Gdn, dims, DType::F32, &[3, 2]), 3);
    mutate(&mut data);
    let n = data.num_tokens();
    let mut o = ActBuffer::nan(DType::F32, n * dims.hv * dims.v);
    let mut state = data.state.clone();
    let err = replayssm::recurrent(
        backend,
        &data.inputs(),
        &mut RecurrentOutputs {
            o: o.dense_mut(n, dims.hv * dims.v),
            state: &mut state,
            write_state: true,
            snapshots: None,
        },
    )
    .expect_err(what);
    println!("{what}: {err}");
    assert!(check(&err), "{what}: unexpected error {err:?}");
    assert!(
        o.to_f32().iter().all(|x| x.is_nan()),
        "{what}: outputs written despite the error"
    );
    assert!(
        state.iter().zip(&data.state).all(|(a, b)| a.to_bits() == b.to_bits()),
        "{what}: state changed"
    );
}

#[test]
fn bad_inputs_are_typed_errors_before_launch() {
    for backend in [Backend::Emulated, Backend::Reference] {
        expect_error(
            backend,
            |d| d.slots[1] = 99,
            |e| matches!(e, Error::SlotOutOfRange { index: 1, slot: 99, .. }),
            "slot out of range",
        );
        expect_error(
            backend,
            |d| d.slots[0] = -2,
            |e| matches!(e, Error::SlotOutOfRange { .. }),
            "negative slot",
        );
        expect_error(
            backend,
            |d| d.slots[1] = d.slots[0],
            |e| matches!(e, Error::DuplicateSlot { .. }),
            "duplicate live slot",
        );
        expect_error(
            backend,
            |d| d.q = ActBuffer::F32(d.q.to_f32()[..d.q.len() - 64].to_vec()),
            |e| matches!(e, Error::OutOfBounds { tensor: "q", .. }),
            "q too short",
        );
        expect_error(
            backend,
            |d| d.k = ActBuffer::from_f32(DType::BF16, &d.k.to_f32()),
            |e| matches!(e, Error::DType { tensor: "k", .. }),
            "k dtype",
        );
        expect_error(
            backend,
            |d| d.cu_seqlens[1] = 7,
            |e| matches!(e, Error::SeqLens(_)),
            "cu_seqlens decreasing",
        );
        expect_error(
            backend,
            |d| d.cu_seqlens[0] = 1,
            |e| matches!(e, Error::SeqLens(_)),
            "cu_seqlens not starting at 0",
        );
        expect_error(
            backend,
            |d| {
                d.state.pop();
            },
            |e| matches!(e, Error::Shape { tensor: "state", .. }),
            "state pool size",
        );
        expect_error(
            backend,
            |d| d.dims.hv = 3,
            |e| matches!(e, Error::Dims(_)),
            "HV not a multiple of H",
        );
        expect_error(
            backend,
            |d| d.scale = f32::NAN,
            |e| matches!(e, Error::BadParam(m) if m == "scale = NaN is not finite"),
            "NaN scale",
        );
        expect_error(
            backend,
            |d| {
                if let GateData::Raw { a_log, .. } = &mut d.gate {
                    a_log.push(0.0);
                }
            },
            |e| matches!(e, Error::Shape { tensor: "A_log", .. }),
            "A_log length",
        );
    }
    // Head dims outside the compiled set: the kernels refuse, the reference runs.
    expect_error(
        Backend::Emulated,
        |d| {
            d.dims.k = 48;
            let n = d.num_tokens();
            d.q = ActBuffer::from_f32(DType::F32, &vec![0.1; n * 2 * 48]);
            d.k = d.q.clone();
            d.state = vec![0.1; 6 * 4 * 32 * 48];
        },
        |e| {
            matches!(
                e,
                Error::Unsupported {
                    backend: Backend::Emulated,
                    ..
                }
            )
        },
        "K = 48 on the emulated kernel",
    );
}

#[test]
fn stride_smaller_than_a_row_is_refused() {
    let dims = HeadDims {
        h: 2,
        hv: 4,
        k: 64,
        v: 32,
    };
    let data = RecurrentData::random(&spec(Variant::Gdn, dims, DType::F32, &[3, 2]), 4);
    let n = data.num_tokens();
    let mut inp = data.inputs();
    inp.v = data.v.view(0, n, dims.hv * dims.v, dims.hv * dims.v - 1);
    let mut o = ActBuffer::nan(DType::F32, n * dims.hv * dims.v);
    let mut state = data.state.clone();
    let err = replayssm::recurrent(
        Backend::Emulated,
        &inp,
        &mut RecurrentOutputs {
            o: o.dense_mut(n, dims.hv * dims.v),
            state: &mut state,
            write_state: true,
            snapshots: None,
        },
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            Error::StrideTooSmall {
                tensor: "v",
                stride: 127,
                row: 128
            }
        ),
        "{err:?}"
    );
    // And a snapshot buffer of the wrong size.
    let mut snaps = vec![0f32; 5];
    let err = replayssm::recurrent(
        Backend::Emulated,
        &data.inputs(),
        &mut RecurrentOutputs {
            o: o.dense_mut(n, dims.hv * dims.v),
            state: &mut state,
            write_state: true,
            snapshots: Some(&mut snaps),
        },
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Shape {
                tensor: "snapshots",
                ..
            }
        ),
        "{err:?}"
    );
}

/// A stride whose extent `offset + (tokens - 1) * stride + row` overflows `usize` is refused as
/// out of bounds. (The unchecked product wrapped: 8 * 2^61 = 2^64 became 0, the view passed the
/// extent check and the kernel read far outside the buffer; in a checked build it panicked.)
#[test]
fn a_stride_whose_extent_overflows_is_refused_not_wrapped() {
    let dims = HeadDims {
        h: 1,
        hv: 1,
        k: 32,
        v: 32,
    };
    let data = RecurrentData::random(&spec(Variant::Gdn, dims, DType::F32, &[9]), 5);
    let n = data.num_tokens();
    assert_eq!(n, 9);
    let mut inp = data.inputs();
    inp.k = data.k.view(0, n, dims.h * dims.k, 1 << 61);
    let mut o = ActBuffer::nan(DType::F32, n * dims.hv * dims.v);
    let mut state = data.state.clone();
    let err = replayssm::recurrent(
        Backend::Emulated,
        &inp,
        &mut RecurrentOutputs {
            o: o.dense_mut(n, dims.hv * dims.v),
            state: &mut state,
            write_state: true,
            snapshots: None,
        },
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            Error::OutOfBounds {
                tensor: "k",
                needed: usize::MAX,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(o.to_f32().iter().all(|x| x.is_nan()), "outputs written");
    assert_eq!(state, data.state, "state written");
}
