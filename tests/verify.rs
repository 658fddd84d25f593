//! Kernel V (design §4 V) on the Emulated and Reference backends: outputs against the f64
//! reference for every window length, the ring records, a read-only checkpoint, null slots, and
//! garbage device-side slots, for every implementation of V (`replayssm::tuning`). (Its tree mode
//! VT: tests/tree.rs; F and P: tests/fold.rs.)
mod common;

use common::spec_chain::{pool_for, run_verify, small};

use common::*;
use replayssm::backend::Backend;
use replayssm::numerics::compare;
use replayssm::reference;
use replayssm::ring::{RingShape, SpecRing};
use replayssm::tuning::{self, Choice, Kernel};
use replayssm::{ActBuffer, DType, HeadDims, RecurrentOutputs, Variant};
use replayssm_tools::workload::RecurrentData;

#[test]
fn verify_matches_f64_reference_for_every_window_length() {
    let shapes = [
        HeadDims {
            h: 2,
            hv: 4,
            k: 64,
            v: 32,
        },
        HeadDims {
            h: 1,
            hv: 1,
            k: 128,
            v: 128,
        },
        HeadDims {
            h: 1,
            hv: 2,
            k: 32,
            v: 48,
        },
        // At K <= 128 STAGED's lanes hold DEFAULT's channels and reduce over DEFAULT's tree, so
        // its outputs are DEFAULT's bits; at K = 256 a lane holds two groups of 4 and they differ.
        HeadDims {
            h: 1,
            hv: 1,
            k: 256,
            v: 32,
        },
        // K = 96: three channels per lane (STAGED's E = 3 too, so DEFAULT's bits), last so that
        // the shapes above keep their dtypes.
        K96,
    ];
    let mut seed = 3000 + run_seed();
    let mut differing = 0usize; // cases where a STAGED output's bits differ from DEFAULT's
    for (si, &dims) in shapes.iter().enumerate() {
        for t in [1usize, 2, 4, 6, 8, 16] {
            for variant in [Variant::Gdn, Variant::Kda] {
                let dtype = DType::ALL[(t + si) % 3];
                seed += 1;
                let mut s = spec(variant, dims, dtype, &[t, t.div_ceil(2), t]);
                s.null_requests = vec![1];
                s.raw_gate = t % 4 != 2;
                if s.raw_gate && variant == Variant::Kda && (t + si) % 2 == 1 {
                    s.gate_form = safe_gate();
                }
                let data = RecurrentData::random(&s, seed);
                let (shape, pool) = pool_for(&data, 2, t + 1, seed);
                let pool_copy = pool.state().to_vec();
                let layer_pool = &pool.state()[shape.pool_offset(1, 0)..shape.pool_offset(2, 0)];
                let f64ref = reference::recurrent::<f64>(&data.inputs(), layer_pool);
                let naive = reference::recurrent::<f32>(&data.inputs(), layer_pool);
                let tol = output_tolerance(dtype);
                let naive_o: Vec<f32> = naive.o.iter().map(|&x| dtype.round(x)).collect();
                let naive_err = compare(&naive_o, &f64ref.o, tol);
                let mut default_ring = None;
                let mut default_o = None;
                for choice in Choice::all(Kernel::V) {
                    let _pinned = tuning::force(Kernel::V, choice);
                    let mut ring = SpecRing::new(shape, data.qk_l2norm).unwrap();
                    let o = run_verify(Backend::Emulated, &data, &pool, 1, Some(&mut ring)).unwrap();
                    let c = compare(&o.to_f32(), &f64ref.o, tol);
                    let what = format!(
                        "V {choice}, {variant} {dtype} {dims:?} T={t} raw_gate={} {:?} seed {seed}",
                        s.raw_gate, s.gate_form
                    );
                    // Every implementation writes the same raw ring records, bit for bit.
                    match &default_o {
                        None => default_o = Some(o.to_f32()),
                        Some(d) => differing += usize::from(bits_equal(&o.to_f32(), d).is_err()),
                    }
                    let records = [ring.v.to_f32(), ring.k.to_f32(), ring.g.clone(), ring.beta.clone()];
                    match &default_ring {
                        None => default_ring = Some(records),
                        Some(d) => assert!(
                            records.iter().zip(d).all(|(x, y)| bits_equal(x, y).is_ok()),
                            "{what}: its ring differs from the default implementation's"
                        ),
                    }
                    println!("{what}: verify {c} | naive {:.2e}", naive_err.max_abs_err);
                    assert!(c.passed(), "{what}: {c}");
                    assert!(
                        c.max_abs_err <= reordered_bound(naive_err.max_abs_err, &f64ref.o),
                        "{what}: {:.3e} > 2x naive {:.3e} + 4 ulp",
                        c.max_abs_err,
                        naive_err.max_abs_err
                    );
                    // Ring writing does not change the outputs (bit-equal without a ring).
                    let again = run_verify(Backend::Emulated, &data, &pool, 1, None).unwrap();
                    assert_eq!(o, again, "{what}: ring writing changed the outputs");
                    check_ring(&data, &shape, &ring, 1);
                    // The checkpoint is read only: the kernel got a pointer to it, so check the bits.
                    assert!(
                        bits_equal(pool.state(), &pool_copy).is_ok(),
                        "{what}: verify changed the checkpoint pool"
                    );
                    // And V agrees with R (same backend) within the output tolerance.
                    let mut r_state = layer_pool.to_vec();
                    let n = data.num_tokens();
                    let mut r_o = ActBuffer::nan(dtype, n * dims.hv * dims.v);
                    replayssm::recurrent(
                        Backend::Emulated,
                        &data.inputs(),
                        &mut RecurrentOutputs {
                            o: r_o.dense_mut(n, dims.hv * dims.v),
                            state: &mut r_state,
                            write_state: false,
                            snapshots: None,
                        },
                    )
                    .unwrap();
                    let r64: Vec<f64> = r_o.to_f32().iter().map(|&x| x as f64).collect();
                    let vr = compare(&o.to_f32(), &r64, tol);
                    assert!(
                        vr.non_finite == 0
                            && vr.max_abs_err <= 2.0 * c.max_abs_err.max(naive_err.max_abs_err) + tol.atol,
                        "{what}: V vs R {vr}"
                    );
                }
            }
        }
    }
    // The pinned implementations really ran: at K = 256 STAGED reduces in another order, so some
    // of its outputs differ from DEFAULT's in the last bits (within the tolerance checked above).
    assert!(
        differing > 0,
        "every STAGED output equals DEFAULT's bit for bit: was STAGED launched?"
    );
}

