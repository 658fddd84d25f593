//! The C ABI (`src/capi`, `include/replayssm.h`) on the emulated backend: each entry gives the
//! same bits as the safe Rust wrapper it mirrors, buffered decode with device-resident cursors
//! gives kernel R's bits, and every kind of bad input comes back as a status with a message
//! naming the field, never a crash.

mod common;

use std::ffi::{c_char, CStr, CString};
use std::ptr;

use common::{bits_equal, say, spec};
use replayssm::capi::*;
use replayssm::config::{resolve, EngineFlags};
use replayssm::spec::{fold, verify};
use replayssm::{
    ActBuffer, Backend, BufferedFold, CheckpointPool, DType, HeadDims, RecurrentOutputs, SpecRing, Variant,
};
use replayssm_tools::workload::{GateData, RecurrentData};

const EMU: i32 = replayssm_backend::REPLAYSSM_BACKEND_EMULATED as i32;
const CUDA: i32 = replayssm_backend::REPLAYSSM_BACKEND_CUDA as i32;
use replayssm_status::*;

fn last_error() -> String {
    // SAFETY: the library returns a NUL-terminated thread-local string.
    unsafe { CStr::from_ptr(replayssm_last_error_message()) }
        .to_string_lossy()
        .into_owned()
}

/// Fills the token fields R, V and D share: rows `first`, `first + every`, ... of `data`
/// (so `every > 1` exercises strided rows), with its dims, dtype, variant and gate.
macro_rules! tokens {
    ($p:expr, $data:expr, $first:expr, $every:expr) => {{
        let (data, first, every): (&RecurrentData, usize, usize) = (&$data, $first, $every);
        let d = data.dims;
        let es = data.dtype.size();
        let gw = d.gate_width(data.variant);
        let (qrow, vrow) = (d.h * d.k, d.hv * d.v);
        $p.tokens.q = data.q.as_bytes()[first * qrow * es..].as_ptr().cast();
        $p.tokens.k = data.k.as_bytes()[first * qrow * es..].as_ptr().cast();
        $p.tokens.v = data.v.as_bytes()[first * vrow * es..].as_ptr().cast();
        $p.tokens.q_stride = (every * qrow) as i64;
        $p.tokens.k_stride = (every * qrow) as i64;
        $p.tokens.v_stride = (every * vrow) as i64;
        match &data.gate {
            GateData::Raw {
                a,
                b,
                a_log,
                dt_bias,
                form,
            } => {
                $p.tokens.lower_bound = form.lower_bound();
                $p.tokens.a = a.as_bytes()[first * d.hv * gw * es..].as_ptr().cast();
                $p.tokens.b = b.as_bytes()[first * d.hv * es..].as_ptr().cast();
                $p.tokens.A_log = a_log.as_ptr();
                $p.tokens.dt_bias = dt_bias.as_ptr();
                $p.tokens.a_stride = (every * d.hv * gw) as i64;
                $p.tokens.b_stride = (every * d.hv) as i64;
            }
            GateData::Precomputed { g, beta } => {
                assert_eq!(every, 1, "precomputed gates have no stride");
                $p.tokens.g = g[first * d.hv * gw..].as_ptr();
                $p.tokens.beta = beta[first * d.hv..].as_ptr();
            }
        }
        $p.base.H = d.h as i32;
        $p.base.HV = d.hv as i32;
        $p.base.K = d.k as i32;
        $p.base.V = d.v as i32;
        $p.tokens.scale = data.scale;
        $p.base.dtype = data.dtype.to_ffi();
        $p.base.variant = data.variant.to_ffi();
        $p.base.qk_l2norm = data.qk_l2norm as i32;
    }};
}

fn dims() -> HeadDims {
    HeadDims {
        h: 2,
        hv: 4,
        k: 32,
        v: 32,
    }
}

fn data(variant: Variant, dtype: DType, seqlens: &[usize], null: &[usize], seed: u64) -> RecurrentData {
    let mut s = spec(variant, dims(), dtype, seqlens);
    s.null_requests = null.to_vec();
    RecurrentData::random(&s, seed)
}

/// Kernel R through `replayssm_recurrent`: outputs and final states.
fn abi_recurrent(data: &RecurrentData) -> (ActBuffer, Vec<f32>) {
    let d = data.dims;
    let n = data.num_tokens();
    let mut o = ActBuffer::nan(data.dtype, n * d.hv * d.v);
    let mut state = data.state.clone();
    let mut p = replayssm_recurrent_params::default();
    tokens!(p, data, 0, 1);
    p.base.num_layers = 1; // R's pool: one layer
    p.cu_seqlens = data.cu_seqlens.as_ptr();
    p.base.slots = data.slots.as_ptr();
    p.base.state = state.as_mut_ptr();
    p.tokens.o = o.as_bytes_mut().as_mut_ptr().cast();
    p.tokens.o_stride = (d.hv * d.v) as i64;
    p.num_tokens = n as i32;
    p.base.batch = data.slots.len() as i32;
    p.max_seqlen = data
        .cu_seqlens
        .windows(2)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or(1)
        .max(1);
    p.base.num_slots = (data.state.len() / d.state_elems()) as i32;
    p.write_state = 1;
    // SAFETY: host buffers sized for these params.
    let st = unsafe { replayssm_recurrent(EMU, &p, ptr::null_mut()) };
    assert_eq!(st, REPLAYSSM_OK, "{}", last_error());
    (o, state)
}

#[test]
fn recurrent_through_the_c_abi_gives_the_safe_wrappers_bits() {
    for (variant, dtype) in [
        (Variant::Gdn, DType::BF16),
        (Variant::Kda, DType::F32),
        (Variant::Gdn, DType::F16),
    ] {
        let data = data(variant, dtype, &[3, 5, 1], &[1], 11);
        let d = data.dims;
        let n = data.num_tokens();
        let mut o = ActBuffer::nan(dtype, n * d.hv * d.v);
        let mut state = data.state.clone();
        replayssm::recurrent(
            Backend::Emulated,
            &data.inputs(),
            &mut RecurrentOutputs {
                o: o.dense_mut(n, d.hv * d.v),
                state: &mut state,
                write_state: true,
                snapshots: None,
            },
        )
        .expect("safe recurrent");
        let (o_abi, state_abi) = abi_recurrent(&data);
        assert!(
            o_abi == o,
            "{variant:?} {dtype:?}: outputs differ from the safe wrapper"
        );
        bits_equal(&state_abi, &state).unwrap_or_else(|e| panic!("{variant:?} {dtype:?}: state: {e}"));
    }
}

