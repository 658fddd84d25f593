//! Any batch an engine serves runs. F and materialise put (layer, row tile) in the grid's x
//! dimension and the request in z, so B = 4096 at 69 layers (Kimi-K3 KDA at TP8 has 69 linear
//! layers: B·NL = 282 624, beyond the 65 535 one grid dimension holds, which was refused before)
//! launches, on every implementation, and gives the bits the same live rows give in a batch of 3.
//! Kernel D takes one layer per launch: B = 4096 there too. Small head shape, Emulated backend.
mod common;

use common::spec_chain::{each_impl, run_verify, spec_pool};
use common::{bits_equal, spec};
use rand::{Rng, SeedableRng};
use replayssm::config::{resolve, EngineFlags};
use replayssm::ring::{RingShape, SpecRing};
use replayssm::spec::fold;
use replayssm::{ActBuffer, Backend, CheckpointPool, DType, DecodeRing, ForceFlush, HeadDims, Variant};
use replayssm_tools::staged::{decode, materialize};
use replayssm_tools::workload::RecurrentData;

const LAYERS: usize = 69;
const BATCH: usize = 4096;
const DIMS: HeadDims = HeadDims {
    h: 1,
    hv: 1,
    k: 32,
    v: 16,
};
/// Rows of the large batch that are live (first, middle, last), and their slots.
const LIVE_ROWS: [usize; 3] = [0, BATCH / 2 - 1, BATCH - 1];
const LIVE_SLOTS: [i32; 3] = [0, 1, 2];

fn seed() -> u64 {
    std::process::id() as u64 * 31 + 7
}

/// The large batch's per-row values: `live[i]` at LIVE_ROWS[i], `idle` elsewhere.
fn spread(live: &[i32], idle: i32) -> Vec<i32> {
    let mut v = vec![idle; BATCH];
    for (i, &r) in LIVE_ROWS.iter().enumerate() {
        v[r] = live[i];
    }
    v
}

#[test]
fn fold_takes_4096_requests_at_69_layers() {
    let seed = seed();
    let shape = RingShape {
        variant: Variant::Kda,
        dims: DIMS,
        dtype: DType::BF16,
        layers: LAYERS,
        slots: 4,
        window: 4,
    };
    let mut r = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let start: Vec<f32> = (0..shape.pool_elems()).map(|_| r.gen_range(-0.5f32..0.5)).collect();
    let pool = spec_pool(&shape, &start);
    let mut ring = SpecRing::new(shape, true).unwrap();
    for l in 0..LAYERS {
        let mut w = RecurrentData::random(&spec(Variant::Kda, DIMS, DType::BF16, &[4, 4, 4]), seed + 1 + l as u64);
        w.slots = LIVE_SLOTS.to_vec();
        run_verify(Backend::Emulated, &w, &pool, l, Some(&mut ring)).unwrap();
    }
    let lens = [3, 4, 2];
    each_impl(Backend::Emulated, || {
        let mut small = spec_pool(&shape, &start);
        fold(Backend::Emulated, &mut small, &ring, &LIVE_SLOTS, &lens, None).unwrap();
        assert!(
            bits_equal(small.state(), &start).is_err(),
            "the small fold changed nothing"
        );
        let mut large = spec_pool(&shape, &start);
        fold(
            Backend::Emulated,
            &mut large,
            &ring,
            &spread(&LIVE_SLOTS, -1),
            &spread(&lens, 0),
            None,
        )
        .expect("B = 4096 at 69 layers is refused");
        bits_equal(large.state(), small.state()).unwrap_or_else(|e| panic!("B = 4096 fold != B = 3 fold: {e}"));
    });
}