/// Raw records equal the inputs bit for bit; g/beta match the f64 gate; null slots and
/// positions past each window are untouched (still NaN).
fn check_ring(data: &RecurrentData, shape: &RingShape, ring: &SpecRing, layer: usize) {
    let d = data.dims;
    let inp = data.inputs();
    let gw = d.gate_width(data.variant);
    for slot in 0..shape.slots {
        let req = data.slots.iter().position(|&s| s == slot as i32);
        let len = req.map_or(0, |r| (data.cu_seqlens[r + 1] - data.cu_seqlens[r]) as usize);
        for l in 0..shape.layers {
            for t in 0..shape.window {
                let written = l == layer && t < len;
                for h in 0..d.h {
                    let i = shape.k_index(l, slot, h, t);
                    for j in 0..d.k {
                        let x = ring.k.get(i + j);
                        if written {
                            let tok = data.cu_seqlens[req.unwrap()] as usize + t;
                            assert_eq!(x.to_bits(), inp.k.at(tok, h * d.k + j).to_bits(), "ring k");
                        } else {
                            assert!(x.is_nan(), "ring k written at layer {l} slot {slot} t {t}");
                        }
                    }
                }
                for hv in 0..d.hv {
                    let i = shape.v_index(l, slot, hv, t);
                    let gi = shape.g_index(l, slot, hv, t);
                    let bi = shape.beta_index(l, slot, hv, t);
                    if written {
                        let tok = data.cu_seqlens[req.unwrap()] as usize + t;
                        for j in 0..d.v {
                            assert_eq!(
                                ring.v.get(i + j).to_bits(),
                                inp.v.at(tok, hv * d.v + j).to_bits(),
                                "ring v"
                            );
                        }
                        let (g, beta) = reference::gate_at::<f64>(&inp.gate, data.variant, &d, tok, hv);
                        for (j, &gj) in g.iter().enumerate().take(gw) {
                            assert!((ring.g[gi + j] as f64 - gj).abs() <= 1e-6 + 1e-6 * gj.abs(), "ring g");
                        }
                        assert!((ring.beta[bi] as f64 - beta).abs() <= 1e-6, "ring beta");
                    } else {
                        assert!(
                            ring.v.get(i).is_nan() && ring.g[gi].is_nan() && ring.beta[bi].is_nan(),
                            "ring v/g/beta written at layer {l} slot {slot} t {t}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn verify_null_slots_get_zero_outputs_and_reference_backend_agrees() {
    let dims = HeadDims {
        h: 1,
        hv: 2,
        k: 32,
        v: 32,
    };
    let mut s = spec(Variant::Kda, dims, DType::F32, &[4, 3, 4]);
    s.null_requests = vec![0, 2];
    let data = RecurrentData::random(&s, 41);
    let (shape, pool) = pool_for(&data, 1, 4, 41);
    for backend in [Backend::Emulated, Backend::Reference] {
        let mut ring = SpecRing::new(shape, true).unwrap();
        let o = run_verify(backend, &data, &pool, 0, Some(&mut ring)).unwrap();
        for tok in (0..4).chain(7..11) {
            for i in 0..dims.hv * dims.v {
                assert_eq!(
                    o.get(tok * dims.hv * dims.v + i).to_bits(),
                    0,
                    "{backend}: null request output"
                );
            }
        }
        check_ring(&data, &shape, &ring, 0);
    }
}

#[test]
fn verify_of_a_garbage_device_slot_is_skipped_and_writes_no_ring_outside_its_buffers() {
    use replayssm::ffi;
    use replayssm_tools::workload::GateData;
    let (data, shape, pool, _) = small();
    let d = shape.dims;
    let n = data.num_tokens();
    let guard = 2048;
    let with_guards = |len: usize| -> Vec<f32> {
        let mut v = vec![f32::from_bits(0x7fc0_dead); guard];
        v.extend(std::iter::repeat_n(f32::NAN, len));
        v.extend(std::iter::repeat_n(f32::from_bits(0x7fc0_beef), guard));
        v
    };
    let ls = shape.layers * shape.slots * shape.window;
    let (mut rv, mut rk, mut rg, mut rb) = (
        with_guards(ls * d.hv * d.v),
        with_guards(ls * d.h * d.k),
        with_guards(ls * d.hv),
        with_guards(ls * d.hv),
    );
    let GateData::Raw {
        a, b, a_log, dt_bias, ..
    } = &data.gate
    else {
        unreachable!()
    };
    let slots = [1, 1 << 30];
    // Every implementation: (impl, block_rows).
    for (imp, block_rows) in [(0, 0), (1, 0), (1, 16)] {
        let mut o = vec![f32::NAN; n * d.hv * d.v];
        let mut word = 0u32;
        let p = ffi::rssm_verify_params {
            base: ffi::rssm_base_params {
                impl_: imp,
                block_rows,
                slots: slots.as_ptr(),
                state: pool.state().as_ptr().cast_mut(),
                error_word: &mut word,
                batch: 2,
                num_slots: shape.slots as i32,
                num_layers: shape.layers as i32,
                layer: 1,
                H: d.h as i32,
                HV: d.hv as i32,
                K: d.k as i32,
                V: d.v as i32,
                dtype: ffi::rssm_dtype_RSSM_DTYPE_F32 as i32,
                variant: ffi::rssm_variant_RSSM_VARIANT_GDN as i32,
                qk_l2norm: 1,
                ..Default::default()
            },
            tokens: ffi::rssm_token_params {
                q: data.q.as_bytes().as_ptr().cast(),
                k: data.k.as_bytes().as_ptr().cast(),
                v: data.v.as_bytes().as_ptr().cast(),
                a: a.as_bytes().as_ptr().cast(),
                b: b.as_bytes().as_ptr().cast(),
                A_log: a_log.as_ptr(),
                dt_bias: dt_bias.as_ptr(),
                o: o.as_mut_ptr().cast(),
                q_stride: (d.h * d.k) as i64,
                k_stride: (d.h * d.k) as i64,
                v_stride: (d.hv * d.v) as i64,
                a_stride: d.hv as i64,
                b_stride: d.hv as i64,
                o_stride: (d.hv * d.v) as i64,
                scale: data.scale,
                ..Default::default()
            },
            ring: ffi::rssm_ring_params {
                v: rv[guard..].as_mut_ptr().cast(),
                k: rk[guard..].as_mut_ptr().cast(),
                g: rg[guard..].as_mut_ptr(),
                beta: rb[guard..].as_mut_ptr(),
                window: shape.window as i32,
                ..Default::default()
            },
            cu_seqlens: data.cu_seqlens.as_ptr(),
            num_tokens: n as i32,
            max_seqlen: 4,
            ..Default::default()
        };
        // SAFETY: host buffers sized for these params; only the second slot index is garbage.
        let st = unsafe { ffi::rssm_emu_verify(&p, std::ptr::null_mut()) };
        assert_eq!(st, ffi::rssm_status_RSSM_OK);
        assert_eq!(word, ffi::RSSM_DEVERR_SLOT_OUT_OF_RANGE);
        for buf in [&rv, &rk, &rg, &rb] {
            assert!(
                buf[..guard].iter().all(|x| x.to_bits() == 0x7fc0_dead),
                "ring write before its buffer"
            );
            assert!(
                buf[buf.len() - guard..].iter().all(|x| x.to_bits() == 0x7fc0_beef),
                "ring write after its buffer"
            );
        }
        // Request 1 (tokens 3..7) got zeros; request 0 real outputs.
        let row = d.hv * d.v;
        assert!(
            o[3 * row..].iter().all(|x| x.to_bits() == 0),
            "skipped request's outputs not zero"
        );
        assert!(
            o[..3 * row].iter().all(|x| x.is_finite()),
            "impl {imp}/{block_rows}: live request's outputs missing"
        );
    }
}