#[test]
fn verify_and_fold_through_the_c_abi_give_the_safe_wrappers_bits() {
    for variant in [Variant::Gdn, Variant::Kda] {
        let data = data(variant, DType::BF16, &[4, 2, 3], &[], 5);
        let d = data.dims;
        let n = data.num_tokens();
        let batch = data.slots.len();
        let num_slots = data.state.len() / d.state_elems();
        let (window, layers) = (4usize, 1usize);
        let cfg = resolve(&EngineFlags::spec_ring(variant)).expect("spec configuration");
        let mut pool = CheckpointPool::new(&cfg, d, layers, num_slots).expect("pool");
        pool.state_mut().copy_from_slice(&data.state);
        let mut ring = SpecRing::for_pool(&pool, window, DType::BF16, true).expect("ring");
        let mut o = ActBuffer::nan(DType::BF16, n * d.hv * d.v);
        verify(
            Backend::Emulated,
            &data.inputs(),
            None,
            &pool,
            0,
            &mut o.dense_mut(n, d.hv * d.v),
            Some(&mut ring),
        )
        .expect("safe verify");
        let accept = [3i32, 0, 2];
        let mut pool_abi_state = pool.state().to_vec();
        fold(Backend::Emulated, &mut pool, &ring, &data.slots, &accept, None).expect("safe fold");

        // The same through the C ABI, on NaN-poisoned rings and outputs.
        let mut o_abi = ActBuffer::nan(DType::BF16, n * d.hv * d.v);
        let mut ring_abi = SpecRing::for_pool(&pool, window, DType::BF16, true).expect("ring");
        let mut p = replayssm_verify_params::default();
        tokens!(p, data, 0, 1);
        p.cu_seqlens = data.cu_seqlens.as_ptr();
        p.base.slots = data.slots.as_ptr();
        p.base.state = pool_abi_state.as_ptr().cast_mut();
        p.tokens.o = o_abi.as_bytes_mut().as_mut_ptr().cast();
        p.tokens.o_stride = (d.hv * d.v) as i64;
        p.ring.v = ring_abi.v.as_bytes_mut().as_mut_ptr().cast();
        p.ring.k = ring_abi.k.as_bytes_mut().as_mut_ptr().cast();
        p.ring.g = ring_abi.g.as_mut_ptr();
        p.ring.beta = ring_abi.beta.as_mut_ptr();
        p.num_tokens = n as i32;
        p.base.batch = batch as i32;
        p.max_seqlen = 4;
        p.base.num_slots = num_slots as i32;
        p.base.num_layers = layers as i32;
        p.ring.window = window as i32;
        // SAFETY: host buffers sized for these params.
        let st = unsafe { replayssm_verify(EMU, &p, ptr::null_mut()) };
        assert_eq!(st, REPLAYSSM_OK, "{}", last_error());
        assert!(o_abi == o, "{variant:?}: verify outputs differ");
        // Bytes, not values: positions past a request's window stay NaN in both rings.
        assert!(
            ring_abi.v.as_bytes() == ring.v.as_bytes() && ring_abi.k.as_bytes() == ring.k.as_bytes(),
            "{variant:?}: ring v/k differ"
        );
        bits_equal(&ring_abi.g, &ring.g).expect("ring g");
        bits_equal(&ring_abi.beta, &ring.beta).expect("ring beta");

        let mut word = 0u32;
        let f = replayssm_fold_params {
            base: replayssm_base_params {
                state: pool_abi_state.as_mut_ptr(),
                slots: data.slots.as_ptr(),
                error_word: &mut word,
                batch: batch as i32,
                num_slots: num_slots as i32,
                num_layers: layers as i32,
                H: d.h as i32,
                HV: d.hv as i32,
                K: d.k as i32,
                V: d.v as i32,
                dtype: DType::BF16.to_ffi(),
                variant: variant.to_ffi(),
                qk_l2norm: 1,
                ..Default::default()
            },
            ring: replayssm_ring_params {
                v: ring_abi.v.as_bytes().as_ptr().cast_mut().cast(),
                k: ring_abi.k.as_bytes().as_ptr().cast_mut().cast(),
                g: ring_abi.g.as_ptr().cast_mut(),
                beta: ring_abi.beta.as_ptr().cast_mut(),
                window: window as i32,
                ..Default::default()
            },
            accept_lens: accept.as_ptr(),
            ..Default::default()
        };
        // SAFETY: as above.
        let st = unsafe { replayssm_fold(EMU, &f, ptr::null_mut()) };
        assert_eq!(st, REPLAYSSM_OK, "{}", last_error());
        assert_eq!(word, 0);
        bits_equal(&pool_abi_state, pool.state()).unwrap_or_else(|e| panic!("{variant:?}: folded state: {e}"));
    }
}

