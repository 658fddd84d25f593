//! One source of host checks: every row of `tests/callers/fold_refusals.txt` is refused by the
//! Rust API and by the C ABI with the same words, every row of `tests/callers/refusals.txt` (every
//! entry; the C ABI's side is in `tests/hostile.rs`) by the Rust API; Python reads both tables in
//! `python/tests/test_callers.py`. A refusal writes nothing.

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

mod common;

/// The Rust API's valid call of each entry of `tests/callers/refusals.txt` (2 requests of 4
/// tokens, 2 layers, 4 slots, window 4, cache length 4) with one row's edit applied.
mod shared_table {
    use super::common::{spec, spec_chain::spec_pool};
    use replayssm::config::{resolve, EngineFlags};
    use replayssm::{
        decode, fold, materialize, recurrent_with_records, replay, verify, verify_fold, AcceptedPaths, ActBuffer,
        Backend, BufferedFold, CheckpointPool, DType, DecodeRing, DeferredRing, DraftTree, ForceFlush, GateForm,
        HeadDims, RecurrentOutputs, RingShape, SpecRing, Variant,
    };
    use replayssm_tools::workload::{GateData, RecurrentData};

    pub const DIMS: HeadDims = HeadDims {
        h: 1,
        hv: 2,
        k: 32,
        v: 32,
    };
    const LAYERS: usize = 2;
    const WINDOW: usize = 4;
    const CACHE_LEN: i64 = 4;

    pub use crate::common::refusals::{table, Refusal};

    /// What the Rust API did with a row.
    pub enum Outcome {
        Refused(String),
        Accepted,
        /// The typed API cannot express the edit; the reason says which type rules it out.
        Unrepresentable(&'static str),
    }

    impl Refusal {
        fn int(&self) -> i32 {
            self.value.parse().expect("an integer value")
        }

        fn scale(&self) -> f32 {
            self.value.parse().expect("a real value")
        }

        /// Edits an index array of the call (`name[i] = value`) if the row names it.
        fn edit(&self, name: &str, array: &mut [i32]) {
            if self.name == name {
                array[self.index.expect("an index edit")] = self.int();
            }
        }

        /// `layer = value` as the typed API takes it (a `usize`), or why it cannot.
        fn layer(&self) -> Result<usize, &'static str> {
            if self.name != "layer" {
                return Ok(0);
            }
            usize::try_from(self.int()).map_err(|_| "layer is a usize: a negative layer does not type-check")
        }
    }

    fn data(seqlens: &[usize]) -> RecurrentData {
        let mut s = spec(Variant::Gdn, DIMS, DType::F32, seqlens);
        s.null_requests = vec![];
        RecurrentData::random(&s, 11)
    }

    fn shape(d: &RecurrentData) -> RingShape {
        RingShape {
            variant: Variant::Gdn,
            dims: DIMS,
            dtype: DType::F32,
            layers: LAYERS,
            slots: d.state.len() / DIMS.state_elems(),
            window: WINDOW,
        }
    }

    fn filled(n: usize) -> Vec<f32> {
        (0..n).map(|i| 0.25 + (i % 7) as f32 * 0.01).collect()
    }

