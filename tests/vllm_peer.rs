//! vLLM's buffered speculative verify as a peer (issue 32): the golden
//! `tests/cases/vllm/gdn_bf16_chain.golden.safetensors`, written by `scripts/vllm-peer` from vLLM's
//! own `gdn_replayssm_spec_decode` / `commit_gdn_replayssm_spec` / `reset_gdn_replayssm_spec_cursors`
//! under the Triton interpreter (see that folder's README), replayed step by step through ours on
//! the emulator: kernel VB (`Stream::verify_buffered`), the buffered commit (cursors, then F on
//! the flush lengths) and the reset, on the same inputs. Per step:
//! - outputs: ours within [`OURS_VS_F64`] of the f64 reference (the exact recurrence from the
//!   exact f64 state), and within [`OURS_VS_VLLM`] of vLLM's on every live row; null rows zero in
//!   both;
//! - cursors and flush decisions identical: vLLM's `is_flush` flag after the commit is our flush
//!   decision, and its `write_pos` is our flush length when flagged, else our cursor (see
//!   [`vllm_cursor`]);
//! - at each of our flushes the flushed checkpoint is bit-identical to kernel R's over the same
//!   accepted tokens and within [`reordered_bound`] of the f64 reference (twice the naive f32
//!   recurrence's error plus 4 ulp); at each of vLLM's flushes its checkpoint (stored in bf16) is
//!   compared with the f64 reference too, and the drift of both is printed.
//!
//! vLLM's block b is our slot b - 1 (its block 0 is the null block; a row on it is our null row).
mod common;

use common::golden::Golden;
use common::spec_chain::recurrent_commit;
use common::*;
use replayssm::backend::Backend;
use replayssm::config::{resolve, EngineFlags};
use replayssm::memory::{DeviceAct, DeviceVec, Stream};
use replayssm::numerics::{compare, Tolerance};
use replayssm::reference::{apply_record, gate_at, l2_normalize, readout, Real};
use replayssm::ring::RingShape;
use replayssm::{ActBuffer, BufferedRing, CheckpointPool, DType, GateForm, HeadDims, Variant};
use replayssm_tools::staged::DeviceTokens;
use replayssm_tools::workload::{GateData, RecurrentData};

const GOLDEN: &str = "tests/cases/vllm/gdn_bf16_chain.golden.safetensors";

/// Our bf16 outputs against the f64 reference: the shipped bf16 case tolerance (the output's own
/// rounding, 2^-9 relative, dominates; the state is f32).
const OURS_VS_F64: Tolerance = Tolerance { atol: 1e-4, rtol: 8e-3 };

/// Ours against vLLM's outputs: rtol the bf16 case tolerance (each side's own output rounding,
/// 2^-9 relative), atol for vLLM's operand roundings: its kernel rounds every dot product's
/// operands to bf16 (the f32 checkpoint read as bf16, the normalised q and k, the history's
/// corrections and their scores) and its flushed checkpoint is stored as bf16 values, about 2^-9
/// relative per operand. Measured on the golden: vLLM's outputs 9.5e-4 from the f64 reference,
/// ours 4.8e-4, ours vs vLLM's 9.8e-4 at most; atol is twice that, rounded up.
const OURS_VS_VLLM: Tolerance = Tolerance { atol: 2e-3, rtol: 8e-3 };

/// vLLM's flushed checkpoint against the f64 reference, in units of the largest state element:
/// measured 0.67 % at most over the golden's 99 flushes (it does not grow along the chain); held
/// to about twice that, so that a golden regenerated from a vLLM whose flush loses more fails here.
const VLLM_DRIFT_MAX: f64 = 0.015;

/// vLLM's cursors after a commit, as ours: a flagged block (`is_flush`) folds its `write_pos`
/// records at the start of its next verify, which our commit does at once (cursor 0, flush length
/// `write_pos`); otherwise `write_pos` is the history, our cursor. Returns (cursor, flush length).
fn vllm_cursor(write_pos: i32, is_flush: i32) -> (usize, usize) {
    if is_flush != 0 {
        (0, write_pos as usize)
    } else {
        (write_pos as usize, 0)
    }
}