/// The buffered speculative verify driven only through the C ABI (`replayssm_verify_buffered` per
/// layer, `replayssm_buffered` COMMIT then `replayssm_fold` on the flush lengths, FLUSH and RESET
/// between steps) next to the Rust API's (`Stream::verify_buffered`, `buffered_fold`
/// (commit, flush), `buffered_reset`) on the emulated backend, from the same bits: every output,
/// flush length, cursor, checkpoint, ring record and correction is bit-identical after every step,
/// with null rows, short windows, commit flushes, a forced flush and a reset.
#[test]
fn buffered_verify_through_the_c_abi_gives_the_rust_apis_bits() {
    use replayssm::memory::{DeviceAct, DeviceVec, Stream};
    use replayssm::BufferedRing;
    use replayssm_tools::staged::DeviceTokens;
    let (layers, window, cache_len, steps) = (2usize, 4usize, 10usize, 9usize);
    let live = [3i32, 0, 4];
    let seqlens = [4usize, 3, 4];
    let batch = live.len();
    for (variant, dtype) in [(Variant::Gdn, DType::BF16), (Variant::Kda, DType::F16)] {
        let what = format!("{variant:?} {dtype:?}");
        let d = dims();
        let stream = Stream::new(Backend::Emulated).expect("stream");
        let cfg = resolve(&EngineFlags {
            linear_replayssm_spec_buffered: true,
            linear_replayssm_cache_len: Some(cache_len as i64),
            ..EngineFlags::spec_ring(variant)
        })
        .expect("buffered configuration");
        let start = data(variant, dtype, &[1; 5], &[], 3).state;
        let num_slots = start.len() / d.state_elems();
        let mut host = CheckpointPool::new(&cfg, d, layers, num_slots).expect("pool");
        for l in 0..layers {
            let at = l * start.len();
            host.state_mut()[at..at + start.len()].copy_from_slice(&start);
        }
        let mut dpool = host.to_device(&stream).expect("device pool");
        let mut bring = BufferedRing::for_pool(&dpool, window, dtype, true).expect("buffered ring");
        // The C ABI's buffers start from the Rust API's bits (the rings' poison included).
        let mut state = host.state().to_vec();
        let mut ring = bring.ring().to_host(&stream).expect("ring");
        let mut ring_u = bring.ring_u().to_vec(&stream).expect("ring_u");
        let mut cursors = vec![0i32; num_slots];
        let mut flush = vec![-1i32; batch];
        let mut dflush = DeviceVec::<i32>::zeros(Backend::Emulated, batch).expect("flush lens");
        let mut word = 0u32;
        // Compares everything the two callers hold.
        let same = |state: &[f32],
                    ring: &SpecRing,
                    ring_u: &[f32],
                    cursors: &[i32],
                    dpool: &CheckpointPool<replayssm::Device>,
                    bring: &BufferedRing,
                    at: &str| {
            bits_equal(state, dpool.to_host(&stream).expect("pool").state())
                .unwrap_or_else(|e| panic!("{at}: checkpoints: {e}"));
            let r = bring.ring().to_host(&stream).expect("ring");
            assert!(
                r.v.as_bytes() == ring.v.as_bytes() && r.k.as_bytes() == ring.k.as_bytes(),
                "{at}: ring v / k"
            );
            bits_equal(&r.g, &ring.g).unwrap_or_else(|e| panic!("{at}: ring g: {e}"));
            bits_equal(&r.beta, &ring.beta).unwrap_or_else(|e| panic!("{at}: ring beta: {e}"));
            bits_equal(&bring.ring_u().to_vec(&stream).expect("ring_u"), ring_u)
                .unwrap_or_else(|e| panic!("{at}: ring_u: {e}"));
            assert_eq!(
                bring.cursors().to_vec(&stream).expect("cursors"),
                cursors,
                "{at}: cursors"
            );
        };
        // One cursor op through the C ABI, then (COMMIT, FLUSH) kernel F on the flush lengths.
        let cursor_op = |op: replayssm_buffered_op,
                         slots: &[i32],
                         accept: Option<&[i32]>,
                         state: &mut [f32],
                         ring: &SpecRing,
                         cursors: &mut [i32],
                         flush: &mut [i32],
                         word: &mut u32| {
            let b = replayssm_buffered_params {
                cursors: cursors.as_mut_ptr(),
                slots: slots.as_ptr(),
                accept_lens: accept.map_or(ptr::null(), |a| a.as_ptr()),
                flush_lens: flush.as_mut_ptr(),
                error_word: &mut *word,
                batch: slots.len() as i32,
                num_slots: num_slots as i32,
                cache_len: cache_len as i32,
                window: window as i32,
                op: op as i32,
                ..Default::default()
            };
            // SAFETY: host buffers sized for these params.
            let st = unsafe { replayssm_buffered(EMU, &b, ptr::null_mut()) };
            assert_eq!(st, REPLAYSSM_OK, "{}", last_error());
            if op == replayssm_buffered_op::REPLAYSSM_BUFFERED_RESET {
                return;
            }
            let f = replayssm_fold_params {
                base: replayssm_base_params {
                    state: state.as_mut_ptr(),
                    slots: slots.as_ptr(),
                    error_word: word,
                    batch: slots.len() as i32,
                    num_slots: num_slots as i32,
                    num_layers: layers as i32,
                    H: d.h as i32,
                    HV: d.hv as i32,
                    K: d.k as i32,
                    V: d.v as i32,
                    dtype: dtype.to_ffi(),
                    variant: variant.to_ffi(),
                    qk_l2norm: 1,
                    ..Default::default()
                },
                ring: replayssm_ring_params {
                    v: ring.v.as_bytes().as_ptr().cast_mut().cast(),
                    k: ring.k.as_bytes().as_ptr().cast_mut().cast(),
                    g: ring.g.as_ptr().cast_mut(),
                    beta: ring.beta.as_ptr().cast_mut(),
                    window: cache_len as i32,
                    ..Default::default()
                },
                accept_lens: flush.as_ptr(),
                ..Default::default()
            };
            // SAFETY: as above.
            let st = unsafe { replayssm_fold(EMU, &f, ptr::null_mut()) };
            assert_eq!(st, REPLAYSSM_OK, "{}", last_error());
        };
        let mut flushes = 0;
        for step in 0..steps {
            // Row 1 is a null row every third step.
            let slots: Vec<i32> = live
                .iter()
                .enumerate()
                .map(|(b, &s)| if b == 1 && step % 3 == 2 { -1 } else { s })
                .collect();
            for layer in 0..layers {
                let at = format!("{what} step {step} layer {layer}");
                let mut w = data(variant, dtype, &seqlens, &[], (100 * step + layer) as u64);
                w.slots = slots.clone();
                let n = w.num_tokens();
                let cols = d.hv * d.v;
                // The Rust API.
                let t = DeviceTokens::upload(&stream, &w.inputs()).expect("tokens");
                let mut od = DeviceAct::from_host(&stream, &ActBuffer::nan(dtype, n * cols)).expect("o");
                stream
                    .verify_buffered(
                        &t.inputs(),
                        &dpool,
                        layer,
                        &mut od.view_mut(0, n, cols, cols),
                        &mut bring,
                    )
                    .unwrap_or_else(|e| panic!("{at}: Rust API: {e}"));
                // The C ABI.
                let mut o = ActBuffer::nan(dtype, n * cols);
                let mut p = replayssm_verify_buffered_params::default();
                p.verify.struct_size = std::mem::size_of::<replayssm_verify_params>() as u32;
                tokens!(p.verify, w, 0, 1);
                p.verify.cu_seqlens = w.cu_seqlens.as_ptr();
                p.verify.base.slots = w.slots.as_ptr();
                p.verify.base.state = state.as_mut_ptr();
                p.verify.base.error_word = &mut word;
                p.verify.tokens.o = o.as_bytes_mut().as_mut_ptr().cast();
                p.verify.tokens.o_stride = cols as i64;
                p.verify.ring.v = ring.v.as_bytes_mut().as_mut_ptr().cast();
                p.verify.ring.k = ring.k.as_bytes_mut().as_mut_ptr().cast();
                p.verify.ring.g = ring.g.as_mut_ptr();
                p.verify.ring.beta = ring.beta.as_mut_ptr();
                p.verify.ring.window = cache_len as i32;
                p.verify.num_tokens = n as i32;
                p.verify.max_seqlen = *seqlens.iter().max().expect("rows") as i32;
                p.verify.base.batch = batch as i32;
                p.verify.base.num_slots = num_slots as i32;
                p.verify.base.num_layers = layers as i32;
                p.verify.base.layer = layer as i32;
                p.cursors = cursors.as_ptr();
                p.ring_u = ring_u.as_mut_ptr();
                // SAFETY: host buffers sized for these params.
                let st = unsafe { replayssm_verify_buffered(EMU, &p, ptr::null_mut()) };
                assert_eq!(st, REPLAYSSM_OK, "{at}: {}", last_error());
                assert!(od.to_host(&stream).expect("o") == o, "{at}: outputs differ");
            }
            // Accept lengths within each row's window (0 and the whole window included).
            let accept: Vec<i32> = (0..batch)
                .map(|b| ((step * 7 + b * 3) % (seqlens[b] + 1)) as i32)
                .collect();
            let da = DeviceVec::from_host(&stream, &accept).expect("accept");
            let ds = DeviceVec::from_host(&stream, &slots).expect("slots");
            stream
                .buffered_fold(
                    &mut dpool,
                    &mut bring,
                    ds.as_slice(),
                    BufferedFold::Commit {
                        accept_lens: da.as_slice(),
                    },
                    dflush.as_mut_slice(),
                )
                .expect("Rust commit");
            cursor_op(
                replayssm_buffered_op::REPLAYSSM_BUFFERED_COMMIT,
                &slots,
                Some(&accept),
                &mut state,
                &ring,
                &mut cursors,
                &mut flush,
                &mut word,
            );
            assert_eq!(
                dflush.to_vec(&stream).expect("flush"),
                flush,
                "{what} step {step}: flush lengths"
            );
            flushes += flush.iter().filter(|&&f| f > 0).count();
            same(
                &state,
                &ring,
                &ring_u,
                &cursors,
                &dpool,
                &bring,
                &format!("{what} step {step}"),
            );
            if step == 4 {
                // A forced flush of row 2's slot, and a reset of row 0's (a new request).
                let s = [live[2]];
                let ds = DeviceVec::from_host(&stream, &s).expect("slot");
                let mut one = DeviceVec::<i32>::zeros(Backend::Emulated, 1).expect("scratch");
                stream
                    .buffered_fold(
                        &mut dpool,
                        &mut bring,
                        ds.as_slice(),
                        BufferedFold::Flush,
                        one.as_mut_slice(),
                    )
                    .expect("Rust flush");
                let mut f1 = [-1i32];
                let op = replayssm_buffered_op::REPLAYSSM_BUFFERED_FLUSH;
                cursor_op(op, &s, None, &mut state, &ring, &mut cursors, &mut f1, &mut word);
                assert_eq!(one.to_vec(&stream).expect("flush"), f1, "{what}: forced flush length");
                let r = [live[0]];
                let dr = DeviceVec::from_host(&stream, &r).expect("slot");
                stream.buffered_reset(&mut bring, dr.as_slice()).expect("Rust reset");
                let op = replayssm_buffered_op::REPLAYSSM_BUFFERED_RESET;
                cursor_op(op, &r, None, &mut state, &ring, &mut cursors, &mut f1, &mut word);
                same(
                    &state,
                    &ring,
                    &ring_u,
                    &cursors,
                    &dpool,
                    &bring,
                    &format!("{what} flush + reset"),
                );
            }
        }
        // The end: flush every live slot; the checkpoints are current and still the same bits.
        let ds = DeviceVec::from_host(&stream, &live).expect("slots");
        stream
            .buffered_fold(
                &mut dpool,
                &mut bring,
                ds.as_slice(),
                BufferedFold::Flush,
                dflush.as_mut_slice(),
            )
            .expect("Rust flush");
        let op = replayssm_buffered_op::REPLAYSSM_BUFFERED_FLUSH;
        cursor_op(op, &live, None, &mut state, &ring, &mut cursors, &mut flush, &mut word);
        assert_eq!(
            dflush.to_vec(&stream).expect("flush"),
            flush,
            "{what}: final flush lengths"
        );
        same(&state, &ring, &ring_u, &cursors, &dpool, &bring, &format!("{what} end"));
        assert!(
            cursors.iter().all(|&c| c == 0),
            "{what}: cursors after the flush: {cursors:?}"
        );
        stream.check_errors().expect("Rust API error word");
        assert_eq!(word, 0, "{what}: device error bits");
        assert!(flushes > 0, "{what}: the chain never flushed at a commit");
        say(&format!(
            "{what}: {steps} buffered steps through the C ABI, {flushes} commit flushes: bit-identical to the Rust API"
        ));
    }
}

