//! Capability gates (design §5): one test per rule (variant and message), its accepted
//! neighbours, a property test over random flag sets (the `validate` CLI: tools/tests/cli.rs).

use rand::{Rng, SeedableRng};
use replayssm::config::*;
use replayssm::{CheckpointPool, DType, DecodeRing, Error, HeadDims, SpecRing, Variant, MAX_TREE_NODES};

fn spec_flags() -> EngineFlags {
    EngineFlags {
        enable_linear_replayssm_spec: true,
        speculative_algorithm: Some(SpecAlgorithm::Eagle),
        speculative_num_draft_tokens: Some(4),
        ..Default::default()
    }
}

fn buffered_flags() -> EngineFlags {
    EngineFlags {
        enable_linear_replayssm: true,
        linear_replayssm_cache_len: Some(8),
        ..Default::default()
    }
}

/// Refused with `rule`, and the message names every one of `needles`.
fn refused(f: &EngineFlags, rule: &str, needles: &[&str]) -> GateError {
    let e = resolve(f).expect_err(rule);
    assert_eq!(e.rule(), rule, "{e}");
    let msg = e.to_string();
    for n in needles {
        assert!(msg.contains(n), "{rule}: '{n}' missing from: {msg}");
    }
    e
}

fn accepted(f: &EngineFlags) -> ResolvedConfig {
    resolve(f).unwrap_or_else(|e| panic!("refused {f:?}: {e}"))
}

#[test]
fn a1_buffered_decode_needs_the_triton_or_helion_ring_kernels() {
    let f = EngineFlags {
        linear_attn_decode_backend: KernelFamily::Flashinfer,
        ..buffered_flags()
    };
    refused(
        &f,
        "A1",
        &[
            "--enable-linear-replayssm",
            "--linear-attn-decode-backend",
            "'flashinfer'",
        ],
    );
    // helion only for KDA.
    let f = EngineFlags {
        linear_attn_decode_backend: KernelFamily::Helion,
        ..buffered_flags()
    };
    refused(&f, "A1", &["'helion'", "'gdn'"]);
    let kda = EngineFlags {
        linear_attn_decode_backend: KernelFamily::Helion,
        linear_attn_kind: Variant::Kda,
        ..buffered_flags()
    };
    assert_eq!(accepted(&kda).mode, Mode::Buffered { cache_len: 8 });
    assert_eq!(accepted(&buffered_flags()).decode_backend, KernelFamily::Triton);
}

#[test]
fn a2_buffered_decode_refuses_extra_buffer_radix_cache() {
    let f = EngineFlags {
        mamba_radix_cache_strategy: RadixCacheStrategy::ExtraBuffer,
        ..buffered_flags()
    };
    refused(
        &f,
        "A2",
        &[
            "--enable-linear-replayssm",
            "--mamba-radix-cache-strategy",
            "'extra_buffer'",
        ],
    );
    // Spec ring with extra_buffer: not this rule's business.
    accepted(&EngineFlags {
        mamba_radix_cache_strategy: RadixCacheStrategy::ExtraBuffer,
        ..spec_flags()
    });
}

#[test]
fn a3_buffered_decode_refuses_pd_disaggregation_and_spec_on_decode_is_accepted() {
    for (role, v) in [(PoolRole::PdDecode, "'decode'"), (PoolRole::PdPrefill, "'prefill'")] {
        let f = EngineFlags {
            disaggregation_mode: role,
            ..buffered_flags()
        };
        let e = refused(&f, "A3", &["--enable-linear-replayssm", "--disaggregation-mode", v]);
        assert!(e.to_string().contains("not supported under PD disaggregation"), "{e}");
    }
    // The neighbour: the spec ring on a PD decode server is allowed.
    let ok = accepted(&EngineFlags {
        disaggregation_mode: PoolRole::PdDecode,
        ..spec_flags()
    });
    assert_eq!(
        (ok.mode, ok.pool_role),
        (
            Mode::Spec {
                commit: SpecCommit::EveryStep
            },
            PoolRole::PdDecode
        )
    );
}

