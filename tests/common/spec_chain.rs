//! Shared by tests/verify.rs, tests/fold.rs, tests/tree.rs and tests/gpu.rs: pools, verify runs and the chained-commit check.

use rand::{Rng, SeedableRng};
use replayssm::backend::Backend;
use replayssm::config::{resolve, EngineFlags};
use replayssm::dtype::ActViewMut;
use replayssm::ring::{RingShape, SpecRing};
use replayssm::spec::Track;
use replayssm::tree::DraftTree;
use replayssm::{ActBuffer, CheckpointPool, DType, HeadDims, RecurrentOutputs, Variant};
use replayssm_tools::staged::{fold, replay, verify};
use replayssm_tools::workload::RecurrentData;

use super::{bits_equal, prefix, spec};

pub fn rng(seed: u64) -> rand_chacha::ChaCha8Rng {
    rand_chacha::ChaCha8Rng::seed_from_u64(seed)
}

/// A spec-ring pool of `shape`'s geometry (resolved from `--enable-linear-replayssm-spec`)
/// holding `state`.
pub fn spec_pool(shape: &RingShape, state: &[f32]) -> CheckpointPool {
    let cfg = resolve(&EngineFlags::spec_ring(shape.variant)).unwrap();
    let mut pool = CheckpointPool::new(&cfg, shape.dims, shape.layers, shape.slots).unwrap();
    pool.state_mut().copy_from_slice(state);
    pool
}

/// A pool of `layers` layers with the workload's slots, filled with random checkpoints.
pub fn pool_for(data: &RecurrentData, layers: usize, window: usize, seed: u64) -> (RingShape, CheckpointPool) {
    let slots = data.state.len() / data.dims.state_elems();
    let shape = RingShape {
        variant: data.variant,
        dims: data.dims,
        dtype: data.dtype,
        layers,
        slots,
        window,
    };
    let mut r = rng(seed);
    let state: Vec<f32> = (0..shape.pool_elems()).map(|_| r.gen_range(-0.5f32..0.5)).collect();
    (shape, spec_pool(&shape, &state))
}

