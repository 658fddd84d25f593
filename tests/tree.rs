//! Tree verify (kernel VT) and path fold (kernel FT), design §4 VT: node outputs
//! against f64 along every root path (chains, stars, binary, EAGLE-like top-k, random forests),
//! a chain tree bit-identical to V, the path fold bit-identical to kernel R along the accepted
//! path over thousands of chained steps, bad input refused before launch, and garbage
//! device-side parents and paths skipped and flagged.
mod common;

use common::spec_chain::{each_impl, pool_for, rng, run_verify, run_verify_tree, spec_pool};
use common::*;
use rand::Rng;
use replayssm::backend::Backend;
use replayssm::checks::can_implement::rssm_fold_can_implement;
use replayssm::ffi;
use replayssm::numerics::compare;
use replayssm::reference;
use replayssm::ring::{RingShape, SpecRing};
use replayssm::spec::Track;
use replayssm::tree::{AcceptedPaths, DraftTree, MAX_TREE_NODES};
use replayssm::tuning::{self, Choice, Kernel};
use replayssm::{ActBuffer, DType, Error, HeadDims, RecurrentOutputs, Variant};
use replayssm_tools::staged::{fold, verify};
use replayssm_tools::workload::{GateData, RecurrentData, TreeShape};

/// The tokens of request `r`'s root path to node `i`, as a one-request workload.
fn path_workload(data: &RecurrentData, tree: &DraftTree, r: usize, path: &[usize]) -> RecurrentData {
    let bos = tree.cu_seqlens()[r] as usize;
    let toks: Vec<Option<usize>> = path.iter().map(|&p| Some(bos + p)).collect();
    let mut w = data.gather(&toks, vec![0, toks.len() as i32]);
    w.slots = vec![data.slots[r]];
    w
}

/// The f64 oracle of a tree verify: for every node, kernel R's maths (design §3, f64) run from
/// the checkpoint along the node's root path; the node's output is the path's last output.
fn path_oracle(data: &RecurrentData, tree: &DraftTree, layer_pool: &[f32]) -> Vec<f64> {
    let d = data.dims;
    let row = d.hv * d.v;
    let mut out = vec![0.0f64; data.num_tokens() * row];
    for r in 0..tree.requests() {
        if data.slots[r] < 0 {
            continue;
        }
        for i in 0..tree.nodes(r) {
            let w = path_workload(data, tree, r, &tree.root_path(r, i));
            let res = reference::recurrent::<f64>(&w.inputs(), layer_pool);
            let last = w.num_tokens() - 1;
            let tok = tree.cu_seqlens()[r] as usize + i;
            out[tok * row..(tok + 1) * row].copy_from_slice(&res.o[last * row..(last + 1) * row]);
        }
    }
    out
}

fn dims_list() -> [HeadDims; 4] {
    [
        HeadDims {
            h: 2,
            hv: 4,
            k: 64,
            v: 32,
        },
        HeadDims {
            h: 1,
            hv: 2,
            k: 32,
            v: 48,
        },
        HeadDims {
            h: 1,
            hv: 1,
            k: 128,
            v: 64,
        },
        // K = 96 (three channels per lane), last: the tests below that pick by index keep theirs.
        K96,
    ]
}