#[test]
fn a4_cache_len_must_be_positive() {
    for l in [0, -3, 65537] {
        let f = EngineFlags {
            linear_replayssm_cache_len: Some(l),
            ..buffered_flags()
        };
        refused(&f, "A4", &["--linear-replayssm-cache-len", &format!("={l}")]);
    }
    let one = accepted(&EngineFlags {
        linear_replayssm_cache_len: Some(1),
        ..buffered_flags()
    });
    assert_eq!(one.mode, Mode::Buffered { cache_len: 1 });
    let default = accepted(&EngineFlags {
        linear_replayssm_cache_len: None,
        ..buffered_flags()
    });
    assert_eq!(
        default.mode,
        Mode::Buffered {
            cache_len: DEFAULT_CACHE_LEN
        }
    );
    assert!(default
        .warnings
        .iter()
        .any(|w| w.contains("--linear-replayssm-cache-len")));
}

#[test]
fn b1_trees_use_the_tree_kernels_up_to_their_node_limit() {
    // topk > 1 within the limit: accepted, served by VT + FT.
    for (k, n) in [(2, 4), (4, 8), (4, MAX_TREE_NODES as i64)] {
        let cfg = accepted(&EngineFlags {
            speculative_eagle_topk: Some(k),
            speculative_num_draft_tokens: Some(n),
            ..spec_flags()
        });
        assert_eq!(
            cfg.draft,
            DraftShape::Tree {
                topk: Some(k as usize),
                nodes: Some(n as usize)
            }
        );
        assert!(cfg.kernels().contains("VT tree verify"), "{}", cfg.kernels());
        assert!(cfg.to_string().contains("VT tree verify"), "{cfg}");
        assert!(cfg.warnings.iter().all(|w| !w.contains("tree")), "{:?}", cfg.warnings);
    }
    // Unknown node count: accepted with a warning that states the limit.
    let cfg = accepted(&EngineFlags {
        speculative_eagle_topk: Some(4),
        speculative_num_draft_tokens: None,
        ..spec_flags()
    });
    assert_eq!(
        cfg.draft,
        DraftShape::Tree {
            topk: Some(4),
            nodes: None
        }
    );
    assert!(
        cfg.warnings
            .iter()
            .any(|w| w.contains(&format!("at most {MAX_TREE_NODES} nodes"))),
        "{:?}",
        cfg.warnings
    );
    // Too many nodes: refused, naming the limit.
    let limit = MAX_TREE_NODES.to_string();
    let over = MAX_TREE_NODES as i64 + 1;
    refused(
        &EngineFlags {
            speculative_eagle_topk: Some(4),
            speculative_num_draft_tokens: Some(over),
            ..spec_flags()
        },
        "B1",
        &[
            "--speculative-eagle-topk=4",
            &format!("--speculative-num-draft-tokens={over}"),
            &format!("at most {limit} nodes"),
        ],
    );
    // topk < 1 means nothing.
    for k in [0, -1] {
        refused(
            &EngineFlags {
                speculative_eagle_topk: Some(k),
                ..spec_flags()
            },
            "B1",
            &["--speculative-eagle-topk", &format!("={k}")],
        );
    }
    // topk 1 (or unset) stays a chain on V + F.
    let ok = accepted(&EngineFlags {
        speculative_eagle_topk: Some(1),
        ..spec_flags()
    });
    assert_eq!(ok.draft, DraftShape::Chain { tokens: Some(4) });
    assert!(ok.kernels().starts_with("V chain verify"), "{}", ok.kernels());
    accepted(&EngineFlags {
        speculative_eagle_topk: None,
        ..spec_flags()
    });
    // Without the spec ring any tree is fine (nothing of ours runs on it).
    let tree = accepted(&EngineFlags {
        enable_linear_replayssm_spec: false,
        speculative_eagle_topk: Some(4),
        speculative_num_draft_tokens: Some(64),
        ..spec_flags()
    });
    assert_eq!(
        tree.draft,
        DraftShape::Tree {
            topk: Some(4),
            nodes: Some(64)
        }
    );
}