/// Buffered decode driven only through the C ABI, cursors in (host-emulated) device memory:
/// SNAPSHOT, D for each of two layers, ADVANCE, then MATERIALIZE + RESET, must give kernel R's
/// outputs and final states bit for bit (design §4 D), forced flushes included.
#[test]
fn buffered_decode_with_device_cursors_gives_kernel_r_bits() {
    let steps = 7usize;
    let cache_len = 3usize;
    let layers = 2usize;
    for variant in [Variant::Gdn, Variant::Kda] {
        // Three requests of `steps` tokens; request 1 is a null row.
        let data = data(variant, DType::BF16, &[steps; 3], &[1], 21);
        let d = data.dims;
        let n = data.num_tokens();
        let batch = 3usize;
        let num_slots = data.state.len() / d.state_elems();
        let (o_rec, state_rec) = abi_recurrent(&data);

        // Both layers see the same inputs and start from the same checkpoint.
        let per_layer = num_slots * d.state_elems();
        let mut state = [data.state.clone(), data.state.clone()].concat();
        let gw = d.gate_width(variant);
        let recs = layers * num_slots * cache_len;
        let mut ring_d = vec![f32::NAN; recs * d.hv * d.v];
        let mut ring_k = vec![f32::NAN; recs * d.h * d.k];
        let mut ring_g = vec![f32::NAN; recs * d.hv * gw];
        let mut cursors = vec![0i32; num_slots];
        let mut positions = vec![-7i32; batch];
        let mut o = [
            ActBuffer::nan(DType::BF16, n * d.hv * d.v),
            ActBuffer::nan(DType::BF16, n * d.hv * d.v),
        ];
        let mut word = 0u32;
        let cursor_call = |cursors: &mut [i32], positions: &mut [i32], force: Option<&[i32]>, op, word: &mut u32| {
            let c = replayssm_cursor_params {
                cursors: cursors.as_mut_ptr(),
                slots: data.slots.as_ptr(),
                positions: positions.as_mut_ptr(),
                force_flush: force.map_or(ptr::null(), |f| f.as_ptr()),
                error_word: word,
                batch: batch as i32,
                num_slots: num_slots as i32,
                cache_len: cache_len as i32,
                op: op as i32,
                ..Default::default()
            };
            // SAFETY: host buffers sized for these params.
            let st = unsafe { replayssm_decode_cursors(EMU, &c, ptr::null_mut()) };
            assert_eq!(st, REPLAYSSM_OK, "{}", last_error());
        };
        for t in 0..steps {
            // Row 2 is forced to flush at step 1 (a track interval, say).
            let force = [0, 0, (t == 1) as i32];
            cursor_call(
                &mut cursors,
                &mut positions,
                None,
                replayssm_cursor_op::REPLAYSSM_CURSOR_SNAPSHOT,
                &mut word,
            );
            for (layer, o_layer) in o.iter_mut().enumerate() {
                let mut p = replayssm_decode_params::default();
                // Row b is token t of request b: rows `steps` tokens apart.
                tokens!(p, data, t, steps);
                p.base.slots = data.slots.as_ptr();
                p.positions = positions.as_ptr();
                p.force_flush = force.as_ptr();
                p.base.state = state.as_mut_ptr();
                p.ring_d = ring_d.as_mut_ptr().cast();
                p.ring_k = ring_k.as_mut_ptr().cast();
                p.ring_g = ring_g.as_mut_ptr();
                let orow = d.hv * d.v;
                p.tokens.o = o_layer.as_bytes_mut()[t * orow * 2..].as_mut_ptr().cast();
                p.tokens.o_stride = (steps * orow) as i64;
                p.base.error_word = &mut word;
                p.base.batch = batch as i32;
                p.base.num_slots = num_slots as i32;
                p.base.num_layers = layers as i32;
                p.base.layer = layer as i32;
                p.cache_len = cache_len as i32;
                // SAFETY: host buffers sized for these params.
                let st = unsafe { replayssm_decode(EMU, &p, ptr::null_mut()) };
                assert_eq!(st, REPLAYSSM_OK, "{}", last_error());
            }
            cursor_call(
                &mut cursors,
                &mut positions,
                Some(&force),
                replayssm_cursor_op::REPLAYSSM_CURSOR_ADVANCE,
                &mut word,
            );
        }
        assert_eq!(word, 0, "device error bits");
        // After 7 steps of L = 3: row 0 flushed at steps 2 and 5 (1 pending); row 2 was forced at
        // step 1, then flushed at 4 (2 pending: steps 5, 6).
        let live: Vec<usize> = data.slots.iter().filter(|&&s| s >= 0).map(|&s| s as usize).collect();
        assert_eq!(cursors[live[0]], 1, "row 0's cursor");
        assert_eq!(cursors[live[1]], 2, "row 2's cursor");
        // Materialise every pending record, then reset.
        cursor_call(
            &mut cursors,
            &mut positions,
            None,
            replayssm_cursor_op::REPLAYSSM_CURSOR_SNAPSHOT,
            &mut word,
        );
        let mut p = replayssm_decode_params {
            base: replayssm_base_params {
                slots: data.slots.as_ptr(),
                state: state.as_mut_ptr(),
                batch: batch as i32,
                num_slots: num_slots as i32,
                num_layers: layers as i32,
                H: d.h as i32,
                HV: d.hv as i32,
                K: d.k as i32,
                V: d.v as i32,
                dtype: DType::BF16.to_ffi(),
                variant: variant.to_ffi(),
                qk_l2norm: 1,
                ..Default::default()
            },
            positions: positions.as_ptr(),
            ring_d: ring_d.as_mut_ptr().cast(),
            ring_k: ring_k.as_mut_ptr().cast(),
            ring_g: ring_g.as_mut_ptr(),
            cache_len: cache_len as i32,
            ..Default::default()
        };
        p.base.error_word = &mut word;
        // SAFETY: as above (materialise reads no token fields).
        let st = unsafe { replayssm_decode_materialize(EMU, &p, ptr::null_mut()) };
        assert_eq!(st, REPLAYSSM_OK, "{}", last_error());
        cursor_call(
            &mut cursors,
            &mut positions,
            None,
            replayssm_cursor_op::REPLAYSSM_CURSOR_RESET,
            &mut word,
        );
        assert!(cursors.iter().all(|&c| c == 0), "cursors after reset: {cursors:?}");
        assert_eq!(word, 0, "device error bits");
        for (layer, o_layer) in o.iter().enumerate() {
            assert!(
                o_layer == &o_rec,
                "{variant:?} layer {layer}: D outputs differ from R's"
            );
            bits_equal(&state[layer * per_layer..(layer + 1) * per_layer], &state_rec)
                .unwrap_or_else(|e| panic!("{variant:?} layer {layer}: materialised state: {e}"));
        }
    }
}