/// The exact recurrence (design §3) in precision `R` on one slot's state `[HV, V, K]`: token
/// `tok` of `w` applied to every value head.
fn apply_token<R: Real>(w: &RecurrentData, s: &mut [R], tok: usize) {
    let inp = w.inputs();
    let d = w.dims;
    for hv in 0..d.hv {
        let h = d.key_head(hv);
        let k: Vec<R> = (0..d.k).map(|j| R::from_f32(inp.k.at(tok, h * d.k + j))).collect();
        let v: Vec<R> = (0..d.v).map(|j| R::from_f32(inp.v.at(tok, hv * d.v + j))).collect();
        let (g, beta) = gate_at::<R>(&inp.gate, Variant::Gdn, &d, tok, hv);
        apply_record(&mut s[hv * d.v * d.k..(hv + 1) * d.v * d.k], &d, &k, &g, beta, &v, true);
    }
}

/// Token `tok`'s outputs `[HV, V]` read from the state `s` (its update applied).
fn read_token(w: &RecurrentData, s: &[f64], tok: usize) -> Vec<f64> {
    let inp = w.inputs();
    let d = w.dims;
    let mut o = vec![0.0; d.hv * d.v];
    for hv in 0..d.hv {
        let h = d.key_head(hv);
        let mut q: Vec<f64> = (0..d.k).map(|j| inp.q.at(tok, h * d.k + j) as f64).collect();
        l2_normalize(&mut q);
        q.iter_mut().for_each(|x| *x *= w.scale as f64);
        readout(
            &s[hv * d.v * d.k..(hv + 1) * d.v * d.k],
            &d,
            &q,
            &mut o[hv * d.v..(hv + 1) * d.v],
        );
    }
    o
}

fn max_abs_diff(a: &[f32], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(&x, &y)| (x as f64 - y).abs()).fold(0.0, f64::max)
}

/// The golden's geometry and inputs, in our terms.
struct Chain {
    g: Golden,
    dims: HeadDims,
    t: usize,
    cache_len: usize,
    steps: usize,
    rows: usize,
    blocks: usize,
    a_log: Vec<f32>,
    dt_bias: Vec<f32>,
    /// vLLM's packed `[steps, N, q | k | v]`, `a` and `b` `[steps, N, HV]` (bf16 values).
    qkv: Vec<f32>,
    a: Vec<f32>,
    b: Vec<f32>,
}

impl Chain {
    fn load() -> Chain {
        let g = Golden::load(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(GOLDEN));
        assert_eq!(g.meta_str("format"), "replayssm-vllm-golden-1");
        assert_eq!(
            g.meta_str("bf16_rounding"),
            "nearest even (the interpreter patched to the GPU's rounding)"
        );
        let dims = HeadDims {
            h: g.meta("H"),
            hv: g.meta("HV"),
            k: g.meta("K"),
            v: g.meta("V"),
        };
        let (t, cache_len, steps): (usize, usize, usize) = (g.meta("T"), g.meta("B"), g.meta("steps"));
        // vLLM's flush threshold is its buffer length plus the window; ours is the buffer length.
        assert_eq!(g.meta::<usize>("max_cache_len"), cache_len + t);
        let blocks: usize = g.meta("num_blocks");
        let rows = g.shape("slots")[1];
        let (a_log, dt_bias) = (g.f32s("A_log", &[dims.hv]), g.f32s("dt_bias", &[dims.hv]));
        let n = rows * t;
        let qkv = g.bf16s("mixed_qkv", &[steps, n, 2 * dims.h * dims.k + dims.hv * dims.v]);
        let a = g.bf16s("a", &[steps, n, dims.hv]);
        let b = g.bf16s("b", &[steps, n, dims.hv]);
        Chain {
            g,
            qkv,
            a,
            b,
            dims,
            t,
            cache_len,
            steps,
            rows,
            blocks,
            a_log,
            dt_bias,
        }
    }