#[test]
fn s1_chain_longer_than_the_verify_window_is_refused_early() {
    let over = MAX_DRAFT_TOKENS as i64 + 1;
    refused(
        &EngineFlags {
            speculative_num_draft_tokens: Some(over),
            ..spec_flags()
        },
        "S1",
        &[
            &format!("--speculative-num-draft-tokens={over}"),
            &format!("at most {MAX_DRAFT_TOKENS}"),
        ],
    );
    accepted(&EngineFlags {
        speculative_num_draft_tokens: Some(MAX_DRAFT_TOKENS as i64),
        ..spec_flags()
    });
}

#[test]
fn b2_spec_decode_backend_triton_or_flashinfer() {
    for b in ["helion", "cutlass"] {
        let f = EngineFlags {
            linear_attn_decode_backend: KernelFamily::parse(b),
            ..spec_flags()
        };
        refused(
            &f,
            "B2",
            &[
                "--enable-linear-replayssm-spec",
                "--linear-attn-decode-backend",
                &format!("'{b}'"),
            ],
        );
    }
    accepted(&EngineFlags {
        linear_attn_decode_backend: KernelFamily::Flashinfer,
        ..spec_flags()
    });
}

#[test]
fn b3_ragged_verify_only_for_dspark_dflash_on_triton_or_cutedsl() {
    let f = EngineFlags {
        ragged_verify_mode: VerifyLayout::Compact,
        ..spec_flags()
    };
    refused(&f, "B3", &["--ragged-verify-mode", "'compact'", "'EAGLE'"]);
    let f = EngineFlags {
        ragged_verify_mode: VerifyLayout::CapAccept,
        speculative_algorithm: Some(SpecAlgorithm::Dflash),
        linear_attn_verify_backend: Some(KernelFamily::Flashinfer),
        ..spec_flags()
    };
    refused(
        &f,
        "B3",
        &["'cap-accept'", "--linear-attn-verify-backend", "'flashinfer'"],
    );
    for (algo, vb) in [
        (SpecAlgorithm::Dflash, KernelFamily::Triton),
        (SpecAlgorithm::Dspark, KernelFamily::NvCutedsl),
    ] {
        let ok = accepted(&EngineFlags {
            ragged_verify_mode: VerifyLayout::Compact,
            speculative_algorithm: Some(algo),
            linear_attn_verify_backend: Some(vb),
            ..spec_flags()
        });
        assert_eq!(ok.verify_layout, VerifyLayout::Compact);
    }
}

#[test]
fn b4_spec_is_refused_on_a_prefill_server() {
    let f = EngineFlags {
        disaggregation_mode: PoolRole::PdPrefill,
        ..spec_flags()
    };
    refused(
        &f,
        "B4",
        &["--enable-linear-replayssm-spec", "--disaggregation-mode", "'prefill'"],
    );
}

#[test]
fn b5_buffered_and_spec_are_exclusive() {
    let f = EngineFlags {
        enable_linear_replayssm: true,
        ..spec_flags()
    };
    refused(
        &f,
        "B5",
        &["--enable-linear-replayssm", "--enable-linear-replayssm-spec"],
    );
}

