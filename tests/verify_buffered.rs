//! Kernel VB, the buffered speculative verify: over long chains of steps on device memory (the
//! emulator here, CUDA in `vb_chain_on_the_gpu`, which device-check runs) every flushed checkpoint is bit-identical to
//! V + F's and to kernel R's after the same accepted tokens, with random windows and accept
//! lengths (0 and T included), null rows, forced flushes and slots handed to new requests
//! (reset); VB's outputs are within V's tolerance of the f64 reference from the state F committed
//! (and staged V's bits where a row has no history), and
//! the commit's cursors and flush decisions are the protocol's (`h' = h + a`, a flush when the
//! next window would not fit). Garbage cursors given to the kernel layer are flagged and skipped.
mod common;

use common::spec_chain::{draw_windows, recurrent_commit, rng, run_verify, spec_pool, Commit};
use common::*;
use rand::Rng;
use replayssm::backend::Backend;
use replayssm::config::{resolve, EngineFlags, Mode, SpecCommit};
use replayssm::ffi;
use replayssm::memory::{DeviceAct, DeviceVec, Stream};
use replayssm::numerics::compare;
use replayssm::ring::{RingShape, SpecRing};
use replayssm::spec::fold;
use replayssm::tuning::{self, Choice, Kernel};
use replayssm::{ActBuffer, BufferedFold, BufferedRing, CheckpointPool, DType, Error, HeadDims, Variant};
use replayssm_tools::staged::DeviceTokens;
use replayssm_tools::workload::RecurrentData;

