//! A seeded random fuzz campaign of the case-file reader ([`replayssm_tools::case::parse`], the checks
//! `replayssm check` runs before any kernel), as an ordinary test: mutations of the shipped cases
//! (bit flips, truncations, header-length lies, JSON edits: huge shapes and offsets, wrong
//! dtypes, overlapping offsets, bad metadata; i32 tensors overwritten with edge values) and
//! random bytes. Every input must be parsed without a panic, within a bounded allocation, and a
//! mutated file the reader accepts must be consistent (else it is a "silent accept").
//!
//! One test in this binary, so the counting allocator sees only the reader's allocations.
use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use replayssm_tools::case::{parse, Case, Op, FORMAT};
use serde_json::{json, Value};

/// Counts live heap bytes and their peak, so each input's allocation can be bounded.
struct Counting;

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(by: usize) {
    let now = CURRENT.fetch_add(by, Ordering::Relaxed) + by;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: forwards to the system allocator and only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = System.alloc(l);
        if !p.is_null() {
            grew(l.size());
        }
        p
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(l);
        if !p.is_null() {
            grew(l.size());
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l);
        CURRENT.fetch_sub(l.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let q = System.realloc(p, l, new);
        if !q.is_null() {
            CURRENT.fetch_sub(l.size(), Ordering::Relaxed);
            grew(new);
        }
        q
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const INPUTS: usize = 100_000;
const SEED: u64 = 0x1940_5711;

fn shipped() -> Vec<(PathBuf, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cases");
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .collect();
    v.sort();
    v.into_iter()
        .map(|p| {
            let b = std::fs::read(&p).unwrap();
            (p, b)
        })
        .collect()
}

fn split(file: &[u8]) -> (Value, &[u8]) {
    let n = u64::from_le_bytes(file[..8].try_into().unwrap()) as usize;
    (serde_json::from_slice(&file[8..8 + n]).unwrap(), &file[8 + n..])
}

fn join(header: &Value, data: &[u8], out: &mut Vec<u8>) {
    let text = serde_json::to_vec(header).unwrap();
    out.clear();
    out.extend_from_slice(&(text.len() as u64).to_le_bytes());
    out.extend_from_slice(&text);
    out.extend_from_slice(data);
}

fn pick<'a, T>(rng: &mut ChaCha8Rng, xs: &'a [T]) -> &'a T {
    &xs[rng.gen_range(0..xs.len())]
}

/// A number that tends to break size arithmetic.
fn edge_u64(rng: &mut ChaCha8Rng) -> u64 {
    let any = rng.gen::<u32>() as u64;
    *pick(
        rng,
        &[
            0,
            1,
            2,
            3,
            7,
            16,
            17,
            255,
            4096,
            65535,
            65536,
            65537,
            1 << 31,
            1 << 32,
            1 << 40,
            1 << 62,
            u64::MAX / 4,
            u64::MAX - 1,
            u64::MAX,
            any,
        ],
    )
}

fn edge_i32(rng: &mut ChaCha8Rng) -> i32 {
    let any = rng.gen();
    *pick(
        rng,
        &[
            -2,
            -1,
            0,
            1,
            2,
            3,
            4,
            5,
            8,
            15,
            16,
            17,
            100,
            65535,
            65536,
            i32::MAX,
            i32::MIN,
            any,
        ],
    )
}

const OPS: [&str; 9] = [
    "recurrent",
    "verify",
    "fold",
    "decode",
    "verify_tree",
    "fold_tree",
    "verify_fold_steps",
    "verify_buffered_steps",
    "nope",
];
const DTYPES: [&str; 12] = [
    "F32", "F16", "BF16", "I32", "I64", "F64", "U8", "I8", "BOOL", "F8_E4M3", "U64", "XYZ",
];