#[test]
fn tree_outputs_match_f64_along_every_root_path() {
    let mut seed = 9100 + run_seed();
    let mut r = rng(seed);
    let mut cases = 0;
    for (si, &dims) in dims_list().iter().enumerate() {
        for (ti, &shape) in TreeShape::ALL.iter().enumerate() {
            for variant in [Variant::Gdn, Variant::Kda] {
                seed += 1;
                let dtype = DType::ALL[(si + ti) % 3];
                let seqlens = [MAX_TREE_NODES, r.gen_range(2..9), r.gen_range(1..MAX_TREE_NODES + 1)];
                let mut s = spec(variant, dims, dtype, &seqlens);
                s.null_requests = vec![1];
                s.raw_gate = (ti + si) % 2 == 0;
                if s.raw_gate && variant == Variant::Kda {
                    s.gate_form = safe_gate();
                }
                let data = RecurrentData::random(&s, seed);
                let tree = shape.tree(&seqlens, &mut r).unwrap();
                let (ring_shape, pool) = pool_for(&data, 2, MAX_TREE_NODES, seed);
                let before = pool.state().to_vec();
                let layer_pool = &pool.state()[ring_shape.pool_offset(1, 0)..ring_shape.pool_offset(2, 0)];
                let oracle = path_oracle(&data, &tree, layer_pool);
                // The library's own f64 tree reference is the same maths in the same order.
                let lib64 = reference::tree_outputs::<f64>(&data.inputs(), tree.parent(), layer_pool);
                assert!(lib64.iter().zip(&oracle).all(|(a, b)| a.to_bits() == b.to_bits()));
                let tol = output_tolerance(dtype);
                let naive: Vec<f32> = reference::tree_outputs::<f32>(&data.inputs(), tree.parent(), layer_pool)
                    .iter()
                    .map(|&x| dtype.round(x))
                    .collect();
                let naive_err = compare(&naive, &oracle, tol);
                let what = format!(
                    "{shape:?} {variant} {dtype} {dims:?} seqlens {seqlens:?} {:?} seed {seed}",
                    s.gate_form
                );

                // Every implementation of V runs the tree mode (VT).
                for choice in Choice::all(Kernel::V) {
                    let _pinned = tuning::force(Kernel::V, choice);
                    let what = format!("VT {choice}: {what}");
                    let mut ring = SpecRing::new(ring_shape, data.qk_l2norm).unwrap();
                    let o = run_verify_tree(Backend::Emulated, &data, &tree, &pool, 1, Some(&mut ring)).unwrap();
                    let c = compare(&o.to_f32(), &oracle, tol);
                    println!("{what}: VT {c} | naive {:.2e}", naive_err.max_abs_err);
                    assert!(c.passed(), "{what}: {c}");
                    assert!(
                        c.max_abs_err <= reordered_bound(naive_err.max_abs_err, &oracle),
                        "{what}: {:.3e} > 2x naive {:.3e} + 4 ulp",
                        c.max_abs_err,
                        naive_err.max_abs_err
                    );
                    // The null request's outputs are exact zeros.
                    let row = dims.hv * dims.v;
                    let null = data.cu_seqlens[1] as usize * row..data.cu_seqlens[2] as usize * row;
                    assert!(
                        o.to_f32()[null].iter().all(|&x| x.to_bits() == 0),
                        "{what}: null request"
                    );
                    // The checkpoint is read only.
                    bits_equal(pool.state(), &before).unwrap_or_else(|e| panic!("{what}: checkpoint changed: {e}"));
                    // The ring holds the window's raw records at window positions, exactly as V
                    // writes them (V's ring is checked against the raw inputs in tests/verify.rs).
                    let mut chain_ring = SpecRing::new(ring_shape, data.qk_l2norm).unwrap();
                    run_verify(Backend::Emulated, &data, &pool, 1, Some(&mut chain_ring)).unwrap();
                    assert_eq!(ring.v.to_f32().len(), chain_ring.v.to_f32().len());
                    bits_equal(&ring.v.to_f32(), &chain_ring.v.to_f32())
                        .unwrap_or_else(|e| panic!("{what}: ring v {e}"));
                    bits_equal(&ring.k.to_f32(), &chain_ring.k.to_f32())
                        .unwrap_or_else(|e| panic!("{what}: ring k {e}"));
                    bits_equal(&ring.g, &chain_ring.g).unwrap_or_else(|e| panic!("{what}: ring g {e}"));
                    bits_equal(&ring.beta, &chain_ring.beta).unwrap_or_else(|e| panic!("{what}: ring beta {e}"));
                    // Ring writing does not change the outputs.
                    let again = run_verify_tree(Backend::Emulated, &data, &tree, &pool, 1, None).unwrap();
                    assert_eq!(o, again, "{what}: ring writing changed the outputs");
                    // The Reference backend passes the same rule.
                    if ti % 2 == 0 {
                        let o_ref = run_verify_tree(Backend::Reference, &data, &tree, &pool, 1, None).unwrap();
                        let c_ref = compare(&o_ref.to_f32(), &oracle, tol);
                        assert!(c_ref.passed(), "{what}: Reference backend {c_ref}");
                    }
                }
                cases += 1;
            }
        }
    }
    println!("{cases} tree verifies within tolerance of the f64 path oracle");
}

