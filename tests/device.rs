//! The device-memory runtime (`replayssm::memory`, the `Stream` calls): on the Emulated backend
//! (CI), device pools, rings and inputs give the same bits as the host calls for every kernel
//! (R, V, VT, F, FT, P, D with its cursor calls, materialise); memory that the launch cannot
//! compute on is refused by name with nothing written. On a GPU the same calls run through
//! `replayssm_tools::staged` in tests/gpu.rs, tests/decode.rs and tests/tree.rs.

mod common;

use common::spec;
use common::spec_chain::pool_for;
use replayssm::config::{resolve, EngineFlags};
use replayssm::kernels::decode::DecodeRows;
use replayssm::memory::{DeviceAct, DeviceSlice, DeviceVec, Location, Stream};
use replayssm::{
    fold, materialize, recurrent, replay, verify, AcceptedPaths, ActBuffer, Backend, CheckpointPool, DType, DecodeRing,
    Device, DeviceAccepted, DraftTree, Error, ForceFlush, HeadDims, RecurrentOutputs, SpecRing, Track, Variant,
};
use replayssm_tools::staged::DeviceTokens;
use replayssm_tools::workload::RecurrentData;

const DIMS: HeadDims = HeadDims {
    h: 1,
    hv: 2,
    k: 32,
    v: 32,
};

/// A fresh seed per run (design §6), printed so that a failure can be replayed.
fn fresh(n: u64) -> u64 {
    let s = n + 1000 * std::process::id() as u64;
    println!("seed {s}");
    s
}

