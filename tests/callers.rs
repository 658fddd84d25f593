//! One source of host checks: every row of `tests/callers/fold_refusals.txt` is refused by the
//! Rust API and by the C ABI with the same words (Python reads the same table in
//! `python/tests/test_callers.py`), and a refusal writes nothing.

use replayssm::capi::*;
use replayssm::config::{resolve, EngineFlags};
use replayssm::{fold, Backend, CheckpointPool, DType, HeadDims, RingShape, SpecRing, Track, Variant};

struct Row {
    name: String,
    k: usize,
    slots: Vec<i32>,
    lens: Vec<i32>,
    track: Option<(Vec<i32>, Vec<i32>)>,
    says: String,
}

fn ints(s: &str) -> Option<Vec<i32>> {
    (s != "-").then(|| s.split(',').map(|x| x.trim().parse().unwrap()).collect())
}

fn rows() -> Vec<Row> {
    let text = include_str!("callers/fold_refusals.txt");
    let rows: Vec<Row> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split('|').map(str::trim).collect();
            assert_eq!(f.len(), 7, "bad table line: {l}");
            Row {
                name: f[0].into(),
                k: f[1].parse().unwrap(),
                slots: ints(f[2]).unwrap(),
                lens: ints(f[3]).unwrap(),
                track: ints(f[4]).map(|s| (s, ints(f[5]).unwrap())),
                says: f[6].into(),
            }
        })
        .collect();
    assert!(rows.len() >= 10, "the table lost rows");
    rows
}

const SLOTS: usize = 4;
const WINDOW: usize = 4;

fn shape(k: usize) -> RingShape {
    RingShape {
        variant: Variant::Gdn,
        dims: HeadDims { h: 1, hv: 2, k, v: 32 },
        dtype: DType::F32,
        layers: 1,
        slots: SLOTS,
        window: WINDOW,
    }
}

fn filled(n: usize, x: f32) -> Vec<f32> {
    (0..n).map(|i| x + (i % 7) as f32 * 0.01).collect()
}

fn last_error() -> String {
    // SAFETY: a NUL-terminated thread-local string owned by the library.
    unsafe { std::ffi::CStr::from_ptr(replayssm_last_error_message()) }
        .to_string_lossy()
        .into_owned()
}

#[test]
fn the_rust_api_refuses_every_row_with_the_tables_words_and_writes_nothing() {
    for row in rows() {
        let s = shape(row.k);
        let cfg = resolve(&EngineFlags::spec_ring(Variant::Gdn)).unwrap();
        let mut pool = CheckpointPool::new(&cfg, s.dims, 1, SLOTS).unwrap();
        let state = filled(pool.state().len(), 0.25);
        pool.state_mut().copy_from_slice(&state);
        let ring = SpecRing::new(s, true).unwrap();
        let track = row.track.as_ref().map(|(a, b)| Track {
            slots: &a[..],
            steps: &b[..],
        });
        let e = fold(Backend::Emulated, &mut pool, &ring, &row.slots, &row.lens, track)
            .expect_err(&row.name)
            .to_string();
        assert!(
            e.contains(&row.says),
            "{}: the Rust API said '{e}', not '{}'",
            row.name,
            row.says
        );
        assert_eq!(pool.state(), &state[..], "{}: a refusal wrote the pool", row.name);
    }
}

#[test]
fn the_c_abi_refuses_every_row_with_the_tables_words_and_writes_nothing() {
    for row in rows() {
        let s = shape(row.k);
        let d = s.dims;
        let mut state = filled(SLOTS * d.state_elems(), 0.25);
        let before = state.clone();
        let ring_v = filled(SLOTS * d.hv * WINDOW * d.v, 0.5);
        let ring_k = filled(SLOTS * d.h * WINDOW * d.k, 0.5);
        let ring_g = vec![-0.1f32; SLOTS * d.hv * WINDOW];
        let ring_beta = vec![0.5f32; SLOTS * d.hv * WINDOW];
        let (ts, tp) = match &row.track {
            Some((a, b)) => (a.as_ptr(), b.as_ptr()),
            None => (std::ptr::null(), std::ptr::null()),
        };
        let p = replayssm_fold_params {
            base: replayssm_base_params {
                state: state.as_mut_ptr(),
                slots: row.slots.as_ptr(),
                batch: row.slots.len() as i32,
                num_slots: SLOTS as i32,
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
                v: ring_v.as_ptr().cast_mut().cast(),
                k: ring_k.as_ptr().cast_mut().cast(),
                g: ring_g.as_ptr().cast_mut(),
                beta: ring_beta.as_ptr().cast_mut(),
                window: WINDOW as i32,
                ..Default::default()
            },
            accept_lens: row.lens.as_ptr(),
            track_slots: ts,
            track_steps: tp,
            ..Default::default()
        };
        // SAFETY: host buffers sized for the params; the entry checks before it launches.
        let st = unsafe {
            replayssm_fold(
                replayssm_backend::REPLAYSSM_BACKEND_EMULATED as i32,
                &p,
                std::ptr::null_mut(),
            )
        };
        assert_ne!(
            st,
            replayssm_status::REPLAYSSM_OK,
            "{}: the C ABI accepted it",
            row.name
        );
        let e = last_error();
        assert!(
            e.contains(&row.says),
            "{}: the C ABI said '{e}', not '{}'",
            row.name,
            row.says
        );
        assert_eq!(state, before, "{}: a refusal wrote the pool", row.name);
    }
}