#[test]
fn a_chain_tree_is_bit_identical_to_the_linear_verify() {
    let mut seed = 9500 + std::process::id() as u64;
    for backend in [Backend::Emulated, Backend::Reference] {
        for variant in [Variant::Gdn, Variant::Kda] {
            for dtype in DType::ALL {
                seed += 1;
                let dims = dims_list()[seed as usize % 3];
                let seqlens = [MAX_TREE_NODES, 3, 7];
                let data = RecurrentData::random(&spec(variant, dims, dtype, &seqlens), seed);
                let tree = DraftTree::chain(&data.cu_seqlens).unwrap();
                let (_, pool) = pool_for(&data, 1, MAX_TREE_NODES, seed);
                // Per implementation of V (the Reference backend has one).
                let choices = if backend == Backend::Reference {
                    vec![Choice::DEFAULT]
                } else {
                    Choice::all(Kernel::V)
                };
                for choice in choices {
                    let _pinned = tuning::force(Kernel::V, choice);
                    let v = run_verify(backend, &data, &pool, 0, None).unwrap();
                    let vt = run_verify_tree(backend, &data, &tree, &pool, 0, None).unwrap();
                    bits_equal(&vt.to_f32(), &v.to_f32())
                        .unwrap_or_else(|e| panic!("{backend} {choice} {variant} {dtype}: chain tree != V: {e}"));
                    assert!(v.to_f32().iter().all(|x| x.is_finite()));
                }
            }
        }
    }
}

/// A chain of tree commits: each step draws a fresh tree per request (random shape and size),
/// verifies every layer (writing the ring), picks a random accepted node, and commits its root
/// path with FT into one pool and with kernel R over the path's tokens into another. The live
/// slots must stay bit-identical, track snapshots must equal R's snapshots.
/// [`tree_commit_chain_once`] for every implementation of VT and FT.
fn tree_commit_chain(backend: Backend, variant: Variant, dims: HeadDims, dtype: DType, steps: usize, seed: u64) {
    each_impl(backend, || {
        tree_commit_chain_once(backend, variant, dims, dtype, steps, seed)
    });
}