fn emulated() -> Stream {
    Stream::new(Backend::Emulated).unwrap()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn act_bits(a: &ActBuffer) -> Vec<u32> {
    a.to_f32().iter().map(|x| x.to_bits()).collect()
}

fn ints(stream: &Stream, v: &[i32]) -> DeviceVec<i32> {
    DeviceVec::from_host(stream, v).unwrap()
}

#[test]
fn device_verify_fold_and_replay_match_the_host_calls_bit_for_bit() {
    for (variant, dtype, seed) in [
        (Variant::Gdn, DType::BF16, fresh(1)),
        (Variant::Kda, DType::F32, fresh(2)),
    ] {
        let data = RecurrentData::random(&spec(variant, DIMS, dtype, &[4, 2, 3]), seed);
        let (shape, mut pool) = pool_for(&data, 2, 4, seed);
        let d = data.dims;
        let n = data.num_tokens();
        let stream = emulated();
        let mut dpool = pool.to_device(&stream).unwrap();
        assert_eq!(dpool.location(), Location::Device(Backend::Emulated));
        let mut ring = SpecRing::new(shape, true).unwrap();
        let mut dring = SpecRing::for_pool(&dpool, 4, dtype, true).unwrap();
        let tokens = DeviceTokens::upload(&stream, &data.inputs()).unwrap();
        let mut o = ActBuffer::nan(dtype, n * d.hv * d.v);
        let mut o_dev = DeviceAct::poisoned(Backend::Emulated, dtype, n * d.hv * d.v).unwrap();
        for layer in 0..2 {
            verify(
                Backend::Emulated,
                &data.inputs(),
                None,
                &pool,
                layer,
                &mut o.dense_mut(n, d.hv * d.v),
                Some(&mut ring),
            )
            .unwrap();
            stream
                .verify(
                    &tokens.inputs(),
                    None,
                    &dpool,
                    layer,
                    &mut o_dev.dense_mut(n, d.hv * d.v),
                    Some(&mut dring),
                )
                .unwrap();
            assert_eq!(
                act_bits(&o),
                act_bits(&o_dev.to_host(&stream).unwrap()),
                "{variant} V outputs"
            );
        }
        let hring = dring.to_host(&stream).unwrap();
        assert_eq!(act_bits(&ring.v), act_bits(&hring.v), "{variant} ring v");
        assert_eq!(act_bits(&ring.k), act_bits(&hring.k), "{variant} ring k");
        assert_eq!(bits(&ring.g), bits(&hring.g), "{variant} ring g");
        assert_eq!(bits(&ring.beta), bits(&hring.beta), "{variant} ring beta");

        // F with a track snapshot into a free slot, then P of one layer.
        let accept = [3, 0, 2];
        let free = (0..shape.slots as i32).find(|s| !data.slots.contains(s)).unwrap();
        let (ts, st) = ([free, -1, -1], [1, -1, -1]);
        fold(
            Backend::Emulated,
            &mut pool,
            &ring,
            &data.slots,
            &accept,
            Some(Track {
                slots: &ts[..],
                steps: &st[..],
            }),
        )
        .unwrap();
        let (slots, acc, dts, dst) = (
            ints(&stream, &data.slots),
            ints(&stream, &accept),
            ints(&stream, &ts),
            ints(&stream, &st),
        );
        stream
            .fold(
                &mut dpool,
                &dring,
                slots.as_slice(),
                acc.as_slice(),
                Some(Track {
                    slots: dts.as_slice(),
                    steps: dst.as_slice(),
                }),
            )
            .unwrap();
        assert_eq!(bits(pool.state()), bits(&dpool.state_vec(&stream)), "{variant} F");
        let counts = [1, 2, 0];
        replay(Backend::Emulated, &mut pool, &ring, 1, &data.slots, &counts).unwrap();
        let c = ints(&stream, &counts);
        stream
            .replay(&mut dpool, &dring, 1, slots.as_slice(), c.as_slice())
            .unwrap();
        assert_eq!(bits(pool.state()), bits(&dpool.state_vec(&stream)), "{variant} P");
        stream.check_errors().unwrap();
    }
}

/// The pool's contents on the host (a test-side download).
trait StateVec {
    fn state_vec(&self, stream: &Stream) -> Vec<f32>;
}

impl StateVec for CheckpointPool<Device> {
    fn state_vec(&self, stream: &Stream) -> Vec<f32> {
        let mut v = vec![0.0; self.shape().elems()];
        self.download(stream, &mut v).unwrap();
        v
    }
}

#[test]
fn device_recurrent_matches_the_host_call_bit_for_bit() {
    let data = RecurrentData::random(&spec(Variant::Kda, DIMS, DType::BF16, &[5, 3]), fresh(3));
    let d = data.dims;
    let n = data.num_tokens();
    let stream = emulated();
    let per = d.state_elems();
    let batch = 2;
    let (mut o, mut state, mut snaps) = (
        ActBuffer::nan(data.dtype, n * d.hv * d.v),
        data.state.clone(),
        vec![f32::NAN; batch * 5 * per],
    );
    recurrent(
        Backend::Emulated,
        &data.inputs(),
        &mut RecurrentOutputs {
            o: o.dense_mut(n, d.hv * d.v),
            state: &mut state[..],
            write_state: true,
            snapshots: Some(&mut snaps[..]),
        },
    )
    .unwrap();
    let tokens = DeviceTokens::upload(&stream, &data.inputs()).unwrap();
    let mut o_dev = DeviceAct::poisoned(Backend::Emulated, data.dtype, n * d.hv * d.v).unwrap();
    let mut dstate = DeviceVec::from_host(&stream, &data.state).unwrap();
    // The same poison as the host buffer: entries past a request's length stay as they were.
    let mut dsnaps = DeviceVec::from_host(&stream, &vec![f32::NAN; batch * 5 * per]).unwrap();
    stream
        .recurrent(
            &tokens.inputs(),
            &mut RecurrentOutputs::<Device> {
                o: o_dev.dense_mut(n, d.hv * d.v),
                state: dstate.as_mut_slice(),
                write_state: true,
                snapshots: Some(dsnaps.as_mut_slice()),
            },
        )
        .unwrap();
    assert_eq!(act_bits(&o), act_bits(&o_dev.to_host(&stream).unwrap()));
    assert_eq!(bits(&state), bits(&dstate.to_vec(&stream).unwrap()));
    assert_eq!(bits(&snaps), bits(&dsnaps.to_vec(&stream).unwrap()));
}

#[test]
fn device_tree_verify_and_fold_match_the_host_calls_bit_for_bit() {
    let seqlens = [4usize, 3];
    let seed = fresh(4);
    let data = RecurrentData::random(&spec(Variant::Gdn, DIMS, DType::F32, &seqlens), seed);
    let cu = data.cu_seqlens.clone();
    let tree = DraftTree::new(vec![-1, 0, 0, 1, -1, 0, 0], &cu).unwrap();
    let (shape, mut pool) = pool_for(&data, 1, 4, seed);
    let d = data.dims;
    let n = data.num_tokens();
    let stream = emulated();
    let mut dpool = pool.to_device(&stream).unwrap();
    let mut ring = SpecRing::new(shape, true).unwrap();
    let mut dring = SpecRing::for_pool(&dpool, 4, DType::F32, true).unwrap();
    let tokens = DeviceTokens::upload(&stream, &data.inputs()).unwrap();
    let mut o = ActBuffer::nan(DType::F32, n * d.hv * d.v);
    let mut o_dev = DeviceAct::poisoned(Backend::Emulated, DType::F32, n * d.hv * d.v).unwrap();
    verify(
        Backend::Emulated,
        &data.inputs(),
        Some(&tree),
        &pool,
        0,
        &mut o.dense_mut(n, d.hv * d.v),
        Some(&mut ring),
    )
    .unwrap();
    let parent = ints(&stream, tree.parent());
    stream
        .verify(
            &tokens.inputs(),
            Some(parent.as_slice()),
            &dpool,
            0,
            &mut o_dev.dense_mut(n, d.hv * d.v),
            Some(&mut dring),
        )
        .unwrap();
    assert_eq!(act_bits(&o), act_bits(&o_dev.to_host(&stream).unwrap()), "VT outputs");
    let paths = AcceptedPaths::from_nodes(&tree, &[Some(3), Some(2)]).unwrap();
    fold(Backend::Emulated, &mut pool, &ring, &data.slots, &paths, None).unwrap();
    let (slots, p) = (ints(&stream, &data.slots), ints(&stream, paths.as_slice()));
    stream
        .fold(
            &mut dpool,
            &dring,
            slots.as_slice(),
            DeviceAccepted::Paths {
                paths: p.as_slice(),
                width: paths.width(),
            },
            None,
        )
        .unwrap();
    assert_eq!(bits(pool.state()), bits(&dpool.state_vec(&stream)), "FT");
}

#[test]
fn a_device_decode_step_matches_the_host_step_bit_for_bit() {
    let data = RecurrentData::random(&spec(Variant::Kda, DIMS, DType::BF16, &[1, 1, 1]), fresh(5));
    let cfg = resolve(&EngineFlags::buffered_decode(Variant::Kda, 3)).unwrap();
    let ns = data.state.len() / data.dims.state_elems();
    let mut pool = CheckpointPool::new(&cfg, data.dims, 2, ns).unwrap();
    pool.state_mut()[..data.state.len()].copy_from_slice(&data.state);
    let mut ring = DecodeRing::attach(&pool).unwrap();
    let stream = emulated();
    let mut dpool = pool.to_device(&stream).unwrap();
    let mut dring = DecodeRing::attach(&dpool).unwrap();
    let d = data.dims;
    let b = data.slots.len();
    let tokens = DeviceTokens::upload(&stream, &data.inputs()).unwrap();
    let slots = ints(&stream, &data.slots);
    let mut positions = DeviceVec::<i32>::zeros(Backend::Emulated, b).unwrap();
    let mut o = ActBuffer::nan(data.dtype, b * d.hv * d.v);
    let mut o_dev = DeviceAct::poisoned(Backend::Emulated, data.dtype, b * d.hv * d.v).unwrap();
    // Four steps over a cache of 3: appends, a forced flush on row 1, the periodic flush.
    for step_no in 0..4 {
        let step = ring
            .begin_step(&data.slots, ForceFlush::Rows(&[false, step_no == 1, false]))
            .unwrap();
        stream
            .decode_snapshot(&mut dring, slots.as_slice(), positions.as_mut_slice())
            .unwrap();
        assert_eq!(
            step.positions(),
            &positions.to_vec(&stream).unwrap()[..],
            "step {step_no} cursors"
        );
        let flags = DeviceVec::from_host(&stream, &[0, (step_no == 1) as i32, 0]).unwrap();
        let rows = DecodeRows {
            slots: slots.as_slice(),
            positions: positions.as_slice(),
            force_flush: Some(flags.as_slice()),
        };
        for layer in 0..2 {
            replayssm::decode(
                Backend::Emulated,
                &data.decode_inputs(),
                &mut pool,
                &mut ring,
                &step,
                layer,
                &mut o.dense_mut(b, d.hv * d.v),
            )
            .unwrap();
            stream
                .decode(
                    &tokens.decode_inputs(),
                    &mut dpool,
                    &mut dring,
                    &rows,
                    layer,
                    &mut o_dev.dense_mut(b, d.hv * d.v),
                )
                .unwrap();
            assert_eq!(
                act_bits(&o),
                act_bits(&o_dev.to_host(&stream).unwrap()),
                "step {step_no} D"
            );
        }
        ring.finish_step(step).unwrap();
        stream.decode_advance(&mut dring, &rows).unwrap();
        assert_eq!(
            bits(pool.state()),
            bits(&dpool.state_vec(&stream)),
            "step {step_no} checkpoints"
        );
    }
    // Materialise folds every pending record and resets the cursors, on both.
    materialize(Backend::Emulated, &mut pool, &mut ring, &data.slots).unwrap();
    let mut scratch = DeviceVec::<i32>::zeros(Backend::Emulated, 2 * b).unwrap();
    stream
        .materialize(&mut dpool, &mut dring, slots.as_slice(), scratch.as_mut_slice())
        .unwrap();
    assert_eq!(bits(pool.state()), bits(&dpool.state_vec(&stream)), "materialise");
    let mut back = DecodeRing::attach(&pool).unwrap();
    dring.download_into(&stream, &mut back).unwrap();
    for &s in &data.slots {
        assert_eq!(back.pending(s as usize).unwrap(), 0, "slot {s} after materialise");
    }
    stream.check_errors().unwrap();
}

#[test]
fn host_memory_on_the_cuda_backend_is_refused_by_name_and_nothing_is_written() {
    let data = RecurrentData::random(&spec(Variant::Gdn, DIMS, DType::F32, &[2, 2]), 6);
    let (shape, pool) = pool_for(&data, 1, 4, 6);
    let before = pool.state().to_vec();
    let mut ring = SpecRing::new(shape, true).unwrap();
    let n = data.num_tokens();
    let mut o = ActBuffer::nan(DType::F32, n * DIMS.hv * DIMS.v);
    let e = verify(
        Backend::Cuda,
        &data.inputs(),
        None,
        &pool,
        0,
        &mut o.dense_mut(n, DIMS.hv * DIMS.v),
        Some(&mut ring),
    )
    .unwrap_err();
    println!("{e}");
    assert!(
        matches!(&e, Error::Memory { tensor: "q", why } if why.contains("host memory") && why.contains("Stream")),
        "{e:?}"
    );
    assert!(o.to_f32().iter().all(|x| x.is_nan()), "outputs written");
    assert!(ring.beta.iter().all(|x| x.is_nan()), "ring written");
    assert_eq!(bits(pool.state()), bits(&before));
}

#[test]
fn device_memory_of_another_backend_is_refused_by_name() {
    let data = RecurrentData::random(&spec(Variant::Gdn, DIMS, DType::F32, &[2, 2]), 7);
    let (shape, pool) = pool_for(&data, 1, 4, 7);
    let stream = emulated();
    let mut dpool = pool.to_device(&stream).unwrap();
    let ring = SpecRing::for_pool(&dpool, shape.window, DType::F32, true).unwrap();
    let before = dpool.state_vec(&stream);
    let accept = ints(&stream, &[1, 1]);
    let host_slots = data.slots.clone();
    // SAFETY: a slice labelled as CUDA memory; the launch refuses it before any read.
    let foreign = unsafe { DeviceSlice::from_raw_parts(Backend::Cuda, host_slots.as_ptr(), host_slots.len()) };
    let e = stream
        .fold(&mut dpool, &ring, foreign, accept.as_slice(), None)
        .unwrap_err();
    println!("{e}");
    assert!(
        matches!(&e, Error::Memory { tensor: "slots", why } if why.contains("cuda backend")),
        "{e:?}"
    );
    assert_eq!(bits(&dpool.state_vec(&stream)), bits(&before), "pool written");
}

#[test]
fn device_calls_refuse_what_the_host_calls_refuse_before_writing() {
    // On Emulated the "device" is host memory, so index arrays are checked before the launch
    // (as the C ABI does there); on CUDA the kernels skip and flag such rows instead.
    let data = RecurrentData::random(&spec(Variant::Gdn, DIMS, DType::F32, &[2, 2]), 8);
    let (_, pool) = pool_for(&data, 1, 4, 8);
    let stream = emulated();
    let mut dpool = pool.to_device(&stream).unwrap();
    let ring = SpecRing::for_pool(&dpool, 4, DType::F32, true).unwrap();
    let before = dpool.state_vec(&stream);
    let (slots, accept) = (ints(&stream, &[data.slots[0], 1000]), ints(&stream, &[1, 1]));
    let e = stream
        .fold(&mut dpool, &ring, slots.as_slice(), accept.as_slice(), None)
        .unwrap_err();
    println!("{e}");
    assert!(e.to_string().contains("1000"), "{e}");
    let (slots, accept) = (ints(&stream, &data.slots), ints(&stream, &[1, 9]));
    let e = stream
        .fold(&mut dpool, &ring, slots.as_slice(), accept.as_slice(), None)
        .unwrap_err();
    println!("{e}");
    assert!(e.to_string().contains("accept_lens[1] = 9"), "{e}");
    let short = ints(&stream, &[1]);
    let e = stream
        .fold(&mut dpool, &ring, slots.as_slice(), short.as_slice(), None)
        .unwrap_err();
    assert!(matches!(e, Error::Shape { .. }), "{e:?}");
    assert_eq!(bits(&dpool.state_vec(&stream)), bits(&before), "pool written");
    stream.check_errors().unwrap();
}

#[test]
fn the_reference_backend_has_no_device_memory() {
    let e = Stream::new(Backend::Reference).unwrap_err();
    assert!(matches!(e, Error::Memory { .. }), "{e:?}");
    let e = DeviceVec::<f32>::zeros(Backend::Reference, 4).unwrap_err();
    assert!(e.to_string().contains("reference backend"), "{e}");
}

#[test]
fn transfers_are_explicit_and_counted() {
    let stream = emulated();
    let before = replayssm::memory::counters();
    let mut v = DeviceVec::from_host(&stream, &[1.0f32, 2.0, 3.0]).unwrap();
    v.upload(&stream, &[4.0, 5.0, 6.0]).unwrap();
    assert_eq!(v.to_vec(&stream).unwrap(), vec![4.0, 5.0, 6.0]);
    let e = v.upload(&stream, &[1.0]).unwrap_err();
    assert!(matches!(e, Error::Shape { .. }), "{e:?}");
    let after = replayssm::memory::counters();
    assert_eq!(after.device_allocations - before.device_allocations, 1);
    assert_eq!(after.host_to_device - before.host_to_device, 2);
    assert_eq!(after.device_to_host - before.device_to_host, 1);
}

#[test]
fn on_a_gpu_bad_device_indices_flag_the_stream_and_check_errors_clears_it() {
    if !common::gpu_available("on_a_gpu_bad_device_indices_flag_the_stream_and_check_errors_clears_it") {
        return;
    }
    let data = RecurrentData::random(&spec(Variant::Gdn, DIMS, DType::F32, &[2, 2]), 9);
    let (_, pool) = pool_for(&data, 1, 4, 9);
    let stream = Stream::new(Backend::Cuda).unwrap();
    let mut dpool = pool.to_device(&stream).unwrap();
    let ring = SpecRing::for_pool(&dpool, 4, DType::F32, true).unwrap();
    let before = dpool.state_vec(&stream);
    let (slots, accept) = (ints(&stream, &[data.slots[0], 1000]), ints(&stream, &[0, 1]));
    // Enqueued: the host never reads device indices.
    stream
        .fold(&mut dpool, &ring, slots.as_slice(), accept.as_slice(), None)
        .unwrap();
    let e = stream.check_errors().unwrap_err();
    assert!(
        matches!(e, Error::DeviceReported { bits, .. } if bits & replayssm::ffi::RSSM_DEVERR_SLOT_OUT_OF_RANGE != 0),
        "{e:?}"
    );
    stream.check_errors().unwrap();
    assert_eq!(
        bits(&dpool.state_vec(&stream)),
        bits(&before),
        "the flagged row wrote the pool"
    );
}

/// Kernel D reads and writes one row of every view per decode row, and the device call has no
/// cu_seqlens to tie the two: views of fewer tokens than rows are refused (they were accepted,
/// and the kernel wrote outputs past the end of `o`).
#[test]
fn a_device_decode_with_fewer_tokens_than_rows_is_refused() {
    let data = RecurrentData::random(&spec(Variant::Gdn, DIMS, DType::F32, &[1, 1, 1]), 10);
    let cfg = resolve(&EngineFlags::buffered_decode(Variant::Gdn, 3)).unwrap();
    let ns = data.state.len() / data.dims.state_elems();
    let stream = emulated();
    let mut pool = CheckpointPool::new_device(Backend::Emulated, &cfg, data.dims, 1, ns).unwrap();
    let mut ring = DecodeRing::attach(&pool).unwrap();
    // One token uploaded, three rows asked for.
    let one = data.gather(&[Some(0)], vec![0, 1]);
    let tokens = DeviceTokens::upload(&stream, &one.inputs()).unwrap();
    let slots = ints(&stream, &data.slots);
    let mut positions = DeviceVec::<i32>::zeros(Backend::Emulated, 3).unwrap();
    stream
        .decode_snapshot(&mut ring, slots.as_slice(), positions.as_mut_slice())
        .unwrap();
    let rows = DecodeRows {
        slots: slots.as_slice(),
        positions: positions.as_slice(),
        force_flush: None,
    };
    let d = data.dims;
    let mut o = DeviceAct::poisoned(Backend::Emulated, DType::F32, d.hv * d.v).unwrap();
    let e = stream
        .decode(
            &tokens.decode_inputs(),
            &mut pool,
            &mut ring,
            &rows,
            0,
            &mut o.dense_mut(1, d.hv * d.v),
        )
        .unwrap_err();
    println!("{e}");
    assert!(matches!(&e, Error::Shape { tensor: "q", .. }), "{e:?}");
    assert!(
        o.to_host(&stream).unwrap().to_f32().iter().all(|x| x.is_nan()),
        "o written"
    );
}

/// The engine's own buffers as the pool and ring (borrowed, not freed by the library): a step on
/// them gives the owned pool's bits, and the results land in the engine's memory.
#[test]
fn a_pool_and_ring_borrowed_from_the_engine_serve_like_owned_ones() {
    let seed = fresh(11);
    let data = RecurrentData::random(&spec(Variant::Gdn, DIMS, DType::BF16, &[3, 2]), seed);
    let (shape, pool) = pool_for(&data, 2, 4, seed);
    let stream = emulated();
    let d = data.dims;
    let n = data.num_tokens();
    // Owned device memory.
    let mut owned = pool.to_device(&stream).unwrap();
    let mut owned_ring = SpecRing::for_pool(&owned, 4, DType::BF16, true).unwrap();
    // The engine's buffers (host memory stands for device memory on Emulated).
    let mut state = pool.state().to_vec();
    let ls = shape.layers * shape.slots * shape.window;
    let mut rv = ActBuffer::nan(DType::BF16, ls * d.hv * d.v);
    let mut rk = ActBuffer::nan(DType::BF16, ls * d.h * d.k);
    let mut rg = vec![f32::NAN; ls * d.hv];
    let mut rb = vec![f32::NAN; ls * d.hv];
    let cfg = pool.config().clone();
    // SAFETY: every buffer outlives the pool and ring built on it, and is touched by nothing else
    // meanwhile.
    let (mut borrowed, mut borrowed_ring) = unsafe {
        let p = CheckpointPool::from_raw_parts(Backend::Emulated, &cfg, d, 2, shape.slots, state.as_mut_ptr()).unwrap();
        let r = SpecRing::from_raw_parts(
            &p,
            4,
            DType::BF16,
            true,
            rv.as_bytes_mut().as_mut_ptr().cast(),
            rk.as_bytes_mut().as_mut_ptr().cast(),
            rg.as_mut_ptr(),
            rb.as_mut_ptr(),
        )
        .unwrap();
        (p, r)
    };
    let tokens = DeviceTokens::upload(&stream, &data.inputs()).unwrap();
    let (slots, accept) = (ints(&stream, &data.slots), ints(&stream, &[2, 1]));
    let mut outs = vec![];
    for (p, r) in [(&mut owned, &mut owned_ring), (&mut borrowed, &mut borrowed_ring)] {
        let mut o = DeviceAct::poisoned(Backend::Emulated, DType::BF16, n * d.hv * d.v).unwrap();
        for layer in 0..2 {
            stream
                .verify(
                    &tokens.inputs(),
                    None,
                    p,
                    layer,
                    &mut o.dense_mut(n, d.hv * d.v),
                    Some(r),
                )
                .unwrap();
        }
        stream.fold(p, r, slots.as_slice(), accept.as_slice(), None).unwrap();
        outs.push((act_bits(&o.to_host(&stream).unwrap()), bits(&p.state_vec(&stream))));
    }
    assert_eq!(outs[0], outs[1], "borrowed and owned memory give the same bits");
    drop(borrowed_ring);
    drop(borrowed);
    // The fold wrote the engine's own tensor, and the ring records are in its buffers.
    assert_eq!(bits(&state), outs[1].1);
    assert_ne!(bits(&state), bits(pool.state()), "the fold changed the engine's pool");
    assert!(rb.iter().any(|x| x.is_finite()), "the verify wrote the engine's ring");
    // A borrowed pool is gated like an owned one.
    let off = resolve(&EngineFlags::buffered_decode(Variant::Gdn, 3)).unwrap();
    let mut other = pool.state().to_vec();
    // SAFETY: as above.
    let p = unsafe { CheckpointPool::from_raw_parts(Backend::Emulated, &off, d, 2, shape.slots, other.as_mut_ptr()) }
        .unwrap();
    // SAFETY: never dereferenced: the gate refuses first.
    let e = unsafe {
        SpecRing::from_raw_parts(
            &p,
            4,
            DType::BF16,
            true,
            rv.as_bytes_mut().as_mut_ptr().cast(),
            rk.as_bytes_mut().as_mut_ptr().cast(),
            rg.as_mut_ptr(),
            rb.as_mut_ptr(),
        )
    }
    .unwrap_err();
    assert!(matches!(e, Error::Gate(_)), "{e:?}");
}