/// One edit of the header JSON.
fn mutate_json(rng: &mut ChaCha8Rng, h: &mut Value) {
    let names: Vec<String> = h
        .as_object()
        .unwrap()
        .keys()
        .filter(|k| *k != "__metadata__")
        .cloned()
        .collect();
    if names.is_empty() {
        return;
    }
    let name = pick(rng, &names).clone();
    // Earlier edits may have left a field of another JSON type: start those afresh.
    for n in &names {
        if !h[n].is_object() {
            h[n] = json!({});
        }
        for (field, fresh) in [("shape", json!([])), ("data_offsets", json!([0, 0]))] {
            let ok = h[n][field].as_array().is_some_and(|a| field == "shape" || a.len() == 2);
            if !ok {
                h[n][field] = fresh;
            }
        }
    }
    if !h["__metadata__"].is_object() {
        h["__metadata__"] = json!({});
    }
    match rng.gen_range(0..14) {
        0 => {
            // A huge or zero extent.
            let shape = h[&name]["shape"].as_array_mut().unwrap();
            if !shape.is_empty() {
                let i = rng.gen_range(0..shape.len());
                shape[i] = json!(edge_u64(rng));
            }
        }
        1 => {
            // A shape with an extent moved, added or dropped.
            let shape = h[&name]["shape"].as_array_mut().unwrap();
            match rng.gen_range(0..3) {
                0 => shape.push(json!(1)),
                1 => {
                    shape.pop();
                }
                _ => shape.reverse(),
            }
        }
        2 => {
            let o = h[&name]["data_offsets"].as_array_mut().unwrap();
            let i = rng.gen_range(0..2);
            o[i] = json!(edge_u64(rng));
        }
        3 => {
            // Overlapping offsets: this tensor starts where another does.
            let other = pick(rng, &names).clone();
            let start = h[&other]["data_offsets"][0].clone();
            h[&name]["data_offsets"][0] = start;
        }
        4 => {
            // Offsets swapped between two tensors.
            let other = pick(rng, &names).clone();
            let a = h[&name]["data_offsets"].clone();
            let b = h[&other]["data_offsets"].clone();
            h[&name]["data_offsets"] = b;
            h[&other]["data_offsets"] = a;
        }
        5 => h[&name]["dtype"] = json!(pick(rng, &DTYPES)),
        6 => {
            h.as_object_mut().unwrap().remove(&name);
        }
        7 => {
            // Renamed (to another tensor's name, or away).
            let v = h.as_object_mut().unwrap().remove(&name).unwrap();
            let to = if rng.gen() {
                pick(rng, &names).clone()
            } else {
                format!("{name}_x")
            };
            h[to] = v;
        }
        8 => {
            let key = *pick(
                rng,
                &[
                    "op",
                    "atol",
                    "rtol",
                    "cache_len",
                    "format",
                    "variant",
                    "scale",
                    "qk_l2norm",
                ],
            );
            let value = match key {
                "op" => pick(rng, &OPS).to_string(),
                "atol" | "rtol" | "scale" => pick(
                    rng,
                    &["NaN", "nan", "inf", "-inf", "-1e-3", "1e309", "0", "1e-4", "x", ""],
                )
                .to_string(),
                "cache_len" => pick(
                    rng,
                    &[
                        "0",
                        "1",
                        "4",
                        "65536",
                        "65537",
                        "-1",
                        "18446744073709551615",
                        "4294967296",
                    ],
                )
                .to_string(),
                "format" => pick(rng, &[FORMAT, "replayssm-case/2", "\u{202e}\u{1b}[2J"]).to_string(),
                "variant" => pick(rng, &["gdn", "kda", "mamba", "\u{1b}]0;x\u{7}"]).to_string(),
                _ => pick(rng, &["true", "false", "maybe"]).to_string(),
            };
            h["__metadata__"][key] = json!(value);
        }
        9 => {
            let key = *pick(rng, &["op", "atol", "rtol", "cache_len", "format", "variant", "scale"]);
            h["__metadata__"].as_object_mut().unwrap().remove(key);
        }
        10 => {
            // A value of the wrong JSON type.
            let field = *pick(rng, &["shape", "data_offsets", "dtype"]);
            h[&name][field] = pick(rng, &[json!(null), json!(-1), json!("7"), json!([1.5]), json!({})]).clone();
        }
        11 => {
            // An extra tensor pointing anywhere.
            let s = edge_u64(rng);
            h["extra"] = json!({"dtype": pick(rng, &DTYPES), "shape": [edge_u64(rng)], "data_offsets": [s, s.saturating_add(edge_u64(rng))]});
        }
        12 => h["__metadata__"] = pick(rng, &[json!(null), json!([]), json!({"format": 1})]).clone(),
        _ => {
            // Shapes of two tensors swapped (byte sizes usually differ).
            let other = pick(rng, &names).clone();
            let a = h[&name]["shape"].clone();
            let b = h[&other]["shape"].clone();
            h[&name]["shape"] = b;
            h[&other]["shape"] = a;
        }
    }
}