#[test]
fn b6_b7_state_dtype_resolution_and_warning() {
    let ok = accepted(&spec_flags());
    assert_eq!(ok.state_dtype, StateDtype::Float32);
    assert!(
        ok.warnings
            .iter()
            .any(|w| w.starts_with("B6") && w.contains("--mamba-ssm-dtype")),
        "{:?}",
        ok.warnings
    );
    let bf = accepted(&EngineFlags {
        mamba_ssm_dtype: Some(StateDtype::Bfloat16),
        ..spec_flags()
    });
    assert_eq!(bf.state_dtype, StateDtype::Bfloat16);
    assert!(
        bf.warnings
            .iter()
            .any(|w| w.starts_with("B7") && w.contains("'bfloat16'")),
        "{:?}",
        bf.warnings
    );
    let f32 = accepted(&EngineFlags {
        mamba_ssm_dtype: Some(StateDtype::Float32),
        ..spec_flags()
    });
    assert!(f32.warnings.is_empty(), "{:?}", f32.warnings);
}

#[test]
fn n1_ngram_trees_use_the_tree_kernels_up_to_their_node_limit() {
    let ngram = |n: Option<i64>| EngineFlags {
        speculative_algorithm: Some(SpecAlgorithm::Ngram),
        speculative_eagle_topk: None,
        speculative_num_draft_tokens: n,
        ..spec_flags()
    };
    let cfg = accepted(&ngram(Some(8)));
    assert_eq!(
        cfg.draft,
        DraftShape::Tree {
            topk: None,
            nodes: Some(8)
        }
    );
    assert!(cfg.kernels().contains("VT tree verify"), "{}", cfg.kernels());
    let over = MAX_TREE_NODES as i64 + 1;
    refused(
        &ngram(Some(over)),
        "N1",
        &[
            "--speculative-algorithm='NGRAM'",
            &format!("--speculative-num-draft-tokens={over}"),
            &format!("at most {MAX_TREE_NODES} nodes"),
        ],
    );
    let unknown = accepted(&ngram(None));
    assert!(
        unknown.warnings.iter().any(|w| w.contains("tree")),
        "{:?}",
        unknown.warnings
    );
}

#[test]
fn p1_buffered_ring_cannot_attach_to_a_disaggregated_pool() {
    // A spec configuration on a PD decode server is valid, but a buffered ring on its pool is not.
    let cfg = accepted(&EngineFlags {
        disaggregation_mode: PoolRole::PdDecode,
        ..spec_flags()
    });
    let e = ring_error(DecodeRing::attach(&pool(&cfg)).map(|_| ()));
    assert_eq!(e.rule(), "P1");
    assert!(
        e.to_string().contains("disaggregated decode") && e.to_string().contains("'decode'"),
        "{e}"
    );
    let ring = DecodeRing::attach(&pool(&accepted(&buffered_flags()))).unwrap();
    assert_eq!(ring.cache_len(), 8);
    let e = ring_error(DecodeRing::attach(&pool(&accepted(&EngineFlags::default()))).map(|_| ()));
    assert_eq!(e, GateError::RingWithoutBufferedDecode);
    // And a spec ring only on a spec pool.
    let e = ring_error(SpecRing::for_pool(&pool(&accepted(&buffered_flags())), 4, DType::BF16, true).map(|_| ()));
    assert_eq!(e.rule(), "P1");
    assert!(e.to_string().contains("--enable-linear-replayssm-spec"), "{e}");
    let ring = SpecRing::for_pool(&pool(&cfg), 4, DType::BF16, true).unwrap();
    assert_eq!(ring.shape.slots, 3);
}

const DIMS: HeadDims = HeadDims {
    h: 1,
    hv: 2,
    k: 32,
    v: 16,
};

fn pool(cfg: &ResolvedConfig) -> CheckpointPool {
    CheckpointPool::new(cfg, DIMS, 2, 3).unwrap()
}

fn ring_error(r: replayssm::Result<()>) -> GateError {
    match r {
        Err(Error::Gate(g)) => g,
        other => panic!("expected a gate refusal, got {other:?}"),
    }
}