    /// The call's tokens: 2 requests of 4, or a 17-token request where the row asks for
    /// `max_seqlen = 17` (the typed API derives max_seqlen from cu_seqlens).
    fn tokens(row: &Refusal) -> Result<RecurrentData, &'static str> {
        match (row.name.as_str(), row.value.as_str()) {
            ("max_seqlen", "17") => Ok(data(&[17, 4])),
            ("max_seqlen", _) => Err("max_seqlen is derived from cu_seqlens, never below 1"),
            _ => Ok(data(&[4, 4])),
        }
    }

    /// A deferred-fold pool holding `start` and its two-window ring.
    fn deferred(slots: usize, start: &[f32]) -> (CheckpointPool, DeferredRing) {
        let cfg = resolve(&EngineFlags {
            linear_replayssm_spec_deferred_fold: true,
            ..EngineFlags::spec_ring(Variant::Gdn)
        })
        .unwrap();
        let mut pool = CheckpointPool::new(&cfg, DIMS, LAYERS, slots).unwrap();
        pool.state_mut().copy_from_slice(start);
        let dring = DeferredRing::for_pool(&pool, WINDOW, DType::F32, true).unwrap();
        (pool, dring)
    }

    /// The buffered verify's valid call (device memory on the emulator: a ring of 2 T positions,
    /// every cursor 0) with the row's edit: VB of `layer`, or the cursors' COMMIT of `lens`.
    fn buffered_call(
        row: &Refusal,
        mut d: RecurrentData,
        slots: Vec<i32>,
        lens: Vec<i32>,
        layer: usize,
        start: &[f32],
    ) -> (Outcome, bool) {
        use replayssm::memory::{DeviceAct, DeviceVec, Stream};
        use replayssm::BufferedRing;
        use replayssm_tools::staged::DeviceTokens;
        let stream = Stream::new(Backend::Emulated).unwrap();
        let cache_len = if row.name == "cache_len" {
            i64::from(row.int())
        } else {
            2 * WINDOW as i64
        };
        let cfg = match resolve(&EngineFlags {
            linear_replayssm_spec_buffered: true,
            linear_replayssm_cache_len: Some(cache_len),
            ..EngineFlags::spec_ring(Variant::Gdn)
        }) {
            Ok(c) => c,
            Err(e) => return (Outcome::Refused(e.to_string()), true),
        };
        let mut pool = CheckpointPool::new(&cfg, DIMS, LAYERS, d.state.len() / DIMS.state_elems()).unwrap();
        pool.state_mut().copy_from_slice(start);
        let mut dpool = pool.to_device(&stream).unwrap();
        let window = if row.name == "window" {
            row.int() as usize
        } else {
            WINDOW
        };
        let mut bring = match BufferedRing::for_pool(&dpool, window, DType::F32, true) {
            Ok(r) => r,
            Err(e) => return (Outcome::Refused(e.to_string()), true),
        };
        let mut cursors = vec![0i32; pool.shape().slots];
        if row.name == "cursors" {
            // `cursors[i]`: the cursor of row i's slot.
            cursors[d.slots[row.index.expect("an index edit")] as usize] = row.int();
        }
        bring.upload_cursors(&stream, &cursors).unwrap();
        let out = if row.entry == "verify_buffered" {
            d.slots = slots;
            let n = d.num_tokens();
            let cols = DIMS.hv * DIMS.v;
            let t = DeviceTokens::upload(&stream, &d.inputs()).unwrap();
            let mut o = DeviceAct::from_host(&stream, &ActBuffer::nan(DType::F32, n * cols)).unwrap();
            outcome(stream.verify_buffered(
                &t.inputs(),
                &dpool,
                layer,
                &mut o.view_mut(0, n, cols, cols),
                &mut bring,
            ))
        } else {
            let ds = DeviceVec::from_host(&stream, &slots).unwrap();
            let da = DeviceVec::from_host(&stream, &lens).unwrap();
            let mut flush = DeviceVec::<i32>::zeros(Backend::Emulated, slots.len()).unwrap();
            outcome(stream.buffered_fold(
                &mut dpool,
                &mut bring,
                ds.as_slice(),
                BufferedFold::Commit {
                    accept_lens: da.as_slice(),
                },
                flush.as_mut_slice(),
            ))
        };
        let kept = dpool.to_host(&stream).unwrap().state() == start;
        (out, kept)
    }

    fn outcome(r: replayssm::Result<impl Sized>) -> Outcome {
        match r {
            Ok(_) => Outcome::Accepted,
            Err(e) => Outcome::Refused(e.to_string()),
        }
    }

    /// Runs the row's entry through the Rust API (host memory, the emulator). Returns the outcome
    /// and whether the state the call was given came back unchanged.
    pub fn call(row: &Refusal) -> (Outcome, bool) {
        let b = Backend::Emulated;
        let mut d = match tokens(row) {
            Ok(d) => d,
            Err(why) => return (Outcome::Unrepresentable(why), true),
        };
        let layer = match row.layer() {
            Ok(l) => l,
            Err(why) => return (Outcome::Unrepresentable(why), true),
        };
        if row.name == "scale" {
            d.scale = row.scale();
        }
        if row.name == "lower_bound" {
            // The typed API takes the raw gate's form from the C ABI's value through its rule.
            match GateForm::from_lower_bound(row.scale()) {
                Ok(form) => {
                    if let GateData::Raw { form: f, .. } = &mut d.gate {
                        *f = form;
                    }
                }
                Err(e) => return (Outcome::Refused(e.to_string()), true),
            }
        }
        let s = shape(&d);
        let batch = d.slots.len();
        let mut slots = d.slots.clone();
        row.edit("slots", &mut slots);
        let mut lens = vec![2i32; batch];
        row.edit("accept_lens", &mut lens);
        row.edit("counts", &mut lens);
        let n = d.num_tokens();
        let mut o = ActBuffer::nan(DType::F32, n * DIMS.hv * DIMS.v);
        let mut o = o.dense_mut(n, DIMS.hv * DIMS.v);
        let start = filled(s.pool_elems());
        match row.entry.as_str() {
            "recurrent" => {
                d.slots = slots;
                let records = match (row.name.as_str(), row.value.as_str()) {
                    ("record_dtype", "0") | ("record_dtype", "f32") => DType::F32,
                    ("record_dtype", "1") => DType::F16,
                    ("record_dtype", "2") => DType::BF16,
                    ("record_dtype", _) => {
                        return (
                            Outcome::Unrepresentable("record_dtype is a DType: no other value type-checks"),
                            true,
                        )
                    }
                    _ => DType::F32,
                };
                let mut state = d.state.clone();
                let out = outcome(recurrent_with_records(
                    b,
                    &d.inputs(),
                    &mut RecurrentOutputs {
                        o,
                        state: &mut state,
                        write_state: true,
                        snapshots: None,
                    },
                    records,
                ));
                (out, state == d.state)
            }
            "verify" | "verify_tree" => {
                d.slots = slots;
                let pool = spec_pool(&s, &start);
                let mut ring = SpecRing::new(s, true).unwrap();
                let tree = if row.entry == "verify_tree" {
                    let mut parent = DraftTree::chain(&d.cu_seqlens).unwrap().parent().to_vec();
                    row.edit("parent", &mut parent);
                    match DraftTree::new(parent, &d.cu_seqlens) {
                        Ok(t) => Some(t),
                        Err(e) => return (Outcome::Refused(e.to_string()), true),
                    }
                } else {
                    None
                };
                let out = outcome(verify(
                    b,
                    &d.inputs(),
                    tree.as_ref(),
                    &pool,
                    layer,
                    &mut o,
                    Some(&mut ring),
                ));
                (out, pool.state() == &start[..])
            }
            "fold_tree" => {
                let mut pool = spec_pool(&s, &start);
                let ring = SpecRing::new(s, true).unwrap();
                let tree = DraftTree::chain(&d.cu_seqlens).unwrap();
                let mut paths = vec![0, 1, -1, -1, 0, -1, -1, -1];
                row.edit("accept_paths", &mut paths);
                let out = match AcceptedPaths::new(&tree, paths, WINDOW) {
                    Ok(a) => outcome(fold(b, &mut pool, &ring, &slots, &a, None)),
                    Err(e) => Outcome::Refused(e.to_string()),
                };
                (out, pool.state() == &start[..])
            }
            "fold" | "replay" => {
                let mut pool = spec_pool(&s, &start);
                let ring = SpecRing::new(s, true).unwrap();
                let out = if row.entry == "fold" {
                    outcome(fold(b, &mut pool, &ring, &slots, &lens, None))
                } else {
                    outcome(replay(b, &mut pool, &ring, layer, &slots, &lens))
                };
                (out, pool.state() == &start[..])
            }
            "decode" | "decode_materialize" | "decode_cursors" => {
                if row.name == "positions" {
                    return (
                        Outcome::Unrepresentable("positions come from the ring's cursors (DecodeRing::begin_step)"),
                        true,
                    );
                }
                let cache_len = if row.name == "cache_len" {
                    i64::from(row.int())
                } else {
                    CACHE_LEN
                };
                let cfg = match resolve(&EngineFlags::buffered_decode(Variant::Gdn, cache_len)) {
                    Ok(c) => c,
                    Err(e) => return (Outcome::Refused(e.to_string()), true),
                };
                let mut pool = CheckpointPool::new(&cfg, DIMS, LAYERS, s.slots).unwrap();
                pool.state_mut().copy_from_slice(&start);
                let mut ring = DecodeRing::attach(&pool).unwrap();
                let step = match ring.begin_step(&slots, ForceFlush::None) {
                    Ok(st) => st,
                    Err(e) => return (Outcome::Refused(e.to_string()), pool.state() == &start[..]),
                };
                let out = match row.entry.as_str() {
                    "decode" => {
                        let d1 = data(&[1, 1]);
                        let mut inp = d1.decode_inputs();
                        inp.scale = d.scale;
                        let mut o1 = ActBuffer::nan(DType::F32, 2 * DIMS.hv * DIMS.v);
                        outcome(decode(
                            b,
                            &inp,
                            &mut pool,
                            &mut ring,
                            &step,
                            layer,
                            &mut o1.dense_mut(2, DIMS.hv * DIMS.v),
                        ))
                    }
                    "decode_materialize" => outcome(materialize(b, &mut pool, &mut ring, &slots)),
                    _ => outcome(ring.finish_step(step)),
                };
                (out, pool.state() == &start[..])
            }
            "verify_fold" => {
                d.slots = slots;
                let (mut pool, mut dring) = deferred(s.slots, &start);
                let out = outcome(verify_fold(
                    b,
                    &d.inputs(),
                    None,
                    &mut pool,
                    layer,
                    &mut o,
                    &mut dring,
                    None,
                ));
                (out, pool.state() == &start[..])
            }
            "defer" => {
                let (pool, mut dring) = deferred(s.slots, &start);
                (outcome(dring.commit(&slots, &lens)), pool.state() == &start[..])
            }
            "verify_buffered" | "buffered" => buffered_call(row, d, slots, lens, layer, &start),
            e => panic!("unknown entry {e}"),
        }
    }
}