    fn state_elems(&self) -> usize {
        self.dims.state_elems()
    }

    /// Step `s`'s window (vLLM's packed q | k | v split into ours), on our slots.
    fn window(&self, s: usize, slots: &[i32]) -> RecurrentData {
        let d = self.dims;
        let n = self.rows * self.t;
        let (hk, w) = (d.h * d.k, 2 * d.h * d.k + d.hv * d.v);
        let x = &self.qkv[s * n * w..(s + 1) * n * w];
        let cols = |lo: usize, hi: usize| -> ActBuffer {
            let v: Vec<f32> = x.chunks_exact(w).flat_map(|r| r[lo..hi].to_vec()).collect();
            ActBuffer::from_f32(DType::BF16, &v)
        };
        let gate = |v: &[f32]| ActBuffer::from_f32(DType::BF16, &v[s * n * d.hv..(s + 1) * n * d.hv]);
        RecurrentData {
            variant: Variant::Gdn,
            dims: d,
            dtype: DType::BF16,
            q: cols(0, hk),
            k: cols(hk, 2 * hk),
            v: cols(2 * hk, w),
            gate: GateData::Raw {
                a: gate(&self.a),
                b: gate(&self.b),
                a_log: self.a_log.clone(),
                dt_bias: self.dt_bias.clone(),
                form: GateForm::Softplus,
            },
            cu_seqlens: (0..=self.rows).map(|r| (r * self.t) as i32).collect(),
            slots: slots.to_vec(),
            state: vec![],
            scale: self.g.meta("scale"),
            qk_l2norm: true,
        }
    }
}

/// One flush's errors against the f64 reference.
struct Drift {
    step: usize,
    slot: usize,
    records: usize,
    ours: f64,
    bound: f64,
    vllm: f64,
    /// The largest |element| of the f64 state.
    scale: f64,
}