/// Runs a verify `launch` into fresh NaN-poisoned outputs `[N, HV, V]` and returns them.
fn poisoned_outputs(
    data: &RecurrentData,
    launch: impl FnOnce(&mut ActViewMut<'_>) -> replayssm::Result<()>,
) -> replayssm::Result<ActBuffer> {
    let d = data.dims;
    let n = data.num_tokens();
    let mut o = ActBuffer::nan(data.dtype, n * d.hv * d.v);
    launch(&mut o.dense_mut(n, d.hv * d.v))?;
    Ok(o)
}

pub fn run_verify(
    backend: Backend,
    data: &RecurrentData,
    pool: &CheckpointPool,
    layer: usize,
    ring: Option<&mut SpecRing>,
) -> replayssm::Result<ActBuffer> {
    poisoned_outputs(data, |o| {
        verify(backend, &data.inputs(), None, pool, layer, o, ring).map(|_| ())
    })
}

/// Kernel VT on `tree` (tests/tree.rs).
pub fn run_verify_tree(
    backend: Backend,
    data: &RecurrentData,
    tree: &DraftTree,
    pool: &CheckpointPool,
    layer: usize,
    ring: Option<&mut SpecRing>,
) -> replayssm::Result<ActBuffer> {
    poisoned_outputs(data, |o| {
        verify(backend, &data.inputs(), Some(tree), pool, layer, o, ring).map(|_| ())
    })
}

/// Runs `f` once per implementation of F, P and D (`replayssm::tuning`, pinned on this thread), with
/// V pinned to a different implementation in each round, so every variant runs in the chained
/// commit checks. The Reference backend has no implementations: one round.
pub fn each_impl(backend: Backend, mut f: impl FnMut()) {
    use replayssm::tuning::{self, Choice, Kernel};
    if backend == Backend::Reference {
        return f();
    }
    let verify = Choice::all(Kernel::V);
    for (round, choice) in Choice::all(Kernel::F).into_iter().enumerate() {
        let v = verify[(round * 3) % verify.len()];
        // (VF's default runs in the long chains, which leave VF unforced.)
        let vf = Choice::all(Kernel::VF)[1 + round];
        println!("implementations: F, P and D {choice}, V {v}, VF {vf}");
        let _vf = tuning::force(Kernel::VF, vf);
        let _f = tuning::force(Kernel::F, choice);
        let _p = tuning::force(Kernel::P, choice);
        let _v = tuning::force(Kernel::V, v);
        let _d = tuning::force(Kernel::D, Choice::all(Kernel::D)[round]);
        f();
    }
}

/// One step's windows, one per layer, every row on `slots` (fresh inputs per step and layer; raw
/// gates on two steps of three, for KDA the softplus gate on one and the safe gate on the other).
/// The chains of tests/fold.rs and tests/verify_fold.rs draw theirs here.
#[allow(clippy::too_many_arguments)]
pub fn draw_windows(
    variant: Variant,
    dims: HeadDims,
    dtype: DType,
    layers: usize,
    window: usize,
    num_slots: usize,
    slots: &[i32],
    seed: u64,
    step: usize,
) -> Vec<RecurrentData> {
    let mut s = spec(variant, dims, dtype, &vec![window; slots.len()]);
    s.raw_gate = step % 3 != 0;
    if step % 3 == 2 && variant == Variant::Kda {
        s.gate_form = super::safe_gate();
    }
    s.spare_slots = num_slots - slots.len();
    (0..layers)
        .map(|l| {
            let mut w = RecurrentData::random(&s, seed * 7_000_003 + (step * layers + l) as u64);
            w.slots = slots.to_vec();
            w
        })
        .collect()
}

/// What a step commits: accept lengths with 0 and W among them (0 on null rows), and on some
/// rows a track of a random committed step into that row's `track_of` slot.
pub struct Commit {
    pub accept: Vec<i32>,
    pub track_slots: Vec<i32>,
    pub track_steps: Vec<i32>,
}

impl Commit {
    pub fn draw(
        r: &mut rand_chacha::ChaCha8Rng,
        slots: &[i32],
        window: usize,
        track_of: &[i32],
        p_track: f64,
    ) -> Commit {
        let accept: Vec<i32> = slots
            .iter()
            .map(|&slot| {
                let n = match r.gen_range(0..6) {
                    0 => 0,
                    1 => window as i32,
                    _ => r.gen_range(1..=window as i32),
                };
                if slot < 0 {
                    0
                } else {
                    n
                }
            })
            .collect();
        let track_slots: Vec<i32> = (0..slots.len())
            .map(|b| {
                if accept[b] > 0 && r.gen_bool(p_track) {
                    track_of[b]
                } else {
                    -1
                }
            })
            .collect();
        let track_steps: Vec<i32> = (0..slots.len())
            .map(|b| {
                if track_slots[b] >= 0 {
                    r.gen_range(0..accept[b])
                } else {
                    -1
                }
            })
            .collect();
        Commit {
            accept,
            track_slots,
            track_steps,
        }
    }

    pub fn track(&self) -> Track<'_> {
        Track {
            slots: &self.track_slots,
            steps: &self.track_steps,
        }
    }

    pub fn lens(&self) -> Vec<usize> {
        self.accept.iter().map(|&n| n as usize).collect()
    }
}

/// The recurrent baseline's commit: kernel R over each layer's accepted prefix into `pool_r`
/// (the whole pool, layer-major). With `snapshots`, returns each layer's R snapshots
/// `[B, max(lens, 1), state]`.
pub fn recurrent_commit(
    backend: Backend,
    shape: &RingShape,
    pool_r: &mut [f32],
    windows: &[RecurrentData],
    lens: &[usize],
    snapshots: bool,
) -> Vec<Vec<f32>> {
    let (dims, dtype) = (shape.dims, shape.dtype);
    let tmax = lens.iter().copied().max().unwrap_or(0).max(1);
    let mut out = vec![];
    for (l, w) in windows.iter().enumerate() {
        let acc = prefix(w, lens);
        let n = acc.num_tokens();
        let layer_pool = &mut pool_r[shape.pool_offset(l, 0)..shape.pool_offset(l + 1, 0)];
        let mut o = ActBuffer::nan(dtype, n * dims.hv * dims.v);
        let mut snaps = vec![
            f32::NAN;
            if snapshots {
                lens.len() * tmax * dims.state_elems()
            } else {
                0
            }
        ];
        replayssm_tools::staged::recurrent(
            backend,
            &acc.inputs(),
            &mut RecurrentOutputs {
                o: o.dense_mut(n, dims.hv * dims.v),
                state: layer_pool,
                write_state: true,
                snapshots: snapshots.then_some(&mut snaps[..]),
            },
        )
        .unwrap();
        out.push(snaps);
    }
    out
}

/// [`chain_once`] for every implementation ([`each_impl`]).
#[allow(clippy::too_many_arguments)]
pub fn chain(
    backend: Backend,
    variant: Variant,
    dims: HeadDims,
    dtype: DType,
    layers: usize,
    batch: usize,
    commits: usize,
    seed: u64,
) {
    each_impl(backend, || {
        chain_once(backend, variant, dims, dtype, layers, batch, commits, seed)
    });
}