fn random_flags(r: &mut impl Rng) -> EngineFlags {
    let pick = |r: &mut dyn rand::RngCore, n: u32| r.next_u32() % n;
    let algos = [
        SpecAlgorithm::Nextn,
        SpecAlgorithm::Eagle,
        SpecAlgorithm::Eagle3,
        SpecAlgorithm::Standalone,
        SpecAlgorithm::Ngram,
        SpecAlgorithm::Dflash,
        SpecAlgorithm::Dspark,
    ];
    let backends = ["triton", "flashinfer", "helion", "nv_cutedsl", "cutlass"];
    EngineFlags {
        enable_linear_replayssm: r.gen_bool(0.5),
        enable_linear_replayssm_spec: r.gen_bool(0.5),
        linear_replayssm_cache_len: r.gen_bool(0.7).then(|| r.gen_range(-2..20)),
        disaggregation_mode: [PoolRole::Local, PoolRole::PdPrefill, PoolRole::PdDecode][pick(r, 3) as usize],
        mamba_radix_cache_strategy: if r.gen_bool(0.5) {
            RadixCacheStrategy::NoBuffer
        } else {
            RadixCacheStrategy::ExtraBuffer
        },
        speculative_algorithm: r.gen_bool(0.8).then(|| algos[pick(r, 7) as usize]),
        speculative_eagle_topk: r.gen_bool(0.5).then(|| r.gen_range(-1..5)),
        speculative_num_draft_tokens: r.gen_bool(0.5).then(|| r.gen_range(-1..24)),
        linear_attn_decode_backend: KernelFamily::parse(backends[pick(r, 5) as usize]),
        linear_attn_verify_backend: r
            .gen_bool(0.5)
            .then(|| KernelFamily::parse(backends[pick(r, 5) as usize])),
        mamba_ssm_dtype: r
            .gen_bool(0.6)
            .then(|| [StateDtype::Float32, StateDtype::Bfloat16, StateDtype::Float16][pick(r, 3) as usize]),
        ragged_verify_mode: [VerifyLayout::Static, VerifyLayout::CapAccept, VerifyLayout::Compact][pick(r, 3) as usize],
        linear_replayssm_spec_deferred_fold: r.gen_bool(0.3),
        linear_replayssm_spec_buffered: r.gen_bool(0.3),
        linear_attn_kind: if r.gen_bool(0.5) { Variant::Gdn } else { Variant::Kda },
    }
}

#[test]
fn random_flag_sets_never_panic_accepted_ones_build_pools_refused_ones_name_a_flag() {
    let mut r = rand_chacha::ChaCha8Rng::seed_from_u64(std::process::id() as u64);
    let (mut ok, mut refused_n) = (0, 0);
    for _ in 0..20000 {
        let f = random_flags(&mut r);
        match resolve(&f) {
            Ok(cfg) => {
                ok += 1;
                let pool = pool(&cfg);
                let spec_ring = SpecRing::for_pool(&pool, 8, DType::BF16, true);
                match cfg.mode {
                    Mode::Buffered { cache_len } => {
                        assert!(cache_len >= 1);
                        assert_eq!(
                            cfg.pool_role,
                            PoolRole::Local,
                            "buffered decode accepted on a PD pool: {f:?}"
                        );
                        assert_eq!(DecodeRing::attach(&pool).unwrap().cache_len(), cache_len);
                        assert!(spec_ring.is_err());
                    }
                    Mode::Spec { commit } => {
                        match cfg.draft {
                            DraftShape::Tree { nodes, .. } => {
                                assert!(nodes.unwrap_or(0) <= MAX_TREE_NODES, "tree over the limit: {f:?}");
                                assert!(cfg.kernels().contains("VT"), "{f:?}");
                            }
                            DraftShape::Chain { tokens } => {
                                assert!(tokens.unwrap_or(0) <= MAX_DRAFT_TOKENS, "chain over the limit: {f:?}");
                                let first = match commit {
                                    SpecCommit::Deferred => "VF ",
                                    SpecCommit::Buffered { .. } => "VB ",
                                    SpecCommit::EveryStep => "V ",
                                };
                                assert!(cfg.kernels().starts_with(first), "{f:?}");
                            }
                            DraftShape::None => {}
                        }
                        assert_ne!(cfg.pool_role, PoolRole::PdPrefill);
                        assert!(DecodeRing::attach(&pool).is_err());
                        assert!(spec_ring.is_ok(), "{f:?}");
                        let deferred = replayssm::DeferredRing::for_pool(&pool, 4, DType::BF16, true);
                        assert_eq!(deferred.is_ok(), commit == SpecCommit::Deferred, "{f:?}");
                        let buffered = replayssm::BufferedRing::for_pool(&pool, 1, DType::BF16, true);
                        let is_buffered = matches!(commit, SpecCommit::Buffered { .. });
                        assert_eq!(buffered.is_ok(), is_buffered, "{f:?}");
                        if let SpecCommit::Buffered { cache_len: l } = commit {
                            assert_eq!(cfg.pool_role, PoolRole::Local, "{f:?}");
                            assert!(!matches!(cfg.draft, DraftShape::Tree { .. }), "{f:?}");
                            let t = match cfg.draft {
                                DraftShape::Chain { tokens: Some(t) } => t,
                                _ => 1,
                            };
                            assert!(l >= 2 * t && l <= replayssm::limits::MAX_BUFFERED_CACHE_LEN, "{f:?}");
                        }
                    }
                    Mode::Off => {
                        assert!(DecodeRing::attach(&pool).is_err());
                        assert!(spec_ring.is_err());
                    }
                }
            }
            Err(e) => {
                refused_n += 1;
                assert!(e.to_string().contains("--"), "refusal names no flag: {e}");
            }
        }
    }
    assert!(
        ok > 1000 && refused_n > 1000,
        "{ok} accepted, {refused_n} refused: the generator is lopsided"
    );
}