/// Overwrites elements of an i32 tensor (cu_seqlens, accept, parent, accept_path; accept
/// `[S, R]` of verify_fold_steps) in place.
fn mutate_ints(rng: &mut ChaCha8Rng, file: &mut [u8]) {
    let (h, _) = split(file);
    let n = u64::from_le_bytes(file[..8].try_into().unwrap()) as usize;
    let ints: Vec<(u64, u64)> = h
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, v)| v["dtype"] == "I32")
        .map(|(_, v)| {
            (
                v["data_offsets"][0].as_u64().unwrap(),
                v["data_offsets"][1].as_u64().unwrap(),
            )
        })
        .collect();
    let &(s, e) = pick(rng, &ints);
    let count = ((e - s) / 4) as usize;
    if count == 0 {
        return;
    }
    for _ in 0..rng.gen_range(1..=2) {
        let at = 8 + n + s as usize + 4 * rng.gen_range(0..count);
        file[at..at + 4].copy_from_slice(&edge_i32(rng).to_le_bytes());
    }
}

/// Builds one fuzz input into `out`.
fn make_input(rng: &mut ChaCha8Rng, seeds: &[(PathBuf, Vec<u8>)], parsed: &[(Value, usize)], out: &mut Vec<u8>) {
    let which = rng.gen_range(0..seeds.len());
    let good = &seeds[which].1;
    let header_end = 8 + parsed[which].1;
    match rng.gen_range(0..100) {
        // Bit flips, mostly in the header where they change meaning.
        0..=19 => {
            out.clear();
            out.extend_from_slice(good);
            for _ in 0..rng.gen_range(1..=4) {
                let at = if rng.gen_bool(0.8) {
                    rng.gen_range(0..header_end)
                } else {
                    rng.gen_range(0..good.len())
                };
                out[at] ^= 1 << rng.gen_range(0..8);
            }
        }
        // Truncation.
        20..=27 => {
            let cut = if rng.gen() {
                rng.gen_range(0..header_end + 1)
            } else {
                rng.gen_range(0..good.len())
            };
            out.clear();
            out.extend_from_slice(&good[..cut]);
        }
        // Header-length lies.
        28..=37 => {
            out.clear();
            out.extend_from_slice(good);
            let n = (header_end - 8) as u64;
            let any = edge_u64(rng);
            let lie = *pick(
                rng,
                &[
                    0,
                    1,
                    n - 1,
                    n + 1,
                    n + 8,
                    good.len() as u64,
                    good.len() as u64 - 8,
                    100_000_001,
                    1 << 40,
                    u64::MAX,
                    any,
                ],
            );
            out[..8].copy_from_slice(&lie.to_le_bytes());
        }
        // JSON edits, re-serialised with a true header length.
        38..=77 => {
            let mut h = parsed[which].0.clone();
            for _ in 0..rng.gen_range(1..=3) {
                mutate_json(rng, &mut h);
            }
            join(&h, &good[header_end..], out);
        }
        // Edge values in the i32 tensors: the reader's own checks.
        78..=89 => {
            out.clear();
            out.extend_from_slice(good);
            mutate_ints(rng, out);
        }
        // Bytes inserted into or deleted from the header.
        90..=94 => {
            out.clear();
            out.extend_from_slice(good);
            let at = rng.gen_range(8..header_end);
            if rng.gen() {
                out.remove(at);
            } else {
                out.insert(at, *pick(rng, b"{}[],:\"0 \\e"));
            }
        }
        // Random bytes, some behind a plausible length field.
        _ => {
            let len = rng.gen_range(0..600);
            out.clear();
            out.extend((0..len).map(|_| rng.gen::<u8>()));
            if len >= 8 && rng.gen() {
                let n = rng.gen_range(0..len as u64);
                out[..8].copy_from_slice(&n.to_le_bytes());
                if len > 8 {
                    out[8] = b'{';
                }
            }
        }
    }
}