/// One chain of commits: every step draws a fresh window per request, verifies every layer
/// (writing the ring), then commits random accept lengths three ways from the same start:
/// F (fold, all layers), P (replay, per layer) and R (recurrent over the accepted tokens).
/// The three pools must stay bit-identical; track snapshots must equal R's snapshots.
#[allow(clippy::too_many_arguments)]
fn chain_once(
    backend: Backend,
    variant: Variant,
    dims: HeadDims,
    dtype: DType,
    layers: usize,
    batch: usize,
    commits: usize,
    seed: u64,
) {
    let window = 4usize;
    let mut r = rng(seed);
    let live_slots = &[3i32, 0, 4][..batch];
    let num_slots = 7; // up to 3 live, 3 track, 1 never used
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
    let mut pool_p = spec_pool(&shape, &start);
    let mut pool_r = start;
    let mut ring = SpecRing::new(shape, true).unwrap();
    let per_slot = dims.state_elems();
    let mut total_accepted = 0usize;
    for step in 0..commits {
        let windows = draw_windows(variant, dims, dtype, layers, window, num_slots, live_slots, seed, step);
        for (l, w) in windows.iter().enumerate() {
            run_verify(backend, w, &pool_f, l, Some(&mut ring)).unwrap();
        }
        let commit = Commit::draw(&mut r, live_slots, window, &[1, 2, 5], 0.4);
        let (accept, track_slots, track_steps) = (&commit.accept, &commit.track_slots, &commit.track_steps);
        fold(backend, &mut pool_f, &ring, live_slots, accept, Some(commit.track())).unwrap();
        for l in 0..layers {
            replay(backend, &mut pool_p, &ring, l, live_slots, accept).unwrap();
        }
        let lens = commit.lens();
        total_accepted += lens.iter().sum::<usize>();
        let tmax = lens.iter().copied().max().unwrap_or(0).max(1);
        let snaps = recurrent_commit(backend, &shape, &mut pool_r, &windows, &lens, true);
        for (l, snaps) in snaps.iter().enumerate() {
            for b in 0..batch {
                if track_slots[b] >= 0 {
                    let ts = track_slots[b] as usize;
                    let got = &pool_f.state()[shape.pool_offset(l, ts)..shape.pool_offset(l, ts) + per_slot];
                    let at = (b * tmax + track_steps[b] as usize) * per_slot;
                    if let Err(e) = bits_equal(got, &snaps[at..at + per_slot]) {
                        panic!("{backend} {variant} {dtype} commit {step} layer {l} request {b}: track snapshot != R's state after step {}: {e}", track_steps[b]);
                    }
                }
            }
        }
        // Compare the live slots (track slots differ by construction: only F writes them).
        for l in 0..layers {
            for &slot in live_slots {
                let range = shape.pool_offset(l, slot as usize)..shape.pool_offset(l, slot as usize) + per_slot;
                if let Err(e) = bits_equal(&pool_f.state()[range.clone()], &pool_r[range.clone()]) {
                    panic!("{backend} {variant} {dtype} commit {step} layer {l} slot {slot}: fold != recurrent: {e}");
                }
                if let Err(e) = bits_equal(&pool_p.state()[range.clone()], &pool_r[range]) {
                    panic!("{backend} {variant} {dtype} commit {step} layer {l} slot {slot}: replay != recurrent: {e}");
                }
            }
        }
        let unused = shape.pool_offset(layers - 1, 6)..shape.pool_offset(layers - 1, 6) + per_slot;
        assert!(
            bits_equal(&pool_f.state()[unused.clone()], &pool_r[unused]).is_ok(),
            "untouched slot changed"
        );
    }
    println!("{backend} {variant} {dtype} {dims:?}: {commits} commits, {total_accepted} tokens folded, bit-identical");
}

/// A small two-request GDN workload with its ring shape, spec pool and ring (the S1 checks).
pub fn small() -> (RecurrentData, RingShape, CheckpointPool, SpecRing) {
    let dims = HeadDims {
        h: 1,
        hv: 2,
        k: 32,
        v: 32,
    };
    let data = RecurrentData::random(&spec(Variant::Gdn, dims, DType::F32, &[3, 4]), 8);
    let (shape, pool) = pool_for(&data, 2, 4, 8);
    let ring = SpecRing::new(shape, true).unwrap();
    (data, shape, pool, ring)
}