/// The cursor kernel itself (kernel layer, no host checks: what CUDA runs under graph replay).
#[test]
fn cursor_kernel_flags_garbage_slots_and_positions_and_stays_in_its_buffers() {
    let guard = 64;
    let num_slots = 4;
    let mut buf = vec![0x5a5a_5a5ai32; guard + num_slots + guard];
    for (i, c) in buf[guard..guard + num_slots].iter_mut().enumerate() {
        *c = i as i32;
    }
    let slots = [3i32, -1, 99_999, i32::MIN + 1];
    let mut positions = vec![0i32; 4];
    let mut word = 0u32;
    let call = |buf: &mut Vec<i32>, positions: &mut Vec<i32>, op: replayssm_cursor_op, word: &mut u32| {
        let c = replayssm::ffi::rssm_cursor_params {
            cursors: buf[guard..].as_mut_ptr(),
            slots: slots.as_ptr(),
            positions: positions.as_mut_ptr(),
            force_flush: ptr::null(),
            error_word: word,
            batch: 4,
            num_slots: num_slots as i32,
            cache_len: 3,
            op: op as i32,
        };
        // SAFETY: host buffers sized for these params; only the slot values are garbage.
        match unsafe { replayssm::ffi::rssm_emu_decode_cursors(&c, ptr::null_mut()) } {
            0 => REPLAYSSM_OK,
            _ => REPLAYSSM_ERR_EMULATOR,
        }
    };
    assert_eq!(
        call(
            &mut buf,
            &mut positions,
            replayssm_cursor_op::REPLAYSSM_CURSOR_SNAPSHOT,
            &mut word
        ),
        REPLAYSSM_OK
    );
    assert_ne!(
        word & REPLAYSSM_DEVERR_SLOT_OUT_OF_RANGE,
        0,
        "garbage slots not flagged"
    );
    // Slot 3 holds cursor 3, outside 0..cache_len-1: copied and flagged.
    assert_ne!(word & REPLAYSSM_DEVERR_BAD_LENGTH, 0, "bad cursor not flagged");
    assert_eq!(positions, vec![3, 0, 0, 0]);
    word = 0;
    assert_eq!(
        call(
            &mut buf,
            &mut positions,
            replayssm_cursor_op::REPLAYSSM_CURSOR_ADVANCE,
            &mut word
        ),
        REPLAYSSM_OK
    );
    assert_ne!(
        word & REPLAYSSM_DEVERR_BAD_LENGTH,
        0,
        "bad position not flagged on advance"
    );
    assert_eq!(buf[guard + 3], 3, "a bad position must leave the cursor alone");
    assert_eq!(
        call(
            &mut buf,
            &mut positions,
            replayssm_cursor_op::REPLAYSSM_CURSOR_RESET,
            &mut word
        ),
        REPLAYSSM_OK
    );
    assert_eq!(&buf[guard..guard + num_slots], &[0, 1, 2, 0], "reset of slot 3 only");
    assert!(
        buf[..guard]
            .iter()
            .chain(&buf[guard + num_slots..])
            .all(|&x| x == 0x5a5a_5a5a),
        "write outside cursors"
    );
}