fn tree_commit_chain_once(backend: Backend, variant: Variant, dims: HeadDims, dtype: DType, steps: usize, seed: u64) {
    let (layers, batch, window) = (2usize, 3usize, 8usize);
    let live: [i32; 3] = [3, 0, 4];
    let track_pool: [i32; 3] = [1, 2, 5];
    let shape = RingShape {
        variant,
        dims,
        dtype,
        layers,
        slots: 7,
        window,
    };
    let mut r = rng(seed);
    let start: Vec<f32> = (0..shape.pool_elems()).map(|_| r.gen_range(-0.5f32..0.5)).collect();
    let mut pool_ft = spec_pool(&shape, &start);
    let mut pool_r = start;
    let mut ring = SpecRing::new(shape, true).unwrap();
    let per_slot = dims.state_elems();
    let mut folded = 0usize;
    for step in 0..steps {
        let seqlens: Vec<usize> = (0..batch).map(|_| r.gen_range(1..=window)).collect();
        let tshape = TreeShape::ALL[r.gen_range(0..TreeShape::ALL.len())];
        let tree = tshape.tree(&seqlens, &mut r).unwrap();
        let mut s = spec(variant, dims, dtype, &seqlens);
        s.raw_gate = step % 3 != 0;
        s.spare_slots = 4;
        let windows: Vec<RecurrentData> = (0..layers)
            .map(|l| {
                let mut w = RecurrentData::random(&s, seed * 1_000_003 + (step * layers + l) as u64);
                w.slots = live.to_vec();
                w
            })
            .collect();
        for (l, w) in windows.iter().enumerate() {
            run_verify_tree(backend, w, &tree, &pool_ft, l, Some(&mut ring)).unwrap();
        }
        let accepted: Vec<Option<usize>> = seqlens
            .iter()
            .map(|&n| (r.gen_range(0..6) != 0).then(|| r.gen_range(0..n)))
            .collect();
        let paths = AcceptedPaths::from_nodes(&tree, &accepted).unwrap();
        let track_slots: Vec<i32> = (0..batch)
            .map(|b| {
                if paths.lens()[b] > 0 && r.gen_bool(0.4) {
                    track_pool[b]
                } else {
                    -1
                }
            })
            .collect();
        let track_steps: Vec<i32> = (0..batch)
            .map(|b| {
                if track_slots[b] >= 0 {
                    r.gen_range(0..paths.lens()[b])
                } else {
                    -1
                }
            })
            .collect();
        let track = Track {
            slots: &track_slots[..],
            steps: &track_steps[..],
        };
        fold(backend, &mut pool_ft, &ring, &live, &paths, Some(track)).unwrap();
        folded += paths.lens().iter().sum::<i32>() as usize;

        for (l, w) in windows.iter().enumerate() {
            // R over each request's accepted path tokens, in path order.
            let mut toks = vec![];
            let mut cu = vec![0i32];
            for b in 0..batch {
                let bos = tree.cu_seqlens()[b] as usize;
                toks.extend(paths.path(b).iter().map(|&p| Some(bos + p as usize)));
                cu.push(toks.len() as i32);
            }
            let acc = w.gather(&toks, cu);
            let n = acc.num_tokens();
            let tmax = paths.lens().iter().copied().max().unwrap_or(0).max(1) as usize;
            let mut o = ActBuffer::nan(dtype, n * dims.hv * dims.v);
            let mut snaps = vec![f32::NAN; batch * tmax * per_slot];
            let layer_pool = &mut pool_r[shape.pool_offset(l, 0)..shape.pool_offset(l + 1, 0)];
            replayssm_tools::staged::recurrent(
                backend,
                &acc.inputs(),
                &mut RecurrentOutputs {
                    o: o.dense_mut(n, dims.hv * dims.v),
                    state: layer_pool,
                    write_state: true,
                    snapshots: Some(&mut snaps),
                },
            )
            .unwrap();
            for b in 0..batch {
                if track_slots[b] >= 0 {
                    let at = shape.pool_offset(l, track_slots[b] as usize);
                    let want = (b * tmax + track_steps[b] as usize) * per_slot;
                    bits_equal(&pool_ft.state()[at..at + per_slot], &snaps[want..want + per_slot]).unwrap_or_else(
                        |e| {
                            panic!("{backend} {variant} {dtype} step {step} layer {l} request {b}: track snapshot: {e}")
                        },
                    );
                }
            }
            for &slot in &live {
                let range = shape.pool_offset(l, slot as usize)..shape.pool_offset(l, slot as usize) + per_slot;
                bits_equal(&pool_ft.state()[range.clone()], &pool_r[range]).unwrap_or_else(|e| {
                    panic!(
                        "{backend} {variant} {dtype} step {step} layer {l} slot {slot} ({tshape:?}, paths {:?}): FT != R along the path: {e}",
                        paths.as_slice()
                    )
                });
            }
        }
        let unused = shape.pool_offset(layers - 1, 6)..shape.pool_offset(layers - 1, 6) + per_slot;
        assert!(
            bits_equal(&pool_ft.state()[unused.clone()], &pool_r[unused]).is_ok(),
            "untouched slot changed"
        );
    }
    println!("{backend} {variant} {dtype}: {steps} tree commits, {folded} path tokens folded, bit-identical to R");
}