fn dtype_size(d: &str) -> Option<u64> {
    Some(match d {
        "BOOL" | "U8" | "I8" | "F8_E5M2" | "F8_E4M3" => 1,
        "I16" | "U16" | "F16" | "BF16" => 2,
        "I32" | "U32" | "F32" => 4,
        "I64" | "U64" | "F64" => 8,
        _ => return None,
    })
}

/// Why an accepted file is inconsistent (`None` when it is consistent): the safetensors layout
/// checked independently of the library, then the case against the layout and its metadata.
fn inconsistency(file: &[u8], case: &Case) -> Option<String> {
    let bad = |why: &str| Some(why.to_string());
    let Some(head) = file.get(..8) else {
        return bad("shorter than 8 bytes");
    };
    let n = u64::from_le_bytes(head.try_into().unwrap());
    let Some(text) = usize::try_from(n).ok().and_then(|n| file.get(8..n.checked_add(8)?)) else {
        return Some(format!("header length {n} past the end"));
    };
    let n = n as usize;
    let Ok(h) = serde_json::from_slice::<Value>(text) else {
        return Some("header is not JSON".into());
    };
    let data_len = (file.len() - 8 - n) as u64;
    let mut spans = vec![];
    let mut shapes = std::collections::HashMap::new();
    let Some(tensors) = h.as_object() else {
        return bad("header is not an object");
    };
    for (name, t) in tensors {
        if name == "__metadata__" {
            continue;
        }
        let dtype = t["dtype"].as_str().unwrap_or("?");
        let Some(shape) = t["shape"].as_array() else {
            return Some(format!("tensor {name}: shape is not an array"));
        };
        let shape: Vec<u64> = shape.iter().map(|x| x.as_u64().unwrap_or(u64::MAX)).collect();
        let (Some(s), Some(e), 2) = (
            t["data_offsets"][0].as_u64(),
            t["data_offsets"][1].as_u64(),
            t["data_offsets"].as_array().map_or(0, Vec::len),
        ) else {
            return Some(format!("tensor {name}: data_offsets {}", t["data_offsets"]));
        };
        let Some(size) = dtype_size(dtype) else {
            return Some(format!("tensor {name}: dtype {dtype}"));
        };
        let bytes = shape.iter().try_fold(size, |a, &x| a.checked_mul(x));
        if e < s || e > data_len || bytes != Some(e - s) {
            return Some(format!(
                "tensor {name}: {dtype} {shape:?} at {s}..{e} of {data_len} bytes"
            ));
        }
        spans.push((s, e));
        shapes.insert(name.clone(), (dtype.to_string(), shape));
    }
    spans.sort();
    let mut at = 0;
    for (s, e) in spans {
        if s != at {
            return Some(format!("tensor data overlaps or leaves a gap at {at}..{s}"));
        }
        at = e;
    }
    if at != data_len {
        return Some(format!("tensors end at {at}, the data at {data_len}"));
    }
    let meta = &h["__metadata__"];
    let m = |k: &str| meta[k].as_str().unwrap_or("");
    if m("format") != FORMAT || Op::parse(m("op")) != Some(case.op) {
        return Some(format!("metadata format {:?} op {:?}", m("format"), m("op")));
    }
    for k in ["atol", "rtol"] {
        match m(k).parse::<f64>() {
            Ok(x) if x.is_finite() && x >= 0.0 => {}
            _ => return Some(format!("accepted {k} = {:?}", m(k))),
        }
    }
    // The case against the tensors it was read from.
    let d = case.data.dims;
    let cu = &case.data.cu_seqlens;
    let (Some(requests), Some(&last)) = (cu.len().checked_sub(1), cu.last()) else {
        return bad("cu_seqlens empty");
    };
    if requests == 0 || last < 0 {
        return bad("cu_seqlens has no request or a negative end");
    }
    let tokens = last as usize;
    let shape_of = |name: &str| shapes.get(name).map(|(_, s)| s.clone());
    // verify_fold_steps: the token tensors and `o` carry a leading step extent S; every step's
    // window is checked like step 0's (`case.data`).
    let multi = case.op.has_steps();
    let steps = case.steps.as_ref().map_or(1, |s| s.count());
    let lead = |s: Vec<usize>| if multi { [vec![steps], s].concat() } else { s };
    let want_flat = |name: &str, s: Vec<usize>| shape_of(name) == Some(s.iter().map(|&x| x as u64).collect());
    let want = |name: &str, s: Vec<usize>| want_flat(name, lead(s));
    let windows: Vec<&replayssm_tools::workload::RecurrentData> = std::iter::once(&case.data)
        .chain(case.steps.iter().flat_map(|s| s.rest.iter()))
        .collect();
    let all = |f: &dyn Fn(&replayssm_tools::workload::RecurrentData) -> bool| windows.iter().all(|w| f(w));
    let checks = [
        (
            "q",
            want("q", vec![tokens, d.h, d.k]) && all(&|w| w.q.len() == tokens * d.h * d.k),
        ),
        (
            "k",
            want("k", vec![tokens, d.h, d.k]) && all(&|w| w.k.len() == tokens * d.h * d.k),
        ),
        (
            "v",
            want("v", vec![tokens, d.hv, d.v]) && all(&|w| w.v.len() == tokens * d.hv * d.v),
        ),
        (
            "o",
            want("o", vec![tokens, d.hv, d.v]) && case.expected_o.len() == steps * tokens * d.hv * d.v,
        ),
        (
            "steps",
            multi
                == case.steps.as_ref().is_some_and(|s| {
                    (1..=replayssm_tools::case::MAX_CASE_STEPS).contains(&s.count())
                        && s.accept.len() == s.count() * requests
                        && s.accept.chunks(requests).all(|row| {
                            row.iter()
                                .zip(cu.windows(2))
                                .all(|(&x, w)| (0..=w[1] - w[0]).contains(&x))
                        })
                        && cu.windows(2).all(|w| w[1] > w[0])
                        && s.rest.iter().all(|w| {
                            w.cu_seqlens == *cu
                                && w.dims == d
                                && w.dtype == case.data.dtype
                                && w.variant == case.data.variant
                        })
                }),
        ),
        (
            "state_in",
            want_flat("state_in", vec![requests, d.hv, d.v, d.k])
                && case.data.state.len() == requests * d.state_elems(),
        ),
        (
            "state_out",
            case.expected_state
                .as_ref()
                .is_none_or(|s| s.len() == case.data.state.len())
                && (!multi || case.expected_state.is_some()),
        ),
        ("cu_seqlens", cu[0] == 0 && cu.windows(2).all(|w| w[0] <= w[1])),
        ("dims", d.validate().is_ok()),
        (
            "cache_len",
            match case.op {
                Op::Decode => case
                    .cache_len
                    .is_some_and(|l| (1..=replayssm::limits::MAX_CACHE_LEN).contains(&l)),
                Op::VerifyBufferedSteps => case
                    .cache_len
                    .is_some_and(|l| (1..=replayssm::limits::MAX_BUFFERED_CACHE_LEN).contains(&l)),
                _ => case.cache_len.is_none(),
            },
        ),
        (
            "accept",
            case.accept.as_ref().is_none_or(|a| {
                a.len() == requests
                    && a.iter()
                        .zip(cu.windows(2))
                        .all(|(&x, w)| (0..=w[1] - w[0]).contains(&x))
            }),
        ),
        (
            "window",
            !matches!(
                case.op,
                Op::Verify | Op::Fold | Op::VerifyFoldSteps | Op::VerifyBufferedSteps
            ) || cu
                .windows(2)
                .all(|w| (w[1] - w[0]) as usize <= replayssm::spec::MAX_VERIFY_WINDOW),
        ),
    ];
    checks
        .iter()
        .find(|(_, ok)| !ok)
        .map(|(what, _)| format!("case field {what} inconsistent with the file"))
}