/// A valid fold on small host buffers, to break one field at a time.
struct FoldCase {
    state: Vec<f32>,
    ring_v: Vec<f32>,
    ring_k: Vec<f32>,
    ring_g: Vec<f32>,
    ring_beta: Vec<f32>,
    slots: Vec<i32>,
    lens: Vec<i32>,
}

impl FoldCase {
    fn new() -> FoldCase {
        let d = dims();
        let (slots, w) = (2usize, 2usize);
        FoldCase {
            state: vec![0.25; slots * d.state_elems()],
            ring_v: vec![0.5; slots * d.hv * w * d.v],
            ring_k: vec![0.5; slots * d.h * w * d.k],
            ring_g: vec![-0.1; slots * d.hv * w],
            ring_beta: vec![0.5; slots * d.hv * w],
            slots: vec![1, -1],
            lens: vec![2, 0],
        }
    }
    fn params(&mut self) -> replayssm_fold_params {
        let d = dims();
        replayssm_fold_params {
            base: replayssm_base_params {
                state: self.state.as_mut_ptr(),
                slots: self.slots.as_ptr(),
                batch: 2,
                num_slots: 2,
                num_layers: 1,
                H: d.h as i32,
                HV: d.hv as i32,
                K: d.k as i32,
                V: d.v as i32,
                dtype: DType::F32.to_ffi(),
                variant: Variant::Gdn.to_ffi(),
                qk_l2norm: 1,
                ..Default::default()
            },
            ring: replayssm_ring_params {
                v: self.ring_v.as_ptr().cast_mut().cast(),
                k: self.ring_k.as_ptr().cast_mut().cast(),
                g: self.ring_g.as_ptr().cast_mut(),
                beta: self.ring_beta.as_ptr().cast_mut(),
                window: 2,
                ..Default::default()
            },
            accept_lens: self.lens.as_ptr(),
            ..Default::default()
        }
    }
}