/// One definition of each host rule, as the Rust API reaches it: every row of
/// `tests/callers/refusals.txt` (which the C ABI, the kernel layer and Python are held to) is
/// refused by the typed host API with the same words and changes no state, except the rows the
/// types cannot express, which are listed here with the type that rules them out.
#[test]
fn the_rust_api_refuses_every_row_of_the_shared_table_with_its_words() {
    use shared_table::{call, table, Outcome};
    let mut unrepresentable = Vec::new();
    let mut wrong = Vec::new();
    let rows = table();
    for row in &rows {
        let what = format!(
            "{} | {}{} = {}",
            row.entry,
            row.name,
            row.index.map(|i| format!("[{i}]")).unwrap_or_default(),
            row.value
        );
        let (out, kept) = call(row);
        assert!(kept, "{what}: a refusal changed the state");
        match out {
            Outcome::Refused(m) if m.contains(&row.says) => {}
            Outcome::Refused(m) => wrong.push(format!("{what}: said {m:?}, not {:?}", row.says)),
            Outcome::Accepted => wrong.push(format!("{what}: accepted")),
            Outcome::Unrepresentable(why) => {
                println!("not run through the Rust API: {what}: {why}");
                unrepresentable.push(what);
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "the Rust API disagrees with the table:\n{}",
        wrong.join("\n")
    );
    // The rows the types rule out, exactly: a new row the API cannot express must be argued here.
    assert_eq!(
        unrepresentable,
        [
            "recurrent | max_seqlen = 0",
            "recurrent | record_dtype = 3",
            "verify | layer = -1",
            "decode | positions[0] = 4",
            "decode_materialize | positions[1] = -1",
        ],
        "the rows the typed API cannot express changed"
    );
    println!(
        "shared refusal table through the Rust API: {} of {} rows",
        rows.len() - unrepresentable.len(),
        rows.len()
    );
}