fn tree_steps(default: usize) -> usize {
    std::env::var("REPLAYSSM_TREE_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

const SMALL: HeadDims = HeadDims {
    h: 1,
    hv: 2,
    k: 32,
    v: 16,
};

#[test]
fn path_fold_is_bit_identical_to_recurrent_along_the_path_over_2000_steps_gdn() {
    let seed = 9700 + std::process::id() as u64;
    tree_commit_chain(
        Backend::Emulated,
        Variant::Gdn,
        SMALL,
        DType::BF16,
        tree_steps(2000),
        seed,
    );
}

#[test]
fn path_fold_is_bit_identical_to_recurrent_along_the_path_over_2000_steps_kda() {
    let seed = 9800 + std::process::id() as u64;
    tree_commit_chain(
        Backend::Emulated,
        Variant::Kda,
        SMALL,
        DType::F32,
        tree_steps(2000),
        seed,
    );
}

#[test]
fn path_fold_on_the_reference_backend_and_a_gqa_shape() {
    let seed = 9900 + std::process::id() as u64;
    tree_commit_chain(Backend::Reference, Variant::Gdn, SMALL, DType::F16, 200, seed);
    let gqa = HeadDims {
        h: 2,
        hv: 4,
        k: 64,
        v: 32,
    };
    tree_commit_chain(Backend::Emulated, Variant::Kda, gqa, DType::BF16, 60, seed + 1);
}

#[test]
fn tree_kernels_on_the_gpu() {
    if !gpu_available("tree_kernels_on_the_gpu") {
        return;
    }
    let seed = 9950 + std::process::id() as u64;
    for variant in [Variant::Gdn, Variant::Kda] {
        tree_commit_chain(Backend::Cuda, variant, SMALL, DType::BF16, 300, seed);
        let dims = dims_list()[0];
        let seqlens = [MAX_TREE_NODES, 5, 11];
        let data = RecurrentData::random(&spec(variant, dims, DType::F32, &seqlens), seed);
        let tree = TreeShape::TopK(4).tree(&seqlens, &mut rng(seed)).unwrap();
        let (shape, pool) = pool_for(&data, 1, MAX_TREE_NODES, seed);
        let oracle = path_oracle(&data, &tree, &pool.state()[..shape.pool_offset(1, 0)]);
        let o = run_verify_tree(Backend::Cuda, &data, &tree, &pool, 0, None).unwrap();
        let c = compare(&o.to_f32(), &oracle, output_tolerance(DType::F32));
        println!("Cuda {variant} VT: {c}");
        assert!(c.passed(), "Cuda {variant} VT: {c}");
    }
}

#[test]
fn trees_and_paths_refuse_bad_input() {
    let cu = [0, 3, 5];
    // Topological order, range, length, size.
    for (parent, needle) in [
        (vec![-1, 0, 2, -1, 0], "earlier node"),
        (vec![-1, 0, 1, 0, 0], "earlier node"),
        (vec![-1, -2, 1, -1, 0], "earlier node"),
        (vec![-1, 0, 1, -1], "parent"),
    ] {
        let e = DraftTree::new(parent.clone(), &cu).unwrap_err();
        assert!(e.to_string().contains(needle), "{parent:?}: {e}");
    }
    let big = MAX_TREE_NODES as i32 + 1;
    let e = DraftTree::new((0..big).map(|i| i - 1).collect(), &[0, big]).unwrap_err();
    assert!(e.to_string().contains(&format!("at most {MAX_TREE_NODES}")), "{e}");
    assert!(DraftTree::new(vec![], &[1]).is_err());
    assert!(DraftTree::new(vec![-1, 0, 0], &[0, 3, 2]).is_err());

    let tree = DraftTree::new(vec![-1, 0, 0, -1, 0], &cu).unwrap();
    assert_eq!(tree.root_path(0, 2), vec![0, 2]);
    assert_eq!(tree.depth(0), 2);
    for (paths, width, needle) in [
        (vec![1, -1, 0, -1], 2, "parent"),      // does not start at a root
        (vec![0, 1, 2, 0, 1, -1], 3, "parent"), // 1 -> 2 is not a parent link
        (vec![0, -1, 5, 0, -1, -1], 3, "-1 padding"),
        (vec![0, 2, -1, 0, 7, -1], 3, "not a node"),
        (vec![0, -1, -1], 2, "accept_path"),
    ] {
        let e = AcceptedPaths::new(&tree, paths.clone(), width).unwrap_err();
        assert!(e.to_string().contains(needle), "{paths:?}: {e}");
    }
    let ok = AcceptedPaths::new(&tree, vec![0, 2, -1, -1], 2).unwrap();
    assert_eq!(ok.lens(), &[2, 0]);
    assert_eq!(AcceptedPaths::from_nodes(&tree, &[Some(2), None]).unwrap(), ok);
    assert!(AcceptedPaths::from_nodes(&tree, &[Some(3), None]).is_err());

    // Launch-level refusals leave outputs poisoned and the pool untouched.
    let dims = SMALL;
    let seqlens = [3usize, 2];
    let data = RecurrentData::random(&spec(Variant::Gdn, dims, DType::F32, &seqlens), 11);
    let (shape, mut pool) = pool_for(&data, 1, 4, 11);
    let before = pool.state().to_vec();
    let other = DraftTree::new(vec![-1, 0, -1, 0, 1], &[0, 2, 5]).unwrap();
    let n = data.num_tokens();
    let mut o = ActBuffer::nan(DType::F32, n * dims.hv * dims.v);
    let e = verify(
        Backend::Emulated,
        &data.inputs(),
        Some(&other),
        &pool,
        0,
        &mut o.dense_mut(n, dims.hv * dims.v),
        None,
    )
    .unwrap_err();
    assert!(e.to_string().contains("cu_seqlens"), "{e}");
    assert!(
        o.to_f32().iter().all(|x| x.is_nan()),
        "outputs touched by a refused launch"
    );
    let mut ring = SpecRing::new(shape, true).unwrap();
    run_verify_tree(Backend::Emulated, &data, &tree, &pool, 0, Some(&mut ring)).unwrap();
    // Ring window 4 is too small for a path through position 4.
    let deep = DraftTree::new(vec![-1, 0, 1, 2, 3], &[0, 5]).unwrap();
    let paths = AcceptedPaths::from_nodes(&deep, &[Some(4)]).unwrap();
    let e = fold(Backend::Emulated, &mut pool, &ring, &[0], &paths, None).unwrap_err();
    assert!(e.to_string().contains("window"), "{e}");
    // One row per request.
    let e = fold(Backend::Emulated, &mut pool, &ring, &[0, 1, 2], &ok, None).unwrap_err();
    assert!(matches!(e, Error::Shape { .. }), "{e}");
    // Track step beyond the path.
    let e = fold(
        Backend::Emulated,
        &mut pool,
        &ring,
        &[0, 1],
        &ok,
        Some(Track {
            slots: &[2, -1],
            steps: &[2, -1],
        }),
    )
    .unwrap_err();
    assert!(e.to_string().contains("track_steps"), "{e}");
    bits_equal(pool.state(), &before).expect("pool changed by refused commits");
}

/// Garbage parents and paths reaching the kernels through the raw C ABI (as under CUDA-graph
/// replay): the request is skipped (zero outputs / untouched slot), the error word flagged,
/// nothing written outside the buffers, the other requests unaffected.
#[test]
fn garbage_device_parents_and_paths_are_skipped_and_flagged() {
    let dims = SMALL;
    let seqlens = [4usize, 3];
    let data = RecurrentData::random(&spec(Variant::Gdn, dims, DType::F32, &seqlens), 21);
    let (shape, pool) = pool_for(&data, 1, 4, 21);
    let GateData::Raw {
        a, b, a_log, dt_bias, ..
    } = &data.gate
    else {
        unreachable!()
    };
    let n = data.num_tokens();
    let row = dims.hv * dims.v;
    // Every implementation of VT: (impl, block_rows).
    let parents = [
        [-1, 0, 1, 1, -1, 0, 3],
        [-1, 0, 1, 1, -1, 7, 0],
        [-1, 0, 1, 1, -9, 0, 0],
    ];
    for (parent, (imp, block_rows)) in parents
        .into_iter()
        .flat_map(|p| [(0, 0), (1, 0), (1, 16)].map(|c| (p, c)))
    {
        let mut o = vec![f32::NAN; n * row];
        let mut word = 0u32;
        let p = ffi::rssm_verify_params {
            base: ffi::rssm_base_params {
                slots: data.slots.as_ptr(),
                state: pool.state().as_ptr().cast_mut(),
                error_word: &mut word,
                batch: 2,
                num_slots: shape.slots as i32,
                num_layers: 1,
                layer: 0,
                H: dims.h as i32,
                HV: dims.hv as i32,
                K: dims.k as i32,
                V: dims.v as i32,
                dtype: ffi::rssm_dtype_RSSM_DTYPE_F32 as i32,
                variant: ffi::rssm_variant_RSSM_VARIANT_GDN as i32,
                qk_l2norm: 1,
                impl_: imp,
                block_rows,
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
                q_stride: (dims.h * dims.k) as i64,
                k_stride: (dims.h * dims.k) as i64,
                v_stride: row as i64,
                a_stride: dims.hv as i64,
                b_stride: dims.hv as i64,
                o_stride: row as i64,
                scale: data.scale,
                ..Default::default()
            },
            ring: ffi::rssm_ring_params {
                window: 4,
                ..Default::default()
            },
            cu_seqlens: data.cu_seqlens.as_ptr(),
            parent: parent.as_ptr(),
            num_tokens: n as i32,
            max_seqlen: 4,
        };
        // SAFETY: host buffers sized for these params; only request 1's parents are garbage.
        let st = unsafe { ffi::rssm_emu_verify(&p, std::ptr::null_mut()) };
        assert_eq!(st, ffi::rssm_status_RSSM_OK);
        assert_eq!(word, ffi::RSSM_DEVERR_BAD_TREE, "{parent:?}: not flagged");
        assert!(
            o[4 * row..].iter().all(|x| x.to_bits() == 0),
            "{parent:?}: skipped request not zeroed"
        );
        let tree0 = DraftTree::new(parent[..4].to_vec(), &[0, 4]).unwrap();
        let d0 = data.gather(&(0..4).map(Some).collect::<Vec<_>>(), vec![0, 4]);
        let oracle = path_oracle(
            &RecurrentData {
                slots: vec![data.slots[0]],
                ..d0
            },
            &tree0,
            pool.state(),
        );
        let c = compare(&o[..4 * row], &oracle, output_tolerance(DType::F32));
        assert!(c.passed(), "{parent:?}: live request {c}");
    }

    // FT with garbage paths: out of the window, not increasing.
    let mut ring = SpecRing::new(shape, true).unwrap();
    let tree = DraftTree::new(vec![-1, 0, 1, 1, -1, 0, 1], &data.cu_seqlens).unwrap();
    run_verify_tree(Backend::Emulated, &data, &tree, &pool, 0, Some(&mut ring)).unwrap();
    let guard = 1024;
    let mut buf = vec![f32::from_bits(0x7fc0_dead); guard];
    buf.extend_from_slice(pool.state());
    buf.extend(std::iter::repeat_n(f32::from_bits(0x7fc0_beef), guard));
    let live = [data.slots[0], data.slots[1]];
    let lens = [3, 1];
    let params = |state: *mut f32, paths: &[i32], word: &mut u32| ffi::rssm_fold_params {
        base: ffi::rssm_base_params {
            state,
            slots: live.as_ptr(),
            error_word: word,
            batch: 2,
            num_slots: shape.slots as i32,
            num_layers: 1,
            H: dims.h as i32,
            HV: dims.hv as i32,
            K: dims.k as i32,
            V: dims.v as i32,
            dtype: ffi::rssm_dtype_RSSM_DTYPE_F32 as i32,
            variant: ffi::rssm_variant_RSSM_VARIANT_GDN as i32,
            qk_l2norm: 1,
            ..Default::default()
        },
        ring: ffi::rssm_ring_params {
            v: ring.v.as_bytes().as_ptr().cast_mut().cast(),
            k: ring.k.as_bytes().as_ptr().cast_mut().cast(),
            g: ring.g.as_ptr().cast_mut(),
            beta: ring.beta.as_ptr().cast_mut(),
            window: 4,
            ..Default::default()
        },
        accept_paths: paths.as_ptr(),
        path_width: 3,
        ..Default::default()
    };
    // Every implementation of FT (PREFETCH indexes shared memory through the path).
    let all_paths = [[0, 1, 3, 0, 40, -1], [0, 1, 3, 0, 0, -1], [0, 1, 3, -7, 0, 1]];
    let impls = [ffi::rssm_impl_RSSM_IMPL_DEFAULT, ffi::rssm_impl_RSSM_IMPL_PREFETCH];
    for (paths, imp) in all_paths.into_iter().flat_map(|p| impls.map(|i| (p, i))) {
        let mut b = buf.clone();
        let mut word = 0u32;
        let mut p = params(b[guard..].as_mut_ptr(), &paths, &mut word);
        p.base.impl_ = imp as i32;
        // SAFETY: host buffers sized for these params; only request 1's path is garbage.
        let st = unsafe { ffi::rssm_emu_fold(&p, std::ptr::null_mut()) };
        assert_eq!(st, ffi::rssm_status_RSSM_OK);
        assert_eq!(word, ffi::RSSM_DEVERR_BAD_TREE, "{paths:?}: not flagged");
        let per = dims.state_elems();
        let s1 = shape.pool_offset(0, live[1] as usize);
        let s0 = shape.pool_offset(0, live[0] as usize);
        bits_equal(&b[guard + s1..guard + s1 + per], &pool.state()[s1..s1 + per])
            .unwrap_or_else(|e| panic!("{paths:?}: skipped slot changed: {e}"));
        assert!(
            bits_equal(&b[guard + s0..guard + s0 + per], &pool.state()[s0..s0 + per]).is_err(),
            "{paths:?}: request 0 not folded"
        );
        assert!(
            b[..guard].iter().all(|x| x.to_bits() == 0x7fc0_dead),
            "write before the pool"
        );
        assert!(
            b[guard + pool.state().len()..]
                .iter()
                .all(|x| x.to_bits() == 0x7fc0_beef),
            "write after the pool"
        );
    }
    // The host-side check wants exactly one accept form and a path width within the window.
    let mut b = buf.clone();
    let mut word = 0u32;
    let good = [0, 1, 3, 0, -1, -1];
    let ok = params(b[guard..].as_mut_ptr(), &good, &mut word);
    // SAFETY: can_implement reads only the struct.
    let check = |p: &ffi::rssm_fold_params| unsafe { rssm_fold_can_implement(p, 1) };
    assert_eq!(check(&ok), ffi::rssm_status_RSSM_OK);
    for bad in [
        ffi::rssm_fold_params {
            base: ok.base,
            ring: ok.ring,
            accept_lens: lens.as_ptr(),
            ..ok
        },
        ffi::rssm_fold_params {
            base: ok.base,
            ring: ok.ring,
            path_width: 0,
            ..ok
        },
        ffi::rssm_fold_params {
            base: ok.base,
            ring: ok.ring,
            path_width: 5,
            ..ok
        },
        ffi::rssm_fold_params {
            base: ok.base,
            ring: ok.ring,
            accept_paths: std::ptr::null(),
            ..ok
        },
    ] {
        assert_eq!(check(&bad), ffi::rssm_status_RSSM_ERR_INVALID_ARGUMENT);
        // SAFETY: as above; a refused launch returns before touching any buffer.
        let st = unsafe { ffi::rssm_emu_fold(&bad, std::ptr::null_mut()) };
        assert_eq!(st, ffi::rssm_status_RSSM_ERR_INVALID_ARGUMENT);
    }
    bits_equal(&b[guard..guard + pool.state().len()], pool.state()).expect("refused launches wrote the pool");
}