#[test]
fn every_kind_of_bad_input_is_a_status_with_a_message_naming_the_field() {
    let mut case = FoldCase::new();
    let good = case.params();
    // SAFETY (all calls below): host buffers sized for the valid params; each case breaks one
    // host-visible field, which the entry must refuse before launching.
    assert_eq!(
        unsafe { replayssm_fold(EMU, &good, ptr::null_mut()) },
        REPLAYSSM_OK,
        "{}",
        last_error()
    );
    assert_eq!(last_error(), "", "a success clears the last error");
    let before = case.state.clone();

    type Edit = fn(&mut replayssm_fold_params);
    let cases: Vec<(&str, Edit, replayssm_status, &str)> = vec![
        (
            "state NULL",
            |p| p.base.state = ptr::null_mut(),
            REPLAYSSM_ERR_INVALID_ARGUMENT,
            "state is NULL",
        ),
        (
            "ring_k NULL",
            |p| p.ring.k = ptr::null_mut(),
            REPLAYSSM_ERR_INVALID_ARGUMENT,
            "ring.k is NULL",
        ),
        (
            "slots NULL",
            |p| p.base.slots = ptr::null(),
            REPLAYSSM_ERR_INVALID_ARGUMENT,
            "slots is NULL",
        ),
        (
            "no accept lens",
            |p| p.accept_lens = ptr::null(),
            REPLAYSSM_ERR_INVALID_ARGUMENT,
            "exactly one of accept_lens",
        ),
        (
            "both accept forms",
            |p| p.accept_paths = p.accept_lens,
            REPLAYSSM_ERR_INVALID_ARGUMENT,
            "exactly one of accept_lens",
        ),
        (
            "half a track",
            |p| p.track_slots = p.base.slots,
            REPLAYSSM_ERR_INVALID_ARGUMENT,
            "track_slots and track_steps",
        ),
        (
            "batch 0",
            |p| p.base.batch = 0,
            REPLAYSSM_ERR_INVALID_ARGUMENT,
            "batch = 0",
        ),
        (
            "batch huge",
            |p| p.base.batch = 1 << 20,
            REPLAYSSM_ERR_INVALID_ARGUMENT,
            "batch = 1048576",
        ),
        (
            "negative slots",
            |p| p.base.num_slots = -3,
            REPLAYSSM_ERR_INVALID_ARGUMENT,
            "num_slots = -3",
        ),
        (
            "window 0",
            |p| p.ring.window = 0,
            REPLAYSSM_ERR_INVALID_ARGUMENT,
            "window = 0",
        ),
        (
            "HV not a multiple of H",
            |p| p.base.HV = 3,
            REPLAYSSM_ERR_INVALID_ARGUMENT,
            "HV = 3 is not a multiple of H = 2",
        ),
        ("H 0", |p| p.base.H = 0, REPLAYSSM_ERR_INVALID_ARGUMENT, "H = 0"),
        ("K 48", |p| p.base.K = 48, REPLAYSSM_ERR_UNSUPPORTED, "K = 48"),
        ("dtype 9", |p| p.base.dtype = 9, REPLAYSSM_ERR_INVALID_ARGUMENT, "dtype"),
        (
            "variant -1",
            |p| p.base.variant = -1,
            REPLAYSSM_ERR_INVALID_ARGUMENT,
            "variant",
        ),
        (
            "struct_size small",
            |p| p.struct_size = 8,
            REPLAYSSM_ERR_STRUCT_SIZE,
            "struct_size is 8",
        ),
        (
            "struct_size large",
            |p| p.struct_size += 8,
            REPLAYSSM_ERR_STRUCT_SIZE,
            "expects 176",
        ),
    ];
    for (what, edit, status, needle) in cases {
        let mut p = good;
        edit(&mut p);
        let st = unsafe { replayssm_fold(EMU, &p, ptr::null_mut()) };
        let msg = last_error();
        assert_eq!(st, status, "{what}: {msg}");
        assert!(
            msg.starts_with("replayssm_fold: ") && msg.contains(needle),
            "{what}: message {msg:?} lacks {needle:?}"
        );
    }
    // Nothing was launched by a refused call: the state is as the one good fold left it.
    bits_equal(&case.state, &before).expect("a refused call wrote the state");

    assert_eq!(
        unsafe { replayssm_fold(EMU, ptr::null(), ptr::null_mut()) },
        REPLAYSSM_ERR_INVALID_ARGUMENT
    );
    assert!(last_error().contains("params is NULL"));
    assert_eq!(
        unsafe { replayssm_fold(7, &good, ptr::null_mut()) },
        REPLAYSSM_ERR_INVALID_ARGUMENT
    );
    assert!(last_error().contains("backend 7"), "{}", last_error());
    match Backend::Cuda.availability() {
        Err(why) => {
            let st = unsafe { replayssm_fold(CUDA, &good, ptr::null_mut()) };
            assert_eq!(st, REPLAYSSM_ERR_BACKEND_UNAVAILABLE);
            assert!(last_error().contains(&why), "{}", last_error());
            assert_eq!(replayssm_backend_available(CUDA), REPLAYSSM_ERR_BACKEND_UNAVAILABLE);
        }
        Ok(()) => say("capi: a GPU is present, the BACKEND_UNAVAILABLE case is not exercised"),
    }
    assert_eq!(replayssm_backend_available(EMU), REPLAYSSM_OK);

    // The other entries refuse NULL params and a bad struct_size the same way.
    let tiny = 4u32;
    let t: *const u32 = &tiny;
    type Entry = Box<dyn Fn() -> replayssm_status>;
    // SAFETY: each entry reads only the 4-byte struct_size before refusing.
    let entries: Vec<(&str, Entry)> = vec![
        (
            "replayssm_recurrent",
            Box::new(move || unsafe { replayssm_recurrent(EMU, t.cast(), ptr::null_mut()) }),
        ),
        (
            "replayssm_verify",
            Box::new(move || unsafe { replayssm_verify(EMU, t.cast(), ptr::null_mut()) }),
        ),
        (
            "replayssm_replay",
            Box::new(move || unsafe { replayssm_replay(EMU, t.cast(), ptr::null_mut()) }),
        ),
        (
            "replayssm_decode",
            Box::new(move || unsafe { replayssm_decode(EMU, t.cast(), ptr::null_mut()) }),
        ),
        (
            "replayssm_decode_materialize",
            Box::new(move || unsafe { replayssm_decode_materialize(EMU, t.cast(), ptr::null_mut()) }),
        ),
        (
            "replayssm_decode_cursors",
            Box::new(move || unsafe { replayssm_decode_cursors(EMU, t.cast(), ptr::null_mut()) }),
        ),
    ];
    for (name, call) in entries {
        assert_eq!(call(), REPLAYSSM_ERR_STRUCT_SIZE, "{name}");
        assert!(last_error().starts_with(name), "{name}: {}", last_error());
    }
    unsafe {
        assert_eq!(
            replayssm_recurrent(EMU, ptr::null(), ptr::null_mut()),
            REPLAYSSM_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            replayssm_verify(EMU, ptr::null(), ptr::null_mut()),
            REPLAYSSM_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            replayssm_replay(EMU, ptr::null(), ptr::null_mut()),
            REPLAYSSM_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            replayssm_decode(EMU, ptr::null(), ptr::null_mut()),
            REPLAYSSM_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            replayssm_decode_cursors(EMU, ptr::null(), ptr::null_mut()),
            REPLAYSSM_ERR_INVALID_ARGUMENT
        );
    }
}

#[test]
fn token_entries_refuse_a_missing_or_double_gate_and_short_strides() {
    let data = data(Variant::Gdn, DType::BF16, &[2, 3], &[], 3);
    let d = data.dims;
    let n = data.num_tokens();
    let mut o = ActBuffer::nan(DType::BF16, n * d.hv * d.v);
    let mut state = data.state.clone();
    let mut good = replayssm_recurrent_params::default();
    tokens!(good, data, 0, 1);
    good.base.num_layers = 1;
    good.cu_seqlens = data.cu_seqlens.as_ptr();
    good.base.slots = data.slots.as_ptr();
    good.base.state = state.as_mut_ptr();
    good.tokens.o = o.as_bytes_mut().as_mut_ptr().cast();
    good.tokens.o_stride = (d.hv * d.v) as i64;
    good.num_tokens = n as i32;
    good.base.batch = 2;
    good.max_seqlen = 3;
    good.base.num_slots = (data.state.len() / d.state_elems()) as i32;
    let g = vec![-0.5f32; n * d.hv];
    type Edit = Box<dyn Fn(&mut replayssm_recurrent_params)>;
    let gp = g.as_ptr();
    let cases: Vec<(&str, Edit, &str)> = vec![
        (
            "both gates",
            Box::new(move |p| p.tokens.g = gp),
            "exactly one gate form",
        ),
        (
            "no gate",
            Box::new(|p| {
                p.tokens.a = ptr::null();
                p.tokens.b = ptr::null();
                p.tokens.A_log = ptr::null();
                p.tokens.dt_bias = ptr::null()
            }),
            "exactly one gate form",
        ),
        (
            "half a raw gate",
            Box::new(|p| p.tokens.dt_bias = ptr::null()),
            "dt_bias (raw gate) is NULL",
        ),
        ("q NULL", Box::new(|p| p.tokens.q = ptr::null()), "q is NULL"),
        ("short q stride", Box::new(|p| p.tokens.q_stride = 3), "q_stride"),
        ("short o stride", Box::new(|p| p.tokens.o_stride = 0), "o_stride"),
        ("short a stride", Box::new(|p| p.tokens.a_stride = 1), "a_stride"),
        ("nan scale", Box::new(|p| p.tokens.scale = f32::NAN), "scale"),
        ("write_state 2", Box::new(|p| p.write_state = 2), "write_state"),
        ("max_seqlen 0", Box::new(|p| p.max_seqlen = 0), "max_seqlen"),
    ];
    for (what, edit, needle) in cases {
        let mut p = good;
        edit(&mut p);
        // SAFETY: host buffers sized for the valid params; one field broken.
        let st = unsafe { replayssm_recurrent(EMU, &p, ptr::null_mut()) };
        assert_eq!(st, REPLAYSSM_ERR_INVALID_ARGUMENT, "{what}: {}", last_error());
        assert!(last_error().contains(needle), "{what}: {}", last_error());
    }
    assert!(o.to_f32().iter().all(|x| x.is_nan()), "a refused call wrote outputs");
}