/// Steps per variant of the long chains; `REPLAYSSM_CHAIN_COMMITS` overrides (CI keeps the
/// design §6 minimum of 10 000).
fn chain_steps(default: usize) -> usize {
    std::env::var("REPLAYSSM_CHAIN_COMMITS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// A pool resolved with `--enable-linear-replayssm-spec --linear-replayssm-spec-buffered
/// --linear-replayssm-cache-len L`.
fn buffered_pool(shape: &RingShape, cache_len: usize, state: &[f32]) -> CheckpointPool {
    let cfg = resolve(&EngineFlags {
        linear_replayssm_spec_buffered: true,
        linear_replayssm_cache_len: Some(cache_len as i64),
        ..EngineFlags::spec_ring(shape.variant)
    })
    .unwrap();
    assert_eq!(
        cfg.mode,
        Mode::Spec {
            commit: SpecCommit::Buffered { cache_len }
        }
    );
    let mut pool = CheckpointPool::new(&cfg, shape.dims, shape.layers, shape.slots).unwrap();
    pool.state_mut().copy_from_slice(state);
    pool
}

fn slot_range(shape: &RingShape, layer: usize, slot: usize) -> std::ops::Range<usize> {
    let at = shape.pool_offset(layer, slot);
    at..at + shape.dims.state_elems()
}

const SMALL: HeadDims = HeadDims {
    h: 1,
    hv: 1,
    k: 32,
    v: 16,
};

/// Every layer of `slot`: the buffered world's checkpoint against V + F's and R's, bit for bit.
fn slot_matches(shape: &RingShape, got: &[f32], pool_f: &[f32], pool_r: &[f32], slot: usize, what: &str) {
    for l in 0..shape.layers {
        let range = slot_range(shape, l, slot);
        if let Err(e) = bits_equal(&got[range.clone()], &pool_f[range.clone()]) {
            panic!("{what} layer {l} slot {slot}: VB's flushed checkpoint != V + F's: {e}");
        }
        if let Err(e) = bits_equal(&got[range.clone()], &pool_r[range]) {
            panic!("{what} layer {l} slot {slot}: VB's flushed checkpoint != R's: {e}");
        }
    }
}

/// One chain on `backend` (device memory): the V + F world and R on host pools, the buffered
/// world on a device pool; see the module comment for what is checked.
#[allow(clippy::too_many_arguments)]
fn chain(
    backend: Backend,
    variant: Variant,
    dims: HeadDims,
    dtype: DType,
    layers: usize,
    cache_len: usize,
    steps: usize,
    seed: u64,
) {
    // With no history VB's outputs are staged V's bits (VB is staged V plus the history's terms).
    let _v = tuning::force(
        Kernel::V,
        Choice {
            imp: tuning::Impl::Staged,
            block_rows: 0,
        },
    );
    let window = 4usize;
    let mut r = rng(seed);
    let live_slots = [3i32, 0, 4];
    let batch = live_slots.len();
    let num_slots = 6;
    let shape = RingShape {
        variant,
        dims,
        dtype,
        layers,
        slots: num_slots,
        window,
    };
    let start: Vec<f32> = (0..shape.pool_elems()).map(|_| r.gen_range(-0.5f32..0.5)).collect();
    let mut pool_f = spec_pool(&shape, &start);
    let mut pool_r = start.clone();
    let mut ring = SpecRing::new(shape, true).unwrap();
    let stream = Stream::new(backend).unwrap();
    let mut dpool = buffered_pool(&shape, cache_len, &start).to_device(&stream).unwrap();
    let mut bring = BufferedRing::for_pool(&dpool, window, dtype, true).unwrap();
    assert_eq!(bring.cache_len(), cache_len);
    let mut flush_lens = DeviceVec::<i32>::zeros(backend, batch).unwrap();
    // The protocol's history per slot, as the test expects it.
    let mut hist = vec![0usize; num_slots];
    let (mut accepted, mut flushes, mut forced, mut resets) = (0usize, 0usize, 0usize, 0usize);
    let mut worst_ratio = 0.0f64; // VB's output error over the reordered bound, worst of the chain
    for step in 0..steps {
        let slots: Vec<i32> = live_slots
            .iter()
            .map(|&x| if r.gen_range(0..7) == 0 { -1 } else { x })
            .collect();
        let dslots = DeviceVec::from_host(&stream, &slots).unwrap();
        let windows = draw_windows(variant, dims, dtype, layers, window, num_slots, &slots, seed, step);
        let what = format!("{backend} {variant} {dtype} L {cache_len} step {step}");
        for (l, w) in windows.iter().enumerate() {
            let o_v = run_verify(backend, w, &pool_f, l, Some(&mut ring)).unwrap();
            let n = w.num_tokens();
            let t = DeviceTokens::upload(&stream, &w.inputs()).unwrap();
            let cols = dims.hv * dims.v;
            let mut od = DeviceAct::from_host(&stream, &ActBuffer::nan(dtype, n * cols)).unwrap();
            stream
                .verify_buffered(&t.inputs(), &dpool, l, &mut od.view_mut(0, n, cols, cols), &mut bring)
                .unwrap();
            let got = od.to_host(&stream).unwrap().to_f32();
            // Against the f64 reference from the state F committed (R's bits), V's tolerance.
            let layer_pool = &pool_f.state()[shape.pool_offset(l, 0)..shape.pool_offset(l + 1, 0)];
            let f64ref = replayssm::reference::recurrent::<f64>(&w.inputs(), layer_pool);
            let naive = replayssm::reference::recurrent::<f32>(&w.inputs(), layer_pool);
            let tol = output_tolerance(dtype);
            let naive_o: Vec<f32> = naive.o.iter().map(|&x| dtype.round(x)).collect();
            let naive_err = compare(&naive_o, &f64ref.o, tol).max_abs_err;
            let c = compare(&got, &f64ref.o, tol);
            assert!(c.passed(), "{what} layer {l}: VB's outputs against f64: {c}");
            let bound = reordered_bound(naive_err, &f64ref.o);
            worst_ratio = worst_ratio.max(c.max_abs_err / bound);
            assert!(
                c.max_abs_err <= bound,
                "{what} layer {l}: VB {:.3e} > 2x naive {naive_err:.3e} + 4 ulp",
                c.max_abs_err
            );
            // Rows with no history: staged V's bits (windows are full: row b's tokens b T..).
            let ov = o_v.to_f32();
            for (b, &slot) in slots.iter().enumerate() {
                if slot >= 0 && hist[slot as usize] == 0 {
                    let rows = b * window * cols..(b + 1) * window * cols;
                    bits_equal(&got[rows.clone()], &ov[rows])
                        .unwrap_or_else(|e| panic!("{what} layer {l} row {b}: no history, != staged V: {e}"));
                }
            }
        }
        let commit = Commit::draw(&mut r, &slots, window, &[-1, -1, -1], 0.0);
        fold(backend, &mut pool_f, &ring, &slots, &commit.accept[..], None).unwrap();
        let lens = commit.lens();
        accepted += lens.iter().sum::<usize>();
        recurrent_commit(backend, &shape, &mut pool_r, &windows, &lens, false);
        let fl = flush_lens.as_mut_slice();
        buffered_commit(&stream, &mut dpool, &mut bring, dslots.as_slice(), &commit.accept, fl).unwrap();
        stream.check_errors().unwrap();
        // The protocol: the history grows by the accepted count; a row whose next window would
        // not fit flushes (its whole history folded, cursor 0).
        let got_flush = flush_lens.to_vec(&stream).unwrap();
        let mut flushed = vec![];
        for (b, &slot) in slots.iter().enumerate() {
            let want = if slot < 0 {
                0
            } else {
                let s = slot as usize;
                let next = hist[s] + lens[b];
                if next > cache_len - window {
                    hist[s] = 0;
                    flushed.push(s);
                    next
                } else {
                    hist[s] = next;
                    0
                }
            };
            assert_eq!(got_flush[b], want as i32, "{what}: row {b} (slot {slot}) flush length");
        }
        assert_eq!(bring.histories(&stream).unwrap(), hist, "{what}: cursors");
        flushes += flushed.len();
        if !flushed.is_empty() || r.gen_range(0..5) == 0 {
            // A forced flush now and then (a finished or preempted request, a prefix snapshot).
            if flushed.is_empty() {
                let s = live_slots[r.gen_range(0..batch)];
                let fs = DeviceVec::from_host(&stream, &[s]).unwrap();
                let mut scratch = DeviceVec::<i32>::zeros(backend, 1).unwrap();
                stream
                    .buffered_fold(
                        &mut dpool,
                        &mut bring,
                        fs.as_slice(),
                        BufferedFold::Flush,
                        scratch.as_mut_slice(),
                    )
                    .unwrap();
                assert_eq!(
                    scratch.to_vec(&stream).unwrap(),
                    [hist[s as usize] as i32],
                    "{what}: forced flush"
                );
                hist[s as usize] = 0;
                flushed.push(s as usize);
                forced += 1;
            }
            let host = dpool.to_host(&stream).unwrap();
            for &s in &flushed {
                bring.check_flushed(&stream, &[s], "reading it").unwrap();
                slot_matches(&shape, host.state(), pool_f.state(), &pool_r, s, &what);
            }
        }
        // A slot handed to a new request now and then: its history is dropped, and the state the
        // new request starts from (its prefill's) is what the buffered checkpoint holds.
        if r.gen_range(0..50) == 0 {
            let s = live_slots[r.gen_range(0..batch)];
            let fs = DeviceVec::from_host(&stream, &[s]).unwrap();
            stream.buffered_reset(&mut bring, fs.as_slice()).unwrap();
            hist[s as usize] = 0;
            let host = dpool.to_host(&stream).unwrap();
            for l in 0..layers {
                let range = slot_range(&shape, l, s as usize);
                pool_f.state_mut()[range.clone()].copy_from_slice(&host.state()[range.clone()]);
                pool_r[range.clone()].copy_from_slice(&host.state()[range]);
            }
            resets += 1;
        }
        // A slot with a history refuses to be read.
        for &s in live_slots.iter().filter(|&&s| hist[s as usize] > 0) {
            let e = bring.check_flushed(&stream, &[s as usize], "reading it").unwrap_err();
            assert!(
                matches!(e, Error::PendingHistory { slot, .. } if slot == s as usize),
                "{e}"
            );
        }
    }
    // The end: flush everything; every slot is bit-identical.
    let fs = DeviceVec::from_host(&stream, &live_slots).unwrap();
    stream
        .buffered_fold(
            &mut dpool,
            &mut bring,
            fs.as_slice(),
            BufferedFold::Flush,
            flush_lens.as_mut_slice(),
        )
        .unwrap();
    stream.check_errors().unwrap();
    let host = dpool.to_host(&stream).unwrap();
    for s in 0..num_slots {
        slot_matches(&shape, host.state(), pool_f.state(), &pool_r, s, "end");
    }
    assert!(flushes > 0 && forced > 0, "the chain must flush both ways");
    println!(
        "{backend} {variant} {dtype} {dims:?} L {cache_len}: {steps} steps, {accepted} tokens accepted, {flushes} commit flushes, {forced} forced, {resets} resets; flushed checkpoints bit-identical to V + F and R; outputs within V's bound (worst error {worst_ratio:.2} of it), staged V's bits without history"
    );
}

#[test]
fn vb_flushes_are_bit_identical_to_v_plus_f_and_recurrent_over_10000_steps_gdn() {
    chain(
        Backend::Emulated,
        Variant::Gdn,
        SMALL,
        DType::BF16,
        2,
        12,
        chain_steps(10_000),
        run_seed(),
    );
}

#[test]
fn vb_flushes_are_bit_identical_to_v_plus_f_and_recurrent_over_10000_steps_kda() {
    chain(
        Backend::Emulated,
        Variant::Kda,
        SMALL,
        DType::F16,
        2,
        8,
        chain_steps(10_000),
        run_seed() + 1,
    );
}

/// On a GPU: the chains with CUDA kernels throughout (VB, the cursor kernel and F on device
/// memory; V + F and R staged). Skips, saying why, without a GPU; fails under
/// REPLAYSSM_REQUIRE_GPU=1.
#[test]
fn vb_chain_on_the_gpu() {
    if !replayssm_tools::testing::gpu_available("vb_chain_on_the_gpu") {
        return;
    }
    let dims = HeadDims {
        h: 2,
        hv: 4,
        k: 128,
        v: 128,
    };
    let steps = chain_steps(300).min(300);
    chain(
        Backend::Cuda,
        Variant::Gdn,
        dims,
        DType::BF16,
        2,
        16,
        steps,
        run_seed() + 3,
    );
    chain(
        Backend::Cuda,
        Variant::Kda,
        dims,
        DType::F16,
        2,
        32,
        steps,
        run_seed() + 4,
    );
}

#[test]
fn vb_at_k96_flushes_bit_identical_to_v_plus_f_and_recurrent() {
    let dims = K96;
    let steps = chain_steps(120).min(120);
    for (variant, dtype, cache_len, seed) in [(Variant::Gdn, DType::BF16, 16, 96), (Variant::Kda, DType::F16, 8, 97)] {
        chain(
            Backend::Emulated,
            variant,
            dims,
            dtype,
            1,
            cache_len,
            steps,
            run_seed() + seed,
        );
    }
}

#[test]
fn vb_with_gqa_heads_and_a_long_history() {
    let dims = HeadDims {
        h: 1,
        hv: 2,
        k: 64,
        v: 48,
    };
    chain(
        Backend::Emulated,
        Variant::Kda,
        dims,
        DType::BF16,
        2,
        32,
        chain_steps(300).min(300),
        run_seed() + 2,
    );
}

/// Kernel VB's params built by hand over host buffers (the emulator's kernel layer, which checks
/// the struct only: device-side indices reach the kernel as they are). Two GDN requests (3 and 2
/// tokens) on slots 1 and 2 of 4, a ring of L = 8 positions; slot 1 has a history of 3 records,
/// slot 2 of 2.
struct RawVb {
    data: RecurrentData,
    o: ActBuffer,
    state: Vec<f32>,
    ring_v: Vec<f32>,
    ring_k: Vec<f32>,
    ring_g: Vec<f32>,
    ring_beta: Vec<f32>,
    ring_u: Vec<f32>,
    cursors: Vec<i32>,
    error_word: u32,
    /// `base.block_rows` (0: the whole head, V = 32; 16: two row blocks per head).
    block_rows: i32,
}

const RAW_L: usize = 8;

impl RawVb {
    fn new(seed: u64) -> RawVb {
        let dims = HeadDims {
            h: 1,
            hv: 2,
            k: 32,
            v: 32,
        };
        let mut s = spec(Variant::Gdn, dims, DType::F32, &[3, 2]);
        s.raw_gate = false;
        let mut data = RecurrentData::random(&s, seed);
        data.slots = vec![1, 2];
        let ns = 4;
        let mut r = rng(seed);
        let mut rand = |n: usize| -> Vec<f32> { (0..n).map(|_| r.gen_range(-0.5f32..0.5)).collect() };
        let n = data.num_tokens();
        RawVb {
            o: ActBuffer::nan(DType::F32, n * 64),
            state: rand(ns * dims.state_elems()),
            ring_v: rand(ns * 2 * RAW_L * 32),
            ring_k: rand(ns * RAW_L * 32),
            ring_g: rand(ns * 2 * RAW_L).iter().map(|x| -x.abs()).collect(),
            ring_beta: rand(ns * 2 * RAW_L).iter().map(|x| x.abs()).collect(),
            ring_u: rand(ns * 2 * RAW_L * 32),
            cursors: vec![0, 3, 2, 0],
            error_word: 0,
            block_rows: 0,
            data,
        }
    }

    fn launch(&mut self) -> ffi::rssm_status {
        self.launch_with(|_| {})
    }

    /// The launch with its params edited first.
    fn launch_with(&mut self, edit: impl FnOnce(&mut ffi::rssm_verify_buffered_params)) -> ffi::rssm_status {
        let replayssm_tools::workload::GateData::Precomputed { g, beta } = &self.data.gate else {
            unreachable!()
        };
        let n = self.data.num_tokens() as i32;
        let verify = ffi::rssm_verify_params {
            base: ffi::rssm_base_params {
                slots: self.data.slots.as_ptr(),
                state: self.state.as_mut_ptr(),
                error_word: &mut self.error_word,
                batch: 2,
                num_slots: 4,
                num_layers: 1,
                layer: 0,
                H: 1,
                HV: 2,
                K: 32,
                V: 32,
                dtype: ffi::rssm_dtype_RSSM_DTYPE_F32 as i32,
                variant: ffi::rssm_variant_RSSM_VARIANT_GDN as i32,
                qk_l2norm: 1,
                impl_: ffi::rssm_impl_RSSM_IMPL_STAGED as i32,
                block_rows: self.block_rows,
                ..Default::default()
            },
            tokens: ffi::rssm_token_params {
                q: self.data.q.as_bytes().as_ptr().cast(),
                k: self.data.k.as_bytes().as_ptr().cast(),
                v: self.data.v.as_bytes().as_ptr().cast(),
                g: g.as_ptr(),
                beta: beta.as_ptr(),
                o: self.o.as_bytes_mut().as_mut_ptr().cast(),
                q_stride: 32,
                k_stride: 32,
                v_stride: 64,
                o_stride: 64,
                scale: 0.17,
                ..Default::default()
            },
            ring: ffi::rssm_ring_params {
                v: self.ring_v.as_mut_ptr().cast(),
                k: self.ring_k.as_mut_ptr().cast(),
                g: self.ring_g.as_mut_ptr(),
                beta: self.ring_beta.as_mut_ptr(),
                window: RAW_L as i32,
                ..Default::default()
            },
            cu_seqlens: self.data.cu_seqlens.as_ptr(),
            num_tokens: n,
            max_seqlen: 3,
            ..Default::default()
        };
        let mut p = ffi::rssm_verify_buffered_params {
            verify,
            cursors: self.cursors.as_ptr(),
            ring_u: self.ring_u.as_mut_ptr(),
        };
        edit(&mut p);
        // SAFETY: host buffers sized for these params; only the cursors may be garbage.
        unsafe { ffi::rssm_emu_verify_buffered(&p, std::ptr::null_mut()) }
    }
}

/// A garbage cursor (negative, past L - len, far outside) is flagged in the error word and its
/// request skipped (outputs zero, its ring records untouched) while the other request is served
/// as with clean cursors. VB never writes the checkpoint, garbage or not.
#[test]
fn garbage_cursors_are_flagged_and_the_request_skipped() {
    let mut clean = RawVb::new(43);
    let start = clean.state.clone();
    assert_eq!(clean.launch(), ffi::rssm_status_RSSM_OK);
    assert_eq!(clean.error_word, 0, "clean cursors flagged {:#x}", clean.error_word);
    assert!(bits_equal(&clean.state, &start).is_ok(), "VB wrote the checkpoint");
    // The window went after the history: slot 1's positions 3..6, slot 2's 2..4 (ring_beta is
    // [NS, HV, L]).
    let beta_at = |w: &RawVb, slot: usize, pos: usize| w.ring_beta[(slot * 2) * RAW_L + pos];
    let fresh = RawVb::new(43);
    for (slot, h, len) in [(1usize, 3usize, 3usize), (2, 2, 2)] {
        for pos in 0..RAW_L {
            let written = pos >= h && pos < h + len;
            assert_eq!(
                beta_at(&clean, slot, pos).to_bits() != beta_at(&fresh, slot, pos).to_bits(),
                written,
                "slot {slot} ring position {pos}"
            );
        }
    }
    // The window's corrections too (ring_u is [NS, HV, L, V]), and nothing else.
    let u_at = |w: &RawVb, slot: usize, pos: usize| w.ring_u[((slot * 2) * RAW_L + pos) * 32];
    for (slot, h, len) in [(0usize, 0usize, 0usize), (1, 3, 3), (2, 2, 2), (3, 0, 0)] {
        for pos in 0..RAW_L {
            let written = pos >= h && pos < h + len;
            assert_eq!(
                u_at(&clean, slot, pos).to_bits() != u_at(&fresh, slot, pos).to_bits(),
                written,
                "slot {slot} ring_u position {pos}"
            );
        }
    }
    let ring_v_slot = 2 * RAW_L * 32;
    for (what, h) in [
        ("negative", -1),
        ("past L - len", (RAW_L - 3 + 1) as i32),
        ("far outside", i32::MAX),
    ] {
        let mut w = RawVb::new(43);
        w.cursors[1] = h;
        let before = (
            w.ring_v.clone(),
            w.ring_k.clone(),
            w.ring_beta.clone(),
            w.ring_u.clone(),
        );
        assert_eq!(w.launch(), ffi::rssm_status_RSSM_OK, "{what}");
        assert_eq!(
            w.error_word,
            ffi::RSSM_DEVERR_BAD_LENGTH,
            "{what}: error word {:#x}",
            w.error_word
        );
        assert!(bits_equal(&w.state, &start).is_ok(), "{what}: VB wrote the checkpoint");
        assert!(
            w.ring_v[ring_v_slot..2 * ring_v_slot] == before.0[ring_v_slot..2 * ring_v_slot],
            "{what}: the skipped slot's ring was written"
        );
        assert!(
            w.ring_beta[2 * RAW_L..4 * RAW_L] == before.2[2 * RAW_L..4 * RAW_L],
            "{what}"
        );
        assert!(
            w.ring_u[ring_v_slot..2 * ring_v_slot] == before.3[ring_v_slot..2 * ring_v_slot],
            "{what}: the skipped slot's corrections were written"
        );
        let (o, oc) = (w.o.to_f32(), clean.o.to_f32());
        assert!(
            o[..3 * 64].iter().all(|x| x.to_bits() == 0),
            "{what}: outputs of the skipped request not zero"
        );
        assert!(
            bits_equal(&o[3 * 64..], &oc[3 * 64..]).is_ok(),
            "{what}: the other request changed"
        );
    }
}

/// The history enters the outputs through its stored corrections: other ring_u values for the
/// history positions change both requests' outputs (a VB that replayed nothing, or read the wrong
/// positions, would not), and ring_u past the histories changes nothing.
#[test]
fn the_history_corrections_enter_the_outputs() {
    let mut clean = RawVb::new(47);
    assert_eq!(clean.launch(), ffi::rssm_status_RSSM_OK);
    let at = |slot: usize, hv: usize, pos: usize| ((slot * 2 + hv) * RAW_L + pos) * 32;
    // Past each history (slot 1: h = 3, slot 2: h = 2): overwritten or unread.
    let mut later = RawVb::new(47);
    for (slot, h) in [(1usize, 3usize), (2, 2)] {
        for hv in 0..2 {
            for pos in h..RAW_L {
                later.ring_u[at(slot, hv, pos)..at(slot, hv, pos) + 32].fill(9.0);
            }
        }
    }
    assert_eq!(later.launch(), ffi::rssm_status_RSSM_OK);
    assert!(
        bits_equal(&later.o.to_f32(), &clean.o.to_f32()).is_ok(),
        "ring_u past the history was read"
    );
    for (slot, rows) in [(1usize, 0..3 * 64), (2, 3 * 64..5 * 64)] {
        let mut w = RawVb::new(47);
        let pos = 1; // inside both histories
        w.ring_u[at(slot, 1, pos)..at(slot, 1, pos) + 32].fill(0.25);
        assert_eq!(w.launch(), ffi::rssm_status_RSSM_OK);
        let (o, oc) = (w.o.to_f32(), clean.o.to_f32());
        assert!(
            bits_equal(&o[rows.clone()], &oc[rows.clone()]).is_err(),
            "slot {slot}: its history's corrections did not reach its outputs"
        );
        let other = if rows.start == 0 { 3 * 64..5 * 64 } else { 0..3 * 64 };
        assert!(
            bits_equal(&o[other.clone()], &oc[other]).is_ok(),
            "slot {slot}: the other request changed"
        );
    }
}

/// Two row blocks per head (block_rows = 16 of V = 32): each block stages the same history and
/// writes its own rows' outputs and corrections; the result is the whole-head launch's up to the
/// projections' summation order.
#[test]
fn row_blocks_give_the_whole_head_result() {
    let mut whole = RawVb::new(53);
    assert_eq!(whole.launch(), ffi::rssm_status_RSSM_OK);
    let mut split = RawVb::new(53);
    split.block_rows = 16;
    assert_eq!(split.launch(), ffi::rssm_status_RSSM_OK);
    assert_eq!(split.error_word, 0);
    let close = |a: &[f32], b: &[f32], what: &str| {
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!(
                (x - y).abs() <= 1e-5 * (1.0 + y.abs()),
                "{what}[{i}]: {x} with two row blocks, {y} over the whole head"
            );
        }
    };
    close(&split.o.to_f32(), &whole.o.to_f32(), "outputs");
    close(&split.ring_u, &whole.ring_u, "ring_u");
    // Every row of both written windows was written (the fresh ring_u differs there).
    let fresh = RawVb::new(53);
    for (slot, h, len) in [(1usize, 3usize, 3usize), (2, 2, 2)] {
        for hv in 0..2 {
            for pos in h..h + len {
                let at = ((slot * 2 + hv) * RAW_L + pos) * 32;
                for r in 0..32 {
                    assert_ne!(
                        split.ring_u[at + r].to_bits(),
                        fresh.ring_u[at + r].to_bits(),
                        "slot {slot} head {hv} position {pos} row {r} not written"
                    );
                }
            }
        }
    }
}

/// What the launch layer refuses before any work (the checks every caller reaches): another
/// implementation, no ring_u, a ring past 64 positions.
#[test]
fn the_launch_refuses_what_vb_cannot_run() {
    for (what, edit) in [("impl DEFAULT", 0), ("ring_u null", 1), ("ring of 65 positions", 2)] {
        let mut w = RawVb::new(59);
        let o_before = w.o.to_f32();
        let st = match edit {
            0 => w.launch_with(|p| p.verify.base.impl_ = ffi::rssm_impl_RSSM_IMPL_DEFAULT as i32),
            1 => w.launch_with(|p| p.ring_u = std::ptr::null_mut()),
            _ => w.launch_with(|p| p.verify.ring.window = 65),
        };
        assert_eq!(st, ffi::rssm_status_RSSM_ERR_INVALID_ARGUMENT, "{what}");
        assert!(bits_equal(&w.o.to_f32(), &o_before).is_ok(), "{what}: outputs written");
    }
}

/// The block's shared memory decides the rows per block: the whole head where it fits, fewer
/// rows where it does not, and a refusal naming the shape where even 16 rows do not fit (a KDA
/// ring of 64 positions at K = 256 stages 64 keys and 65 rows of decays of 256 channels).
#[test]
fn the_rows_per_block_fit_the_shared_memory_or_the_ring_is_refused() {
    use replayssm::checks::params::buffered_block_rows;
    assert_eq!(buffered_block_rows(4, 16, 128, 128, false), Ok(0));
    let rows = buffered_block_rows(4, 64, 256, 128, true).unwrap();
    assert!([16, 32, 64].contains(&rows), "{rows}");
    let e = buffered_block_rows(16, 64, 256, 128, true).unwrap_err();
    assert!(
        e.contains("cache_len = 64") && e.contains("K = 256") && e.contains("16 rows"),
        "{e}"
    );
    // Refused when the ring is made, not at every launch.
    let shape = RingShape {
        variant: Variant::Kda,
        dims: HeadDims {
            h: 1,
            hv: 1,
            k: 256,
            v: 16,
        },
        dtype: DType::BF16,
        layers: 1,
        slots: 1,
        window: 16,
    };
    let pool = buffered_pool(&shape, 64, &vec![0.0; shape.pool_elems()]);
    let e = BufferedRing::for_pool(&pool, 16, DType::BF16, true).unwrap_err();
    assert!(e.to_string().contains("shared memory"), "{e}");
    assert!(BufferedRing::for_pool(&pool, 4, DType::BF16, true).is_ok());
}

/// The cursor kernel on garbage: a cursor or accept length out of range flags BAD_LENGTH and keeps
/// the cursor; a slot out of range or repeated is flagged and skipped; every row's flush length
/// is written (0 unless it flushes); the other rows follow the protocol.
#[test]
fn garbage_cursors_and_lengths_are_flagged_by_the_commit_and_the_rows_kept() {
    let (l, t) = (12i32, 4i32);
    let run = |op: u32, slots: &[i32], cursors: &mut Vec<i32>, accept: &[i32]| -> (Vec<i32>, u32) {
        let mut flush = vec![-7i32; slots.len()];
        let mut word = 0u32;
        let p = ffi::rssm_buffered_params {
            cursors: cursors.as_mut_ptr(),
            slots: slots.as_ptr(),
            accept_lens: accept.as_ptr(),
            flush_lens: flush.as_mut_ptr(),
            error_word: &mut word,
            batch: slots.len() as i32,
            num_slots: cursors.len() as i32,
            cache_len: l,
            window: t,
            op: op as i32,
            reserved: 0,
        };
        // SAFETY: host buffers of the documented extents; indices may be garbage.
        assert_eq!(
            unsafe { ffi::rssm_emu_buffered(&p, std::ptr::null_mut()) },
            ffi::rssm_status_RSSM_OK
        );
        (flush, word)
    };
    let commit = ffi::rssm_buffered_op_RSSM_BUFFERED_COMMIT;
    // Clean: slot 0 grows 2 -> 5; slot 1 (h 6, +3 = 9 > L - T = 8) flushes 9; row 2 is null.
    let mut c = vec![2, 6, 0, 0];
    assert_eq!(run(commit, &[0, 1, -1], &mut c, &[3, 3, 0]), (vec![0, 9, 0], 0));
    assert_eq!(c, [5, 0, 0, 0]);
    // FLUSH: the whole history, cursor 0.
    let mut c = vec![5, 0, 3, 0];
    assert_eq!(
        run(ffi::rssm_buffered_op_RSSM_BUFFERED_FLUSH, &[0, 2], &mut c, &[0, 0]),
        (vec![5, 3], 0)
    );
    assert_eq!(c, [0, 0, 0, 0]);
    // (what, slots, cursors, accept lengths, the error bit)
    type Case = (&'static str, Vec<i32>, Vec<i32>, Vec<i32>, u32);
    let cases: [Case; 6] = [
        (
            "cursor past L - T",
            vec![0, 1],
            vec![9, 1, 0, 0],
            vec![1, 1],
            ffi::RSSM_DEVERR_BAD_LENGTH,
        ),
        (
            "negative cursor",
            vec![0, 1],
            vec![-4, 1, 0, 0],
            vec![1, 1],
            ffi::RSSM_DEVERR_BAD_LENGTH,
        ),
        (
            "accept past T",
            vec![0, 1],
            vec![1, 1, 0, 0],
            vec![5, 1],
            ffi::RSSM_DEVERR_BAD_LENGTH,
        ),
        (
            "negative accept",
            vec![0, 1],
            vec![1, 1, 0, 0],
            vec![i32::MIN, 1],
            ffi::RSSM_DEVERR_BAD_LENGTH,
        ),
        (
            "slot out of range",
            vec![9, 1],
            vec![1, 1, 0, 0],
            vec![1, 1],
            ffi::RSSM_DEVERR_SLOT_OUT_OF_RANGE,
        ),
        (
            "slot -5",
            vec![-5, 1],
            vec![1, 1, 0, 0],
            vec![1, 1],
            ffi::RSSM_DEVERR_SLOT_OUT_OF_RANGE,
        ),
    ];
    for (what, slots, cursors, accept, bit) in cases {
        let mut c = cursors.clone();
        let (flush, word) = run(commit, &slots, &mut c, &accept);
        assert_eq!(word, bit, "{what}");
        assert_eq!(flush, [0, 0], "{what}");
        // Row 0 kept its cursor (if it has one); row 1 (slot 1, h 1, +1) was committed.
        if (0..4).contains(&slots[0]) {
            assert_eq!(
                c[slots[0] as usize], cursors[slots[0] as usize],
                "{what}: the flagged row's cursor"
            );
        }
        assert_eq!(c[1], 2, "{what}: the clean row");
    }
    // A live slot twice: both rows skipped.
    let mut c = vec![1, 1, 0, 0];
    let (flush, word) = run(commit, &[1, 1, 0], &mut c, &[1, 1, 2]);
    assert_eq!((flush, word), (vec![0, 0, 0], ffi::RSSM_DEVERR_DUPLICATE_SLOT));
    assert_eq!(c, [3, 1, 0, 0]);
}

/// What the host refuses before any launch, naming the field, its value and the limit: a window
/// longer than the ring's T, a history that leaves no room for the window (the emulator's device
/// memory is host memory, so its cursors are checked before the launch), an accept length past
/// T, a ring of another pool; nothing is written.
#[test]
fn host_refusals_name_the_field_and_write_nothing() {
    let backend = Backend::Emulated;
    let (variant, dtype, window, cache_len) = (Variant::Gdn, DType::BF16, 4usize, 10usize);
    let shape = RingShape {
        variant,
        dims: SMALL,
        dtype,
        layers: 1,
        slots: 3,
        window,
    };
    let start: Vec<f32> = (0..shape.pool_elems()).map(|i| (i % 7) as f32 * 0.01).collect();
    let stream = Stream::new(backend).unwrap();
    let mut dpool = buffered_pool(&shape, cache_len, &start).to_device(&stream).unwrap();
    let mut bring = BufferedRing::for_pool(&dpool, window, dtype, true).unwrap();
    let verify = |pool: &CheckpointPool<replayssm::Device>, bring: &mut BufferedRing, lens: &[usize], slots: &[i32]| {
        let mut s = spec(variant, SMALL, dtype, lens);
        s.spare_slots = 3 - slots.len();
        let mut w = RecurrentData::random(&s, 5);
        w.slots = slots.to_vec();
        let n = w.num_tokens();
        let t = DeviceTokens::upload(&stream, &w.inputs()).unwrap();
        let mut od = DeviceAct::from_host(&stream, &ActBuffer::nan(dtype, n * 16)).unwrap();
        let r = stream.verify_buffered(&t.inputs(), pool, 0, &mut od.view_mut(0, n, 16, 16), bring);
        (r, od.to_host(&stream).unwrap())
    };
    let e = verify(&dpool, &mut bring, &[5], &[1]).0.unwrap_err();
    assert!(
        e.to_string().contains("5 draft positions") && e.to_string().contains("T = 4"),
        "{e}"
    );
    // Slot 1 accepts 4 (history 4), then 3: 7 > L - T = 6, so that commit flushes it.
    let ones = DeviceVec::from_host(&stream, &[1i32]).unwrap();
    let mut fl = DeviceVec::<i32>::zeros(backend, 1).unwrap();
    for a in [4, 3] {
        // (A commit keeps records the step's VB wrote: verify first.)
        verify(&dpool, &mut bring, &[4], &[1]).0.unwrap();
        buffered_commit(
            &stream,
            &mut dpool,
            &mut bring,
            ones.as_slice(),
            &[a],
            fl.as_mut_slice(),
        )
        .unwrap();
    }
    assert_eq!(
        bring.histories(&stream).unwrap(),
        [0, 0, 0],
        "4 + 3 > L - T = 6: flushed"
    );
    let e = buffered_commit(
        &stream,
        &mut dpool,
        &mut bring,
        ones.as_slice(),
        &[5],
        fl.as_mut_slice(),
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("accept_lens[0] = 5") && e.to_string().contains("0..=4"),
        "{e}"
    );
    let (r, o) = verify(&dpool, &mut bring, &[4, 2], &[1, 2]);
    r.unwrap();
    assert!(o.to_f32().iter().all(|x| x.is_finite()));
    // A garbage cursor written from outside: refused on the emulator, nothing written.
    bring.upload_cursors(&stream, &[0, 0, 9]).unwrap();
    let (r, o) = verify(&dpool, &mut bring, &[4, 2], &[1, 2]);
    let e = r.unwrap_err();
    assert!(
        e.to_string().contains("cursors[slots][1] = 9") && e.to_string().contains("0..=8"),
        "{e}"
    );
    assert!(o.to_f32().iter().all(|x| x.is_nan()), "a refused call wrote outputs");
    // A ring of another pool.
    let other = buffered_pool(&shape, cache_len, &start).to_device(&stream).unwrap();
    let mut foreign = BufferedRing::for_pool(&other, window, dtype, true).unwrap();
    let e = verify(&dpool, &mut foreign, &[4], &[1]).0.unwrap_err();
    assert!(matches!(e, Error::ForeignPool { .. }), "{e}");
}