/// A buffered-decode pool and ring over 69 layers with pending records in slots 0..2, the same
/// bits every call; the decode steps run with `batch` rows (3, or 4096 with the live rows spread).
fn decode_pool(large: bool) -> (CheckpointPool, DecodeRing, Vec<Vec<f32>>) {
    let cfg = resolve(&EngineFlags {
        enable_linear_replayssm: true,
        linear_replayssm_cache_len: Some(4),
        linear_attn_kind: Variant::Gdn,
        ..EngineFlags::default()
    })
    .unwrap();
    let mut pool = CheckpointPool::new(&cfg, DIMS, LAYERS, 4).unwrap();
    let mut r = rand_chacha::ChaCha8Rng::seed_from_u64(seed() + 100);
    for x in pool.state_mut() {
        *x = r.gen_range(-0.5f32..0.5);
    }
    let mut ring = DecodeRing::attach(&pool).unwrap();
    let slots = if large {
        spread(&LIVE_SLOTS, -1)
    } else {
        LIVE_SLOTS.to_vec()
    };
    let b = slots.len();
    let row = DIMS.hv * DIMS.v;
    let mut live_outputs = vec![];
    for step in 0..2u64 {
        let st = ring.begin_step(&slots, ForceFlush::None).unwrap();
        for l in 0..LAYERS {
            // The live rows' tokens are the same in both batch sizes; the idle rows' are zeros.
            let tokens = RecurrentData::random(
                &spec(Variant::Gdn, DIMS, DType::F32, &[1, 1, 1]),
                seed() + 7 * step + 1000 * l as u64,
            );
            let mut data = RecurrentData::random(&spec(Variant::Gdn, DIMS, DType::F32, &vec![1; b]), 1);
            if large {
                place_rows(&mut data, &tokens);
            } else {
                data = tokens;
            }
            data.slots = slots.clone();
            let inp = data.decode_inputs();
            let mut o = ActBuffer::nan(DType::F32, b * row);
            decode(
                Backend::Emulated,
                &inp,
                &mut pool,
                &mut ring,
                &st,
                l,
                &mut o.dense_mut(b, row),
            )
            .expect("kernel D refused the batch");
            let o = o.to_f32();
            let live: Vec<f32> = if large {
                LIVE_ROWS
                    .iter()
                    .flat_map(|&r| o[r * row..(r + 1) * row].to_vec())
                    .collect()
            } else {
                o
            };
            live_outputs.push(live);
        }
        ring.finish_step(st).unwrap();
    }
    (pool, ring, live_outputs)
}

/// Copies the 3 rows of `small` into LIVE_ROWS of `large` (q, k, v and the raw gate, all f32).
fn place_rows(large: &mut RecurrentData, small: &RecurrentData) {
    use replayssm_tools::workload::GateData;
    let (d, hk, hv) = (DIMS, DIMS.h * DIMS.k, DIMS.hv * DIMS.v);
    for (i, &r) in LIVE_ROWS.iter().enumerate() {
        for (dst, src, w) in [
            (&mut large.q, &small.q, hk),
            (&mut large.k, &small.k, hk),
            (&mut large.v, &small.v, hv),
        ] {
            for j in 0..w {
                dst.set(r * w + j, src.get(i * w + j));
            }
        }
        match (&mut large.gate, &small.gate) {
            (
                GateData::Raw {
                    a, b, a_log, dt_bias, ..
                },
                GateData::Raw {
                    a: sa,
                    b: sb,
                    a_log: sl,
                    dt_bias: sd,
                    ..
                },
            ) => {
                for j in 0..d.hv {
                    a.set(r * d.hv + j, sa.get(i * d.hv + j));
                    b.set(r * d.hv + j, sb.get(i * d.hv + j));
                }
                a_log.clone_from(sl);
                dt_bias.clone_from(sd);
            }
            (GateData::Precomputed { g, beta }, GateData::Precomputed { g: sg, beta: sbeta }) => {
                for j in 0..d.hv {
                    g[r * d.hv + j] = sg[i * d.hv + j];
                    beta[r * d.hv + j] = sbeta[i * d.hv + j];
                }
            }
            _ => panic!("both workloads draw the same gate form"),
        }
    }
    large.scale = small.scale;
}

#[test]
fn decode_and_materialise_take_4096_requests_at_69_layers() {
    let (mut small, mut small_ring, small_o) = decode_pool(false);
    let (mut large, mut large_ring, large_o) = decode_pool(true);
    for (l, (a, b)) in small_o.iter().zip(&large_o).enumerate() {
        bits_equal(b, a).unwrap_or_else(|e| panic!("call {l}: D at B = 4096 != B = 3: {e}"));
    }
    materialize(Backend::Emulated, &mut small, &mut small_ring, &LIVE_SLOTS).unwrap();
    bits_equal(small.state(), large.state()).expect_err("materialise had no pending records to replay");
    materialize(Backend::Emulated, &mut large, &mut large_ring, &spread(&LIVE_SLOTS, -1))
        .expect("materialise refused B = 4096 at 69 layers");
    bits_equal(large.state(), small.state()).unwrap_or_else(|e| panic!("B = 4096 materialise != B = 3: {e}"));
}