fn validate(args: &[&str]) -> (replayssm_status, String) {
    let owned: Vec<CString> = args.iter().map(|a| CString::new(*a).unwrap()).collect();
    let ptrs: Vec<*const c_char> = owned.iter().map(|c| c.as_ptr()).collect();
    let mut out = vec![0 as c_char; 4096];
    // SAFETY: argc strings, a writable buffer of the given length.
    let st = unsafe { replayssm_validate_config(ptrs.len() as i32, ptrs.as_ptr(), out.as_mut_ptr(), out.len()) };
    // SAFETY: always NUL-terminated by the callee.
    (
        st,
        unsafe { CStr::from_ptr(out.as_ptr()) }.to_string_lossy().into_owned(),
    )
}

#[test]
fn validate_config_applies_the_gates_to_the_engines_own_flags() {
    let (st, text) = validate(&["--enable-linear-replayssm", "--disaggregation-mode", "decode"]);
    assert_eq!(st, REPLAYSSM_ERR_CONFIG_REFUSED, "{text}");
    assert!(
        text.starts_with("A3:") && text.contains("--disaggregation-mode='decode'"),
        "{text}"
    );
    assert!(last_error().contains("A3:"), "{}", last_error());

    let (st, text) = validate(&[
        "--enable-linear-replayssm-spec",
        "--speculative-algorithm",
        "EAGLE",
        "--speculative-eagle-topk",
        "4",
    ]);
    assert_eq!(st, REPLAYSSM_OK, "{text}");
    assert!(text.contains("kernels: VT tree verify"), "{text}");
    assert!(text.contains("warning: "), "the float32 default is a warning: {text}");

    let (st, text) = validate(&["--enable-linear-replayssm-spec", "--no-such-flag"]);
    assert_eq!(st, REPLAYSSM_ERR_INVALID_ARGUMENT);
    assert!(text.contains("--no-such-flag"), "{text}");
    let (st, text) = validate(&["--speculative-eagle-topk", "many"]);
    assert_eq!(st, REPLAYSSM_ERR_INVALID_ARGUMENT);
    assert!(text.contains("many"), "{text}");

    // A short buffer is truncated and still NUL-terminated; NULL argv entries are refused.
    let arg = CString::new("--enable-linear-replayssm").unwrap();
    let argv = [arg.as_ptr()];
    let mut small = [0x7f as c_char; 8];
    // SAFETY: one valid string; an 8-byte buffer.
    let st = unsafe { replayssm_validate_config(1, argv.as_ptr(), small.as_mut_ptr(), small.len()) };
    assert_eq!(st, REPLAYSSM_OK);
    assert_eq!(small[7], 0, "not NUL-terminated");
    let nulls = [ptr::null::<c_char>()];
    // SAFETY: argv holds one (NULL) entry; out may be NULL.
    let st = unsafe { replayssm_validate_config(1, nulls.as_ptr(), ptr::null_mut(), 0) };
    assert_eq!(st, REPLAYSSM_ERR_INVALID_ARGUMENT);
    assert!(last_error().contains("argv[0] is NULL"));
    // SAFETY: argc < 0 is refused before argv is read.
    assert_eq!(
        unsafe { replayssm_validate_config(-1, ptr::null(), ptr::null_mut(), 0) },
        REPLAYSSM_ERR_INVALID_ARGUMENT
    );
}

#[test]
fn status_strings_versions_and_struct_sizes() {
    for s in 0..=8 {
        // SAFETY: static NUL-terminated strings.
        let text = unsafe { CStr::from_ptr(replayssm_status_string(s)) }.to_str().unwrap();
        assert!(text.starts_with("REPLAYSSM_"), "{s}: {text}");
    }
    // SAFETY: as above.
    let unknown = unsafe { CStr::from_ptr(replayssm_status_string(-5)) }.to_str().unwrap();
    assert_eq!(unknown, "unknown replayssm_status");
    assert_eq!(replayssm_abi_version(), REPLAYSSM_ABI_VERSION);
    let v = env!("CARGO_PKG_VERSION")
        .split('.')
        .map(|x| x.parse::<u32>().unwrap())
        .collect::<Vec<_>>();
    assert_eq!(replayssm_version(), v[0] * 10000 + v[1] * 100 + v[2]);
    let size = |n: &str| {
        let c = CString::new(n).unwrap();
        // SAFETY: a NUL-terminated name.
        unsafe { replayssm_struct_size(c.as_ptr()) }
    };
    assert_eq!(
        size("replayssm_fold_params"),
        std::mem::size_of::<replayssm_fold_params>()
    );
    assert_eq!(
        size("replayssm_decode_params"),
        std::mem::size_of::<replayssm_decode_params>()
    );
    assert_eq!(
        size("replayssm_cursor_params"),
        std::mem::size_of::<replayssm_cursor_params>()
    );
    assert_eq!(size("nonsense"), 0);
    // SAFETY: NULL is allowed.
    assert_eq!(unsafe { replayssm_struct_size(ptr::null()) }, 0);
}