#[test]
fn vllm_buffered_spec_chain_matches_ours() {
    let c = Chain::load();
    let (d, t, ns) = (c.dims, c.t, c.blocks - 1);
    let per = c.state_elems();
    let (steps, rows, nb) = (c.steps, c.rows, c.blocks);
    let n = rows * t;
    let cols = d.hv * d.v;
    let blk_slots = c.g.i32s("slots", &[steps, rows]);
    let accept = c.g.i32s("accept", &[steps, rows]);
    let reset = c.g.i32s("reset", &[steps, rows]);
    let o_vllm = c.g.bf16s("o", &[steps, n, d.hv, d.v]);
    let write_pos = c.g.i32s("write_pos", &[steps, nb]);
    let is_flush = c.g.i32s("is_flush", &[steps, nb]);
    let state_in = c.g.f32s("state_in", &[nb, d.hv, d.v, d.k]);
    let n_reset = c.g.shape("reset_state")[0];
    let reset_state = c.g.f32s("reset_state", &[n_reset, d.hv, d.v, d.k]);
    let n_flush = c.g.shape("flush_step")[0];
    let flush_step = c.g.i32s("flush_step", &[n_flush]);
    let flush_block = c.g.i32s("flush_block", &[n_flush]);
    let flush_len = c.g.i32s("flush_len", &[n_flush]);
    let flush_state = c.g.bf16s("flush_state", &[n_flush, d.hv, d.v, d.k]);

    // Our world: one layer, slots 0..NS (vLLM's blocks 1..NB), cache length L = vLLM's buffer length.
    let start = state_in[per..].to_vec();
    let shape = RingShape {
        variant: Variant::Gdn,
        dims: d,
        dtype: DType::BF16,
        layers: 1,
        slots: ns,
        window: t,
    };
    let flags = EngineFlags {
        linear_replayssm_spec_buffered: true,
        linear_replayssm_cache_len: Some(c.cache_len as i64),
        ..EngineFlags::spec_ring(Variant::Gdn)
    };
    let mut host = CheckpointPool::new(&resolve(&flags).unwrap(), d, 1, ns).unwrap();
    host.state_mut().copy_from_slice(&start);
    let backend = Backend::Emulated;
    let stream = Stream::new(backend).unwrap();
    let mut dpool = host.to_device(&stream).unwrap();
    let mut bring = BufferedRing::for_pool(&dpool, t, DType::BF16, true).unwrap();
    let mut flush_lens = DeviceVec::<i32>::zeros(backend, rows).unwrap();
    // Kernel R over the same accepted tokens (f32, the emulator), the f64 reference and the naive
    // f32 recurrence (sequential sums), per slot.
    let mut pool_r = start.clone();
    let mut s64: Vec<Vec<f64>> = (0..ns)
        .map(|s| start[s * per..(s + 1) * per].iter().map(|&x| x as f64).collect())
        .collect();
    let mut s32: Vec<Vec<f32>> = (0..ns).map(|s| start[s * per..(s + 1) * per].to_vec()).collect();
    // Our last flush per slot not yet matched by vLLM's (vLLM folds at the slot's next verify).
    let mut pending: Vec<Option<usize>> = vec![None; ns];
    let mut drifts: Vec<Drift> = vec![];
    let (mut next_reset, mut next_flush) = (0usize, 0usize);
    let (mut worst_ours_o, mut worst_vllm_o, mut worst_diff_o) = (0.0f64, 0.0f64, 0.0f64);
    let (mut our_flushes, mut accepted) = (0usize, 0usize);
    for s in 0..steps {
        let what = format!("vllm golden step {s}");
        let row_blk = &blk_slots[s * rows..(s + 1) * rows];
        let slots: Vec<i32> = row_blk.iter().map(|&b| if b > 0 { b - 1 } else { -1 }).collect();
        // 1. Rows handed to a new request: history dropped, the checkpoint its prefill's.
        let fresh: Vec<i32> = (0..rows)
            .filter(|&r| reset[s * rows + r] != 0)
            .map(|r| slots[r])
            .collect();
        if !fresh.is_empty() {
            let fs = DeviceVec::from_host(&stream, &fresh).unwrap();
            stream.buffered_reset(&mut bring, fs.as_slice()).unwrap();
            let mut pool = dpool.to_host(&stream).unwrap();
            for &slot in &fresh {
                let (slot, new) = (slot as usize, &reset_state[next_reset * per..(next_reset + 1) * per]);
                next_reset += 1;
                pool.state_mut()[slot * per..(slot + 1) * per].copy_from_slice(new);
                pool_r[slot * per..(slot + 1) * per].copy_from_slice(new);
                s64[slot] = new.iter().map(|&x| x as f64).collect();
                s32[slot] = new.to_vec();
                pending[slot] = None; // vLLM's reset drops its pending flush (ours already ran)
            }
            dpool.upload(&stream, pool.state()).unwrap();
        }
        // 2. VB.
        let w = c.window(s, &slots);
        let dt = DeviceTokens::upload(&stream, &w.inputs()).unwrap();
        let mut od = DeviceAct::from_host(&stream, &ActBuffer::nan(DType::BF16, n * cols)).unwrap();
        stream
            .verify_buffered(&dt.inputs(), &dpool, 0, &mut od.view_mut(0, n, cols, cols), &mut bring)
            .unwrap();
        stream.check_errors().unwrap();
        let ours = od.to_host(&stream).unwrap().to_f32();
        let theirs = &o_vllm[s * n * cols..(s + 1) * n * cols];
        for (r, &slot) in slots.iter().enumerate() {
            let rows_o = r * t * cols..(r + 1) * t * cols;
            if slot < 0 {
                assert!(
                    ours[rows_o.clone()].iter().all(|&x| x == 0.0),
                    "{what}: our null row {r} not zero"
                );
                assert!(
                    theirs[rows_o].iter().all(|&x| x == 0.0),
                    "{what}: vLLM's null row {r} not zero"
                );
                continue;
            }
            // The f64 reference from the exact state: the window's tokens in turn.
            let mut st = s64[slot as usize].clone();
            let mut want = vec![];
            for tok in r * t..(r + 1) * t {
                apply_token(&w, &mut st, tok);
                want.extend(read_token(&w, &st, tok));
            }
            let mine = compare(&ours[rows_o.clone()], &want, OURS_VS_F64);
            assert!(mine.passed(), "{what} row {r}: our outputs against f64: {mine}");
            let vs = compare(&ours[rows_o.clone()], &widen(&theirs[rows_o.clone()]), OURS_VS_VLLM);
            assert!(vs.passed(), "{what} row {r}: ours against vLLM's: {vs}");
            worst_ours_o = worst_ours_o.max(mine.max_abs_err);
            worst_vllm_o = worst_vllm_o.max(max_abs_diff(&theirs[rows_o.clone()], &want));
            worst_diff_o = worst_diff_o.max(vs.max_abs_err);
        }
        // vLLM's flushes this step (its flush launch, before the window): the checkpoint ours
        // flushed at the slot's last commit, against the f64 state (unchanged since).
        while next_flush < n_flush && flush_step[next_flush] as usize == s {
            let slot = flush_block[next_flush] as usize - 1;
            let len = pending[slot]
                .take()
                .unwrap_or_else(|| panic!("{what}: vLLM flushed slot {slot}, ours had not"));
            assert_eq!(
                flush_len[next_flush] as usize, len,
                "{what}: slot {slot}'s flush length"
            );
            let theirs = &flush_state[next_flush * per..(next_flush + 1) * per];
            let drift = drifts.iter_mut().rev().find(|x| x.slot == slot).unwrap();
            drift.vllm = max_abs_diff(theirs, &s64[slot]);
            next_flush += 1;
        }
        // 3. The commit.
        let acc = &accept[s * rows..(s + 1) * rows];
        let lens: Vec<usize> = acc.iter().map(|&a| a as usize).collect();
        accepted += lens.iter().sum::<usize>();
        let dslots = DeviceVec::from_host(&stream, &slots).unwrap();
        let fl = flush_lens.as_mut_slice();
        common::buffered_commit(&stream, &mut dpool, &mut bring, dslots.as_slice(), acc, fl).unwrap();
        stream.check_errors().unwrap();
        recurrent_commit(backend, &shape, &mut pool_r, std::slice::from_ref(&w), &lens, false);
        for (r, &slot) in slots.iter().enumerate() {
            if slot >= 0 {
                for tok in r * t..r * t + lens[r] {
                    apply_token(&w, &mut s64[slot as usize], tok);
                    apply_token(&w, &mut s32[slot as usize], tok);
                }
            }
        }
        // Cursors and flush decisions: vLLM's, step by step, every slot.
        let got_flush = flush_lens.to_vec(&stream).unwrap();
        let hist = bring.histories(&stream).unwrap();
        for (slot, &h) in hist.iter().enumerate() {
            let blk = slot + 1;
            let (cursor, _) = vllm_cursor(write_pos[s * nb + blk], is_flush[s * nb + blk]);
            assert_eq!(
                h,
                cursor,
                "{what}: slot {slot}'s cursor (vLLM write_pos {}, is_flush {})",
                write_pos[s * nb + blk],
                is_flush[s * nb + blk]
            );
        }
        let mut flushed = vec![];
        for (r, &slot) in slots.iter().enumerate() {
            let want = if slot < 0 {
                0
            } else {
                vllm_cursor(
                    write_pos[s * nb + slot as usize + 1],
                    is_flush[s * nb + slot as usize + 1],
                )
                .1
            };
            assert_eq!(
                got_flush[r] as usize, want,
                "{what}: row {r} (slot {slot}) flush length"
            );
            if want > 0 {
                flushed.push((slot as usize, want));
            }
        }
        // Our flushes: R's bits, and within the reordered bound of the f64 reference.
        if !flushed.is_empty() {
            let pool = dpool.to_host(&stream).unwrap();
            for (slot, len) in flushed {
                let got = &pool.state()[slot * per..(slot + 1) * per];
                bits_equal(got, &pool_r[slot * per..(slot + 1) * per])
                    .unwrap_or_else(|e| panic!("{what}: slot {slot}'s flushed checkpoint != R's: {e}"));
                let naive = max_abs_diff(&s32[slot], &s64[slot]);
                let bound = reordered_bound(naive, &s64[slot]);
                let err = max_abs_diff(got, &s64[slot]);
                assert!(
                    err <= bound,
                    "{what}: slot {slot}'s flushed checkpoint {err:.3e} from f64 > {bound:.3e}"
                );
                let st = compare(got, &s64[slot], STATE_TOLERANCE);
                assert!(
                    st.passed(),
                    "{what}: slot {slot}'s flushed checkpoint against f64: {st}"
                );
                pending[slot] = Some(len);
                drifts.push(Drift {
                    step: s,
                    slot,
                    records: len,
                    ours: err,
                    bound,
                    vllm: f64::NAN,
                    scale: s64[slot].iter().fold(0.0, |m, &x| m.max(x.abs())),
                });
                our_flushes += 1;
            }
        }
    }
    assert_eq!(next_flush, n_flush, "vLLM flushes the chain never reached");
    assert_eq!(next_reset, n_reset, "reset states the chain never used");
    // The slot no row used (vLLM's block 3) is untouched.
    let pool = dpool.to_host(&stream).unwrap();
    for slot in 0..ns {
        if !blk_slots.contains(&(slot as i32 + 1)) {
            bits_equal(
                &pool.state()[slot * per..(slot + 1) * per],
                &start[slot * per..(slot + 1) * per],
            )
            .unwrap_or_else(|e| panic!("unused slot {slot} changed: {e}"));
        }
    }

    println!("flush drift against the f64 reference (max abs error of the checkpoint after each flush; vLLM's, bf16, at its fold in the slot's next verify):");
    println!("  step slot records     ours  (bound)     vLLM's  max|S|");
    for x in &drifts {
        println!(
            "  {:4} {:4} {:7} {:9.2e} ({:8.2e}) {:9.2e} {:7.3}",
            x.step, x.slot, x.records, x.ours, x.bound, x.vllm, x.scale
        );
        assert!(
            x.vllm.is_nan() || x.vllm <= VLLM_DRIFT_MAX * x.scale,
            "step {}: vLLM's flushed checkpoint {:.2e} from f64, over {VLLM_DRIFT_MAX} of max|S| {:.3}",
            x.step,
            x.vllm,
            x.scale
        );
    }
    let matched: Vec<&Drift> = drifts.iter().filter(|x| !x.vllm.is_nan()).collect();
    let rel = matched.iter().map(|x| x.vllm / x.scale).fold(0.0, f64::max);
    println!(
        "vLLM's flushed checkpoints: at most {:.2} % of max|S| from f64 (ours {:.1e} %)",
        100.0 * rel,
        100.0 * matched.iter().map(|x| x.ours / x.scale).fold(0.0, f64::max)
    );
    let quarter = |q: usize| -> (f64, f64) {
        let part: Vec<&&Drift> = matched.iter().filter(|x| x.step * 4 / steps == q).collect();
        (
            part.iter().map(|x| x.ours).fold(0.0, f64::max),
            part.iter().map(|x| x.vllm).fold(0.0, f64::max),
        )
    };
    println!("worst per quarter of the chain (ours / vLLM's):");
    for q in 0..4 {
        let (a, b) = quarter(q);
        println!(
            "  steps {:3}..{:3}: {a:.2e} / {b:.2e}",
            q * steps / 4,
            (q + 1) * steps / 4
        );
    }
    println!(
        "{steps} steps, {accepted} tokens accepted, {our_flushes} flushes by our commit ({} matched by vLLM's flush launch), {n_reset} resets; cursors and flush decisions identical; outputs: ours vs f64 {worst_ours_o:.2e}, vLLM's vs f64 {worst_vllm_o:.2e}, ours vs vLLM's {worst_diff_o:.2e}",
        matched.len()
    );
    assert!(!matched.is_empty(), "the chain must flush");
}

fn widen(x: &[f32]) -> Vec<f64> {
    x.iter().map(|&v| v as f64).collect()
}