#[test]
fn e1_e7_the_buffered_spec_mode_serves_local_static_chains_with_room_for_two_windows() {
    let buffered = EngineFlags {
        linear_replayssm_spec_buffered: true,
        linear_replayssm_cache_len: Some(16),
        speculative_algorithm: Some(SpecAlgorithm::Nextn),
        speculative_num_draft_tokens: Some(4),
        ..spec_flags()
    };
    let ok = accepted(&buffered);
    assert_eq!(
        ok.mode,
        Mode::Spec {
            commit: SpecCommit::Buffered { cache_len: 16 }
        }
    );
    assert!(ok.kernels().starts_with("VB "), "{}", ok.kernels());
    assert!(ok.to_string().contains("spec ring, buffered (cache_len 16)"), "{ok}");
    let default_len = accepted(&EngineFlags {
        linear_replayssm_cache_len: None,
        ..buffered.clone()
    });
    assert_eq!(
        default_len.mode,
        Mode::Spec {
            commit: SpecCommit::Buffered {
                cache_len: replayssm::config::DEFAULT_SPEC_CACHE_LEN
            }
        }
    );
    assert!(default_len
        .warnings
        .iter()
        .any(|w| w.contains("--linear-replayssm-cache-len")));
    refused(
        &EngineFlags {
            enable_linear_replayssm_spec: false,
            ..buffered.clone()
        },
        "E1",
        &["--linear-replayssm-spec-buffered", "--enable-linear-replayssm-spec"],
    );
    refused(
        &EngineFlags {
            linear_replayssm_spec_deferred_fold: true,
            ..buffered.clone()
        },
        "E2",
        &["--linear-replayssm-spec-deferred-fold"],
    );
    refused(
        &EngineFlags {
            speculative_eagle_topk: Some(2),
            ..buffered.clone()
        },
        "E3",
        &["--speculative-eagle-topk=2"],
    );
    refused(
        &EngineFlags {
            disaggregation_mode: PoolRole::PdDecode,
            ..buffered.clone()
        },
        "E4",
        &["--disaggregation-mode='decode'"],
    );
    refused(
        &EngineFlags {
            ragged_verify_mode: VerifyLayout::Compact,
            ..buffered.clone()
        },
        "E5",
        &["--ragged-verify-mode='compact'"],
    );
    refused(
        &EngineFlags {
            mamba_radix_cache_strategy: RadixCacheStrategy::ExtraBuffer,
            ..buffered.clone()
        },
        "E6",
        &["extra_buffer"],
    );
    refused(
        &EngineFlags {
            linear_replayssm_cache_len: Some(7),
            ..buffered.clone()
        },
        "E7",
        &["--linear-replayssm-cache-len=7", "2 T = 8"],
    );
    refused(
        &EngineFlags {
            linear_replayssm_cache_len: Some(0),
            ..buffered.clone()
        },
        "E7",
        &["--linear-replayssm-cache-len=0"],
    );
    // Past the ring VB stages in shared memory.
    refused(
        &EngineFlags {
            linear_replayssm_cache_len: Some(65),
            ..buffered.clone()
        },
        "E7",
        &["--linear-replayssm-cache-len=65", "1..=64"],
    );
    // P1: the ring only on a pool resolved with the mode, with room for two windows.
    let p = pool(&ok);
    let ring = replayssm::BufferedRing::for_pool(&p, 4, DType::BF16, true).unwrap();
    assert_eq!((ring.cache_len(), ring.window()), (16, 4));
    assert!(matches!(
        replayssm::BufferedRing::for_pool(&p, 9, DType::BF16, true),
        Err(Error::BadParam(m)) if m.contains("2 T = 18")
    ));
    let e = ring_error(
        replayssm::BufferedRing::for_pool(&pool(&accepted(&spec_flags())), 4, DType::BF16, true).map(|_| ()),
    );
    assert_eq!(e.rule(), "P1");
    assert!(e.to_string().contains("--linear-replayssm-spec-buffered"), "{e}");
}