fn risky(c: char) -> bool {
    c.is_control() && c != '\n'
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

#[test]
fn case_file_reader_survives_a_seeded_fuzz_campaign() {
    let seeds = shipped();
    assert!(seeds.len() >= 10);
    let parsed: Vec<(Value, usize)> = seeds
        .iter()
        .map(|(_, b)| {
            let n = u64::from_le_bytes(b[..8].try_into().unwrap()) as usize;
            (split(b).0, n)
        })
        .collect();
    // The seeds themselves are accepted and consistent.
    for (p, b) in &seeds {
        let c = parse(p, b).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(inconsistency(b, &c), None, "{}", p.display());
    }
    let path = Path::new("fuzz.safetensors");
    let mut rng = ChaCha8Rng::seed_from_u64(SEED);
    let mut input = Vec::with_capacity(1 << 20);
    let (mut crashes, mut silent, mut accepted, mut unescaped) = (0usize, 0usize, 0usize, 0usize);
    let mut worst_ratio = 0.0f64;
    let mut first_problem: Option<String> = None;
    // Quiet while the reader runs (a panic there is counted and reported below), loud elsewhere.
    static QUIET: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let prev_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !QUIET.load(Ordering::Relaxed) {
            prev_hook(info)
        }
    }));
    let start = std::time::Instant::now();
    for i in 0..INPUTS {
        make_input(&mut rng, &seeds, &parsed, &mut input);
        let base = CURRENT.load(Ordering::Relaxed);
        PEAK.store(base, Ordering::Relaxed);
        QUIET.store(true, Ordering::Relaxed);
        let result = catch_unwind(AssertUnwindSafe(|| parse(path, &input)));
        QUIET.store(false, Ordering::Relaxed);
        let used = PEAK.load(Ordering::Relaxed).saturating_sub(base);
        // The reader copies tensor data out of the file (one copy at most) plus the header's
        // parsed JSON: 4x the input and 1 MiB covers both.
        let bound = 4 * input.len() + (1 << 20);
        if input.len() >= 1 << 16 {
            worst_ratio = worst_ratio.max(used as f64 / input.len() as f64);
        }
        let mut problem = |what: String| {
            if first_problem.is_none() {
                std::fs::write(std::env::temp_dir().join("replayssm-fuzz-failure.safetensors"), &input).ok();
                first_problem = Some(format!("input {i}: {what}"));
            }
        };
        if used > bound {
            problem(format!("allocated {used} bytes for a {} byte input", input.len()));
            crashes += 1;
        }
        match result {
            Err(_) => {
                problem("panicked".into());
                crashes += 1;
            }
            Ok(Ok(case)) => {
                accepted += 1;
                if let Some(why) = inconsistency(&input, &case) {
                    problem(format!("silent accept: {why}"));
                    silent += 1;
                }
            }
            Ok(Err(e)) => {
                let msg = e.to_string();
                if msg.chars().any(risky) {
                    problem(format!("unescaped control characters in: {msg:?}"));
                    unescaped += 1;
                }
            }
        }
    }
    drop(std::panic::take_hook());
    let secs = start.elapsed().as_secs_f64();
    // Straight to stderr: the harness hides println! of a passing test.
    let _ = writeln!(
        std::io::stderr().lock(),
        "case-file fuzz: {INPUTS} inputs, {crashes} crashes, {silent} silent accepts"
    );
    println!(
        "  ({accepted} accepted, {unescaped} unescaped messages, peak allocation at most {worst_ratio:.2}x the input, {secs:.1} s, seed {SEED:#x})"
    );
    assert_eq!(
        (crashes, silent, unescaped),
        (0, 0, 0),
        "first problem (input saved to the temp dir as replayssm-fuzz-failure.safetensors): {}",
        first_problem.unwrap_or_default()
    );
    // Enough inputs get past the header to reach the tensor checks.
    assert!(
        accepted > INPUTS / 50,
        "only {accepted} inputs parsed: the mutations are too coarse"
    );
}