#[test]
fn d1_d3_the_deferred_fold_needs_the_spec_ring_a_static_verify_and_no_ping_pong_donation() {
    let deferred = EngineFlags {
        linear_replayssm_spec_deferred_fold: true,
        ..spec_flags()
    };
    let ok = accepted(&deferred);
    assert_eq!(
        ok.mode,
        Mode::Spec {
            commit: SpecCommit::Deferred
        }
    );
    assert!(ok.kernels().starts_with("VF "), "{}", ok.kernels());
    assert!(ok.to_string().contains("spec ring, deferred fold"), "{ok}");
    refused(
        &EngineFlags {
            enable_linear_replayssm_spec: false,
            ..deferred.clone()
        },
        "D1",
        &[
            "--linear-replayssm-spec-deferred-fold",
            "--enable-linear-replayssm-spec",
        ],
    );
    refused(
        &EngineFlags {
            ragged_verify_mode: VerifyLayout::Compact,
            speculative_algorithm: Some(SpecAlgorithm::Dflash),
            ..deferred.clone()
        },
        "D2",
        &[
            "--ragged-verify-mode='compact'",
            "--linear-replayssm-spec-deferred-fold",
        ],
    );
    refused(
        &EngineFlags {
            mamba_radix_cache_strategy: RadixCacheStrategy::ExtraBuffer,
            ..deferred.clone()
        },
        "D3",
        &["--mamba-radix-cache-strategy='extra_buffer'", "no_buffer"],
    );
    // Served on a disaggregated decode server: transferred-in slots start with nothing pending.
    let pd = accepted(&EngineFlags {
        disaggregation_mode: PoolRole::PdDecode,
        ..deferred.clone()
    });
    assert_eq!(
        pd.mode,
        Mode::Spec {
            commit: SpecCommit::Deferred
        }
    );
    // The flag parses as SGLang spells it.
    let f = replayssm::engine_args::parse_engine_args(&[
        "--enable-linear-replayssm-spec",
        "--linear-replayssm-spec-deferred-fold",
    ])
    .unwrap();
    assert!(f.linear_replayssm_spec_deferred_fold);
}
